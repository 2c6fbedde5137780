package cluster

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/job"
	"idlepool/pool"
)

// SecretsBucket is the JetStream key-value bucket of the digests of the
// known-answers files of a divided pool's jobs: key "k.<digest in hex>",
// holding the digest in hex. The files of every shard's jobs are
// uploaded to shard 0, which mirrors and serves them; the shard that
// holds a job knows which of them are its known answers, and shard 0
// learns it here, so that it never serves them either
// (pool.Scheduler.SecretBlob).
const SecretsBucket = "idlepool_secrets"

// Secrets hands the digests of known-answers files from the shard that
// holds their job to every shard, over a replicated key-value bucket.
// It is safe for concurrent use.
type Secrets struct {
	kv jetstream.KeyValue
}

// OpenSecrets creates (or opens) the bucket with replicas replicas (the
// node's NodeConfig.Replicas). An error that JetStream did not answer
// matches pool.ErrStoreUnavailable.
func OpenSecrets(ctx context.Context, js jetstream.JetStream, replicas int) (*Secrets, error) {
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: SecretsBucket, Description: "idlepool: the known-answers files of the jobs, which no shard serves",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: secrets bucket: %w", unavailable(err))
	}
	return &Secrets{kv: kv}, nil
}

// Publish stores d; storing it again writes nothing. Errors: one
// wrapping pool.ErrBadRequest for the zero digest; one matching
// pool.ErrStoreUnavailable when JetStream did not answer (try again).
func (x *Secrets) Publish(ctx context.Context, d job.Digest) error {
	if d == (job.Digest{}) {
		return fmt.Errorf("cluster: publish secret: %w: the zero digest", pool.ErrBadRequest)
	}
	if _, err := x.kv.Create(ctx, "k."+d.String(), []byte(d.String())); err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSeq(err) {
		return fmt.Errorf("cluster: publish secret %s: %w", d, unavailable(err))
	}
	return nil
}

// Watch calls f with every digest stored in the bucket, those stored
// before Watch was called first, then each one as it is stored, until
// ctx ends; it then returns nil. A digest is handed over again after a
// node restarts its watch, so f must be idempotent
// (pool.Scheduler.AddSecret is); a value that does not parse is skipped.
// Errors: one matching pool.ErrStoreUnavailable when the watch could not
// start or JetStream ended it (watch again).
func (x *Secrets) Watch(ctx context.Context, f func(job.Digest)) error {
	return watchPuts(ctx, x.kv, "secrets", func(b []byte) (job.Digest, bool) {
		d, err := job.ParseDigest(string(b))
		return d, err == nil && d != (job.Digest{})
	}, f)
}
