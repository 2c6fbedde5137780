package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// RulesBucket is the JetStream key-value bucket of the pool-wide rules
// every node of a cluster applies, whichever is in charge: the versions
// of idlepool it accepts (key "versions", a VersionRules in JSON) and
// how many shards its work is divided into (key "shards", the count in
// decimal, and " leases=per-shard" after it in a pool begun with
// ShardLeases).
const RulesBucket = "idlepool_rules"

const (
	versionsKey = "versions"
	shardsKey   = "shards"
)

// ErrShards means a node's shard count (NodeConfig.Shards) is not the
// pool's: the count the first node recorded (Rules.ClaimShards). Such a
// node must not start, since it would look for a job in another shard
// than the one that schedules it.
var ErrShards = errors.New("cluster: this node's shard count is not the pool's")

// VersionRules are the versions a clustered pool accepts and knows, as
// the operator gave them to a node (serve --min-agent-version,
// --min-api-version, --latest-agent-version): MinAgent the oldest
// idlepool ("X.Y.Z", "" for any), MinAPI the oldest API version (0 for
// any), LatestAgent the newest release ("" for unknown). Set names the
// node that stored them.
type VersionRules struct {
	MinAgent    string `json:"min_agent,omitempty"`
	MinAPI      int    `json:"min_api,omitempty"`
	LatestAgent string `json:"latest_agent,omitempty"`
	Set         string `json:"set_by,omitempty"`
}

// Rules keeps a clustered pool's VersionRules in a replicated key-value
// bucket, so that every node refuses the same devices as too old and
// states the same versions, whichever node is in charge and whichever
// was started with them. It is safe for concurrent use.
type Rules struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
}

// OpenRules creates (or opens) the bucket with replicas replicas. An
// error that JetStream did not answer matches pool.ErrStoreUnavailable.
func OpenRules(ctx context.Context, js jetstream.JetStream, replicas int) (*Rules, error) {
	kv, err := openKV(ctx, js, jetstream.KeyValueConfig{Bucket: RulesBucket, Description: "idlepool: the pool's rules, the same on every node",
		History: 1, Replicas: replicas, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, fmt.Errorf("cluster: rules bucket: %w", unavailable(err))
	}
	return &Rules{js: js, kv: kv}, nil
}

// PutVersions stores v as the cluster's version rules, in place of any
// stored before (the operator's latest word, from whichever node).
func (r *Rules) PutVersions(ctx context.Context, v VersionRules) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("cluster: store version rules: %w", err)
	}
	if _, err := r.kv.Put(ctx, versionsKey, b); err != nil {
		return fmt.Errorf("cluster: store version rules: %w", unavailable(err))
	}
	return nil
}

// Versions returns the stored version rules; ok is false when none were
// ever stored (the pool accepts any version). A value that does not
// parse is an error.
func (r *Rules) Versions(ctx context.Context) (v VersionRules, ok bool, err error) {
	e, err := r.kv.Get(ctx, versionsKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return VersionRules{}, false, nil
	}
	if err != nil {
		return VersionRules{}, false, fmt.Errorf("cluster: read version rules: %w", unavailable(err))
	}
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return VersionRules{}, false, fmt.Errorf("cluster: read version rules: %w", err)
	}
	return v, true, nil
}

// ShardLayout is what a pool's recorded shard count says beside the
// count: where the pool keeps its leases, and how it places its jobs.
type ShardLayout struct {
	Leases LeaseLayout
	Jobs   JobPlacement
}

