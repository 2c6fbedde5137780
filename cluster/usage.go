package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/pool"
)

// UsageBucket is the JetStream key-value bucket where the shards of a
// divided pool publish their owners' fair-share figures for one another
// (pool.Scheduler.Usage, pool.Scheduler.SetShardUsage): key "shard.S"
// holds shard S's as JSON, {"at": unix milliseconds, "owners": {"OWNER":
// [usage, contributed], ...}}, figures in cost units.
const UsageBucket = "idlepool_usage"

// usageValue is a pool.ShardUsage as the bucket stores it.
type usageValue struct {
	At     int64                 `json:"at"`
	Owners map[string][2]float64 `json:"owners"`
}

// Usage keeps the fair-share figures of a divided pool's shards in a
// replicated key-value bucket (UsageBucket), so that each shard ranks an
// owner by its use and contribution over the whole pool (RATIONALE.md,
// "Dividing the work among the nodes", item 5). It is safe for
// concurrent use.
type Usage struct {
	kv     jetstream.KeyValue
	shards int
}

// OpenUsage creates (or opens) the bucket of a pool of shards shards (2
// to MaxShards) with replicas replicas (the node's
// NodeConfig.Replicas). An error that JetStream did not answer matches
// pool.ErrStoreUnavailable.
func OpenUsage(ctx context.Context, js jetstream.JetStream, shards, replicas int) (*Usage, error) {
	if shards < 2 || shards > MaxShards {
		return nil, fmt.Errorf("cluster: usage of %d shards: %w: 2 to %d", shards, pool.ErrBadRequest, MaxShards)
	}
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: UsageBucket, Description: "idlepool: each shard's owners' fair-share figures, for the others",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: usage bucket: %w", unavailable(err))
	}
	return &Usage{kv: kv, shards: shards}, nil
}

// Publish stores u as its shard's figures, replacing those stored
// before. Errors: one wrapping pool.ErrBadRequest for a shard out of
// range or a figure that is negative or not finite; one matching
// pool.ErrStoreUnavailable when JetStream did not answer (publish
// again).
func (x *Usage) Publish(ctx context.Context, u pool.ShardUsage) error {
	if u.Shard < 0 || u.Shard >= x.shards {
		return fmt.Errorf("cluster: publish usage of shard %d: %w: shards 0 to %d", u.Shard, pool.ErrBadRequest, x.shards-1)
	}
	v := usageValue{At: u.At.UnixMilli(), Owners: make(map[string][2]float64, len(u.Owners))}
	for id, o := range u.Owners {
		if !finiteUse(o.Usage) || !finiteUse(o.Contributed) {
			return fmt.Errorf("cluster: publish usage of shard %d: %w: owner %s: usage %v, contributed %v", u.Shard, pool.ErrBadRequest, id, o.Usage, o.Contributed)
		}
		v.Owners[id] = [2]float64{o.Usage, o.Contributed}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("cluster: publish usage of shard %d: %w", u.Shard, err)
	}
	if _, err := x.kv.Put(ctx, shardKey(u.Shard), b); err != nil {
		return fmt.Errorf("cluster: publish usage of shard %d: %w", u.Shard, unavailable(err))
	}
	return nil
}

func finiteUse(f float64) bool { return f >= 0 && !math.IsInf(f, 1) }

// Read returns the figures each shard published, in shard order; a
// shard that published none yet, or whose value does not parse, is left
// out. Errors: one matching pool.ErrStoreUnavailable when JetStream did
// not answer.
func (x *Usage) Read(ctx context.Context) ([]pool.ShardUsage, error) {
	return readShards(ctx, x.kv, x.shards, "usage", parseUsage)
}

// parseUsage reads shard's figures from the bucket's value b.
func parseUsage(shard int, b []byte) (pool.ShardUsage, bool) {
	var v usageValue
	if json.Unmarshal(b, &v) != nil || v.At <= 0 {
		return pool.ShardUsage{}, false
	}
	u := pool.ShardUsage{Shard: shard, At: time.UnixMilli(v.At), Owners: make(map[string]pool.OwnerUse, len(v.Owners))}
	for id, f := range v.Owners {
		if !finiteUse(f[0]) || !finiteUse(f[1]) {
			return pool.ShardUsage{}, false
		}
		u.Owners[id] = pool.OwnerUse{Usage: f[0], Contributed: f[1]}
	}
	return u, true
}
