package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// DeviationsBucket is the JetStream key-value bucket of the deviations
// decided by a clustered pool's shards (pool.Deviation): one key per
// deviation, "d.<device>.<ms>" (the device's ID escaped as
// exclusionKey escapes it, and the unix milliseconds of the decision),
// holding it in JSON (deviationValue). Keys older than DeviationsMaxAge
// are dropped by JetStream.
const DeviationsBucket = "idlepool_deviations"

// DeviationsMaxAge is how long the bucket keeps a deviation: far longer
// than any pool counts deviations for (pool.TrustConfig.ExcludeFor, a
// day by default); a pool that counts them for longer counts the other
// shards' for this long only.
const DeviationsMaxAge = 30 * 24 * time.Hour

// deviationValue is a pool.Deviation as the bucket stores it.
type deviationValue struct {
	Device string `json:"device"`
	Owner  string `json:"owner"`
	At     int64  `json:"at"` // unix milliseconds
}

// Deviations hands the deviations one shard of a clustered pool decides
// to the others, over a replicated key-value bucket, so that a device
// caught deviating on one shard loses its trust on every shard and its
// deviations count towards exclusion wherever they were decided
// (RATIONALE.md, "Dividing the work among the nodes", item 5). It is
// safe for concurrent use.
type Deviations struct {
	kv jetstream.KeyValue
}

// OpenDeviations creates (or opens) the bucket with replicas replicas
// (the node's NodeConfig.Replicas). An error that JetStream did not
// answer matches pool.ErrStoreUnavailable.
func OpenDeviations(ctx context.Context, js jetstream.JetStream, replicas int) (*Deviations, error) {
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: DeviationsBucket, Description: "idlepool: deviations decided by a shard, counted by every shard",
		History: 1, TTL: DeviationsMaxAge, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: deviations bucket: %w", unavailable(err))
	}
	return &Deviations{kv: kv}, nil
}

// Publish stores dv under its own key; publishing it again writes
// nothing. Errors: one wrapping pool.ErrBadRequest when dv names no
// device, no owner or no time; one matching pool.ErrStoreUnavailable
// when JetStream did not answer (try again).
func (x *Deviations) Publish(ctx context.Context, dv pool.Deviation) error {
	if dv.Device == "" || dv.Owner == "" || dv.At.IsZero() {
		return fmt.Errorf("cluster: publish deviation of device %q of owner %q: %w: device, owner and time are required", dv.Device, dv.Owner, pool.ErrBadRequest)
	}
	v := deviationValue{Device: dv.Device, Owner: dv.Owner, At: dv.At.UnixMilli()}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("cluster: publish deviation of device %s: %w", dv.Device, err)
	}
	key := exclusionKey("d", dv.Device) + "." + strconv.FormatInt(v.At, 10)
	if _, err := x.kv.Create(ctx, key, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !isWrongLastSeq(err) {
		return fmt.Errorf("cluster: publish deviation of device %s: %w", dv.Device, unavailable(err))
	}
	return nil
}

// Watch calls f with every deviation stored in the bucket, those stored
// before Watch was called first, then each one as it is stored, until ctx
// ends; it then returns nil. A deviation is handed over again after a
// node restarts its watch, and the deciding shard gets its own back, so
// f must be idempotent (pool.Scheduler.Deviated is). A value that does
// not parse is skipped. f is called on Watch's goroutine, one call at a
// time. Errors: one matching pool.ErrStoreUnavailable when the watch
// could not start or JetStream ended it (watch again).
func (x *Deviations) Watch(ctx context.Context, f func(pool.Deviation)) error {
	return watchPuts(ctx, x.kv, "deviations", func(b []byte) (pool.Deviation, bool) {
		var v deviationValue
		if json.Unmarshal(b, &v) != nil || v.Device == "" || v.Owner == "" || v.At == 0 {
			return pool.Deviation{}, false
		}
		return pool.Deviation{Device: v.Device, Owner: v.Owner, At: time.UnixMilli(v.At)}, true
	}, f)
}