// ClaimShards checks that k, this node's shard count, is the pool's, and
// returns where the pool keeps its leases and how it places its jobs
// (ShardLayout): the first node to call it
// records k (a create, which JetStream refuses when the key exists, so
// two first nodes cannot both win), and every later call compares.
// Another count is an error wrapping ErrShards that names both; an
// error that JetStream did not answer matches pool.ErrStoreUnavailable
// (try again). A pool whose nodes ran before shard counts were recorded
// has one shard: a first count above 1 is refused (ErrShards) when the
// undivided pool's state stream (StateStream) holds anything, since its
// jobs are all in shard 0.
//
// The first node records the lease layout with the count: ShardLeases
// for a new pool ("3 leases=per-shard"), SharedLeases ("3", as before
// layouts were recorded) when the shared lease bucket LeaderBucket
// exists, that is when nodes ran the pool before. A node of a version
// before ShardLeases reads no number in the first form and refuses to
// start, rather than take leases where this pool's nodes do not look.
// A divided pool begun with LoadPlacement records it after the lease
// layout ("3 leases=per-shard placement=load"), and a node of a version
// before it refuses to start on that record, rather than look for a
// job in its ShardOf shard when it was placed in another; an undivided
// pool, whose one shard holds every job, records no placement, and a
// pool recorded without one places by hash (HashPlacement) for its
// whole life.
// A recorded value that is none of these forms is an error naming it.
func (r *Rules) ClaimShards(ctx context.Context, k int) (ShardLayout, error) {
	if err := ValidateShardCount(k); err != nil {
		return ShardLayout{}, err
	}
	e, err := r.kv.Get(ctx, shardsKey)
	if err == nil {
		return compareShards(e.Value(), k)
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return ShardLayout{}, fmt.Errorf("cluster: read the shard count: %w", unavailable(err))
	}
	if k > 1 {
		st, err := r.js.Stream(ctx, StateStream)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return ShardLayout{}, fmt.Errorf("cluster: read the pool's state stream: %w", unavailable(err))
		}
		if err == nil {
			info, err := st.Info(ctx)
			if err != nil {
				return ShardLayout{}, fmt.Errorf("cluster: read the pool's state stream: %w", unavailable(err))
			}
			if info.State.Msgs > 0 || info.State.LastSeq > 0 {
				return ShardLayout{}, fmt.Errorf("%w: this node's cluster.toml says shards = %d, but the pool ran undivided before (its state stream %s holds %d messages): a pool is divided when it starts, never later",
					ErrShards, k, StateStream, info.State.Msgs)
			}
		}
	}
	record := strconv.Itoa(k) + " " + perShardLeases
	if k > 1 {
		record += " " + loadPlacement
	}
	_, err = r.js.KeyValue(ctx, LeaderBucket)
	switch {
	case err == nil:
		record = strconv.Itoa(k)
	case !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound):
		return ShardLayout{}, fmt.Errorf("cluster: look for the shared lease bucket %s: %w", LeaderBucket, unavailable(err))
	}
	_, err = r.kv.Create(ctx, shardsKey, []byte(record))
	if err == nil {
		return compareShards([]byte(record), k)
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return ShardLayout{}, fmt.Errorf("cluster: record the shard count: %w", unavailable(err))
	}
	e, err = getCreated(ctx, r.kv, shardsKey)
	if err != nil {
		return ShardLayout{}, fmt.Errorf("cluster: read the shard count: %w", unavailable(err))
	}
	return compareShards(e.Value(), k)
}

// perShardLeases follows the count in the recorded shard count of a
// pool begun with ShardLeases, and loadPlacement follows it in a
// divided pool begun with LoadPlacement.
const (
	perShardLeases = "leases=per-shard"
	loadPlacement  = "placement=load"
)

// compareShards reads a recorded shard count ("K", "K
// leases=per-shard" or "K leases=per-shard placement=load", K above 1
// in the last) and compares it with k, this node's count.
func compareShards(v []byte, k int) (ShardLayout, error) {
	f := strings.Fields(string(v))
	if len(f) == 0 {
		return ShardLayout{}, fmt.Errorf("cluster: the recorded shard count %q is not a number", v)
	}
	have, err := strconv.Atoi(f[0])
	if err != nil {
		return ShardLayout{}, fmt.Errorf("cluster: the recorded shard count %q is not a number", v)
	}
	var layout ShardLayout
	switch {
	case len(f) == 1:
	case len(f) == 2 && f[1] == perShardLeases:
		layout.Leases = ShardLeases
	case len(f) == 3 && f[1] == perShardLeases && f[2] == loadPlacement && have > 1:
		layout = ShardLayout{Leases: ShardLeases, Jobs: LoadPlacement}
	default:
		return ShardLayout{}, fmt.Errorf("cluster: the recorded shard count %q is not a count, a count and %q, or a count above 1, %q and %q",
			v, perShardLeases, perShardLeases, loadPlacement)
	}
	if have != k {
		return ShardLayout{}, fmt.Errorf("%w: this node's shard count is %d (its cluster.toml's shards; 1 where it gives none), the pool was started with %d: a job's shard is one of the count's, chosen when the job was added, so the count cannot change",
			ErrShards, k, have)
	}
	return layout, nil
}
