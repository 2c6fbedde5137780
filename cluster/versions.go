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

// ClaimShards checks that k, this node's shard count, is the pool's, and
// returns where the pool keeps its leases: the first node to call it
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
// A recorded value that is neither form is an error naming it.
func (r *Rules) ClaimShards(ctx context.Context, k int) (LeaseLayout, error) {
	if err := ValidateShardCount(k); err != nil {
		return 0, err
	}
	e, err := r.kv.Get(ctx, shardsKey)
	if err == nil {
		return compareShards(e.Value(), k)
	}
	if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fmt.Errorf("cluster: read the shard count: %w", unavailable(err))
	}
	if k > 1 {
		st, err := r.js.Stream(ctx, StateStream)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return 0, fmt.Errorf("cluster: read the pool's state stream: %w", unavailable(err))
		}
		if err == nil {
			info, err := st.Info(ctx)
			if err != nil {
				return 0, fmt.Errorf("cluster: read the pool's state stream: %w", unavailable(err))
			}
			if info.State.Msgs > 0 || info.State.LastSeq > 0 {
				return 0, fmt.Errorf("%w: this node's cluster.toml says shards = %d, but the pool ran undivided before (its state stream %s holds %d messages): a pool is divided when it starts, never later",
					ErrShards, k, StateStream, info.State.Msgs)
			}
		}
	}
	record := strconv.Itoa(k) + " " + perShardLeases
	_, err = r.js.KeyValue(ctx, LeaderBucket)
	switch {
	case err == nil:
		record = strconv.Itoa(k)
	case !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, jetstream.ErrStreamNotFound):
		return 0, fmt.Errorf("cluster: look for the shared lease bucket %s: %w", LeaderBucket, unavailable(err))
	}
	_, err = r.kv.Create(ctx, shardsKey, []byte(record))
	if err == nil {
		return compareShards([]byte(record), k)
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return 0, fmt.Errorf("cluster: record the shard count: %w", unavailable(err))
	}
	e, err = getCreated(ctx, r.kv, shardsKey)
	if err != nil {
		return 0, fmt.Errorf("cluster: read the shard count: %w", unavailable(err))
	}
	return compareShards(e.Value(), k)
}

// perShardLeases follows the count in the recorded shard count of a
// pool begun with ShardLeases.
const perShardLeases = "leases=per-shard"

// compareShards reads a recorded shard count ("K" or "K
// leases=per-shard") and compares it with k, this node's count.
func compareShards(v []byte, k int) (LeaseLayout, error) {
	f := strings.Fields(string(v))
	layout := SharedLeases
	if len(f) == 2 && f[1] == perShardLeases {
		layout = ShardLeases
	} else if len(f) != 1 {
		return 0, fmt.Errorf("cluster: the recorded shard count %q is not a count, or a count and %q", v, perShardLeases)
	}
	have, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, fmt.Errorf("cluster: the recorded shard count %q is not a number", v)
	}
	if have != k {
		return 0, fmt.Errorf("%w: this node's shard count is %d (its cluster.toml's shards; 1 where it gives none), the pool was started with %d: a job's shard follows from its ID and the count, so the count cannot change",
			ErrShards, k, have)
	}
	return layout, nil
}
