package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/identity"
)

// PoolKeyBucket is the JetStream key-value bucket that records the
// pool's public key under the key "pool": the key of the first node that
// started, which every other node must hold too (ClaimPoolKey).
const PoolKeyBucket = "idlepool_pool_key"

const poolKeyKey = "pool"

// ErrPoolKey means a node does not hold the pool's key: its key file is
// missing or damaged, or holds another key than the one the cluster's
// nodes sign receipts with. Such a node must not start: receipts it
// signed would not verify against the pool's key.
var ErrPoolKey = errors.New("cluster: this node does not hold the pool's key")

// ClaimPoolKey checks that pub, this node's pool key, is the pool's: the
// first node to call it records its key in PoolKeyBucket (replicated
// with replicas replicas; a create that JetStream refuses when the key
// exists, so two first nodes cannot both win), and every later call
// compares. Another key is an error wrapping ErrPoolKey that names both
// keys; an error that JetStream did not answer matches
// pool.ErrStoreUnavailable (try again).
func ClaimPoolKey(ctx context.Context, js jetstream.JetStream, replicas int, pub ed25519.PublicKey) error {
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: PoolKeyBucket, Description: "idlepool: the pool's public key",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return fmt.Errorf("cluster: pool key bucket: %w", unavailable(err))
	}
	_, err = kv.Create(ctx, poolKeyKey, pub)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return fmt.Errorf("cluster: record the pool key: %w", unavailable(err))
	}
	e, err := getCreated(ctx, kv, poolKeyKey)
	if err != nil {
		return fmt.Errorf("cluster: read the pool key: %w", unavailable(err))
	}
	if !bytes.Equal(e.Value(), pub) {
		return fmt.Errorf("%w: this node's key is %s, the pool's (which the other nodes sign receipts with) is %s",
			ErrPoolKey, identity.EncodePublic(pub), identity.EncodePublic(e.Value()))
	}
	return nil
}
