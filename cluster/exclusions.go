package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// ExclusionsBucket is the JetStream key-value bucket of the devices and
// owners excluded from computing in a clustered pool (pool.Exclusion):
// key "device.<ID>" per device and "owner.<ID>" per owner (IDs escaped
// by exclusionKey), each holding the exclusion that ends last among those
// that named it, in JSON (exclusionValue).
const ExclusionsBucket = "idlepool_exclusions"

// exclusionValue is a pool.Exclusion as the bucket stores it.
type exclusionValue struct {
	Device string `json:"device"`
	Owner  string `json:"owner"`
	Until  int64  `json:"until"` // unix milliseconds
	Reason string `json:"reason,omitempty"`
}

// Exclusions keeps a clustered pool's exclusions in a replicated
// key-value bucket, so that a device (and its owner) that one shard's
// Scheduler excludes is excluded by every shard's, on every node
// (RATIONALE.md, "Dividing the work among the nodes", item 5). It is safe
// for concurrent use.
type Exclusions struct {
	kv jetstream.KeyValue
}

// OpenExclusions creates (or opens) the bucket with replicas replicas
// (the node's NodeConfig.Replicas). An error that JetStream did not
// answer matches pool.ErrStoreUnavailable.
func OpenExclusions(ctx context.Context, js jetstream.JetStream, replicas int) (*Exclusions, error) {
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: ExclusionsBucket, Description: "idlepool: devices and owners excluded from the pool, for every shard",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: exclusions bucket: %w", unavailable(err))
	}
	return &Exclusions{kv: kv}, nil
}

// Publish stores e under its device's key and its owner's, each unless
// the exclusion stored there ends as late or later: a later exclusion is
// never shortened by an earlier one, whichever node publishes last
// (compare-and-set on each key's revision, read again on a conflict).
// Publishing an exclusion again writes nothing. Errors: one wrapping
// pool.ErrBadRequest when e names no device, no owner or no end; one
// matching pool.ErrStoreUnavailable when JetStream did not answer (try
// again).
func (x *Exclusions) Publish(ctx context.Context, e pool.Exclusion) error {
	if e.Device == "" || e.Owner == "" || e.Until.IsZero() {
		return fmt.Errorf("cluster: publish exclusion of device %q of owner %q: %w: device, owner and end are required", e.Device, e.Owner, pool.ErrBadRequest)
	}
	v := exclusionValue{Device: e.Device, Owner: e.Owner, Until: e.Until.UnixMilli(), Reason: e.Reason}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("cluster: publish exclusion of device %s: %w", e.Device, err)
	}
	for _, key := range []string{exclusionKey("device", e.Device), exclusionKey("owner", e.Owner)} {
		keep := func(old []byte) bool {
			var have exclusionValue
			return json.Unmarshal(old, &have) == nil && have.Until >= v.Until
		}
		if err := putUnlessKept(ctx, x.kv, key, b, keep); err != nil {
			return fmt.Errorf("cluster: publish exclusion of device %s: %w", e.Device, err)
		}
	}
	return nil
}

// Watch calls f with every exclusion stored in the bucket, those stored
// before Watch was called first, then each one as it is stored, until ctx
// ends; it then returns nil. An exclusion is handed over once per key
// that holds it (its device's and its owner's), and again after a node
// restarts its watch, so f must be idempotent (pool.Scheduler.Exclude
// is); exclusions long ended are handed over too (Exclude ignores them).
// A value that does not parse is skipped. f is called on Watch's
// goroutine, one call at a time; while it runs no other exclusion is
// read. Errors: one matching pool.ErrStoreUnavailable when the watch
// could not start or JetStream ended it (watch again).
func (x *Exclusions) Watch(ctx context.Context, f func(pool.Exclusion)) error {
	return watchPuts(ctx, x.kv, "exclusions", func(b []byte) (pool.Exclusion, bool) {
		var v exclusionValue
		if json.Unmarshal(b, &v) != nil || v.Device == "" || v.Owner == "" || v.Until == 0 {
			return pool.Exclusion{}, false
		}
		return pool.Exclusion{Device: v.Device, Owner: v.Owner, Until: time.UnixMilli(v.Until), Reason: v.Reason}, true
	}, f)
}

// exclusionKey is the bucket's key of the device or owner (kind) id:
// kind, a dot, and id with every byte other than an ASCII letter, digit
// or '-' written as '_' and two lowercase hex digits, so any ID makes a
// valid key of one token after the kind, and distinct IDs distinct keys.
// Identity IDs ("id" and base32 in lowercase, identity.IDOf) are kept as
// they are.
func exclusionKey(kind, id string) string {
	var b strings.Builder
	b.WriteString(kind)
	b.WriteByte('.')
	for i := 0; i < len(id); i++ {
		c := id[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "_%02x", c)
	}
	return b.String()
}
