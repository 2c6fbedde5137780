package cluster

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// lateKV is a key-value bucket whose Create says "exists" for the keys
// in made, once each, and whose Get says "not found" for those in late,
// as many times as it says: a server that has not applied a key another
// node wrote a moment before.
type lateKV struct {
	jetstream.KeyValue
	made map[string]bool
	late map[string]int
}

func (k *lateKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if k.made[key] {
		delete(k.made, key)
		return 0, jetstream.ErrKeyExists
	}
	return k.KeyValue.Create(ctx, key, value, opts...)
}

func (k *lateKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if k.late[key] > 0 {
		k.late[key]--
		return nil, jetstream.ErrKeyNotFound
	}
	return k.KeyValue.Get(ctx, key)
}

// A shard count that another node recorded a moment ago, and that the
// server answering does not know yet (the create says it exists, the
// read then "not found"), makes ClaimShards wait and try again
// (pool.ErrStoreUnavailable), not fail: seen on a three-node first start
// under load, where node1 stopped serving and its shards waited for it
// for the test's patience.
func TestClaimShardsWaitsForACountNotKnownYet(t *testing.T) {
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	r, err := OpenRules(t.Context(), node.JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	late := &Rules{js: r.js, kv: &lateKV{KeyValue: r.kv, made: map[string]bool{shardsKey: true}, late: map[string]int{shardsKey: 2}}}
	_, err = late.ClaimShards(t.Context(), 3)
	if !errors.Is(err, pool.ErrStoreUnavailable) || !strings.Contains(err.Error(), "not known yet") {
		t.Fatalf("ClaimShards with the count recorded but not known yet: %v; want a wait (pool.ErrStoreUnavailable) that says why", err)
	}
	if layout, err := late.ClaimShards(t.Context(), 3); err != nil || layout != (ShardLayout{ShardLeases, LoadPlacement}) {
		t.Fatalf("ClaimShards tried again: %v, %v; want per-shard leases, jobs placed by load", layout, err)
	}
	// The pool key likewise.
	js := &lateJS{JetStream: node.JetStream(), kvs: map[string]*lateKV{
		PoolKeyBucket: {made: map[string]bool{poolKeyKey: true}, late: map[string]int{poolKeyKey: 1}}}}
	pub := pooltest.Key(t, "pool").Public()
	if err := ClaimPoolKey(t.Context(), js, 1, pub); !errors.Is(err, pool.ErrStoreUnavailable) || !strings.Contains(err.Error(), "not known yet") {
		t.Fatalf("ClaimPoolKey with the key recorded but not known yet: %v; want a wait (pool.ErrStoreUnavailable) that says why", err)
	}
	if err := ClaimPoolKey(t.Context(), js, 1, pub); err != nil {
		t.Fatalf("ClaimPoolKey tried again: %v", err)
	}
}

// A pool's shard count is fixed by its first node: a node with the same
// count starts, one with another is refused with both counts named, and
// a count out of range is refused before anything is stored.
func TestClaimShards(t *testing.T) {
	node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := OpenRules(ctx, node.JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ClaimShards(ctx, 0); !errors.Is(err, ErrShard) {
		t.Fatalf("ClaimShards(0) = %v, want ErrShard", err)
	}
	want := ShardLayout{ShardLeases, LoadPlacement}
	if layout, err := r.ClaimShards(ctx, 4); err != nil || layout != want {
		t.Fatalf("first ClaimShards(4) of a new pool: %v, %v; want per-shard leases, jobs placed by load", layout, err)
	}
	if layout, err := r.ClaimShards(ctx, 4); err != nil || layout != want {
		t.Fatalf("second ClaimShards(4): %v, %v", layout, err)
	}
	_, err = r.ClaimShards(ctx, 3)
	if !errors.Is(err, ErrShards) || !strings.Contains(err.Error(), "shard count is 3") || !strings.Contains(err.Error(), "started with 4") {
		t.Fatalf("ClaimShards(3) after 4 = %v, want ErrShards naming both counts", err)
	}
}

// A pool that ran undivided (its state stream holds a batch) is not
// divided later: its jobs are all in shard 0's stream, whatever their
// shard among K. A first count of 1 is recorded as for a new pool.
func TestClaimShardsAfterUndividedState(t *testing.T) {
	node, w := oneNodeStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Commit(ctx, &pool.Batch{Jobs: []pool.JobRecord{{ID: job.ID{1}, Canonical: []byte("{}"), Owner: "o", Order: 1, Added: time.Unix(1, 0)}}}); err != nil {
		t.Fatal(err)
	}
	r, err := OpenRules(ctx, node.JetStream(), 1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.ClaimShards(ctx, 2)
	if !errors.Is(err, ErrShards) || !strings.Contains(err.Error(), "ran undivided") {
		t.Fatalf("ClaimShards(2) over an undivided pool's state = %v, want ErrShards", err)
	}
	if _, err := r.ClaimShards(ctx, 1); err != nil {
		t.Fatalf("ClaimShards(1) over an undivided pool's state: %v", err)
	}
}

// Where a pool keeps its leases, and how it places its jobs, are
// recorded with its shard count: per shard and by load for a new
// divided pool, in a form a node of an older version cannot read (it
// refuses to start); per shard and no placement for a new undivided
// one, as before; shared and by hash when the shared lease bucket
// exists (nodes of an older version ran the pool), in the older form;
// as recorded for a count recorded by such nodes. A record in none of
// these forms is refused, naming it.
func TestClaimShardsLeaseLayout(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	open := func(t *testing.T) (*Node, *Rules, jetstream.KeyValue) {
		node := startNodes(t, testConfigs(t, t.TempDir(), 1))[0]
		r, err := OpenRules(ctx, node.JetStream(), 1)
		if err != nil {
			t.Fatal(err)
		}
		kv, err := node.JetStream().KeyValue(ctx, RulesBucket)
		if err != nil {
			t.Fatal(err)
		}
		return node, r, kv
	}
	recorded := func(t *testing.T, kv jetstream.KeyValue) string {
		e, err := kv.Get(ctx, "shards")
		if err != nil {
			t.Fatal(err)
		}
		return string(e.Value())
	}
	t.Run("new pool", func(t *testing.T) {
		node, r, kv := open(t)
		want := ShardLayout{ShardLeases, LoadPlacement}
		if layout, err := r.ClaimShards(ctx, 3); err != nil || layout != want {
			t.Fatalf("ClaimShards: %v, %v", layout, err)
		}
		got := recorded(t, kv)
		if got != "3 leases=per-shard placement=load" {
			t.Errorf("recorded %q", got)
		}
		if _, err := strconv.Atoi(got); err == nil {
			t.Errorf("%q reads as a count, as a node of an older version reads it", got)
		}
		if f := strings.Fields(got); len(f) == 2 && f[1] == "leases=per-shard" {
			t.Errorf("%q reads as a count and leases per shard, as a node of the version before placement reads it", got)
		}
		// The buckets follow the record, and another node's ClaimShards
		// finds it whatever buckets exist by then.
		newLeadership(t, node, 1, 5*time.Second, ShardLeases, 3)
		if layout, err := r.ClaimShards(ctx, 3); err != nil || layout != want {
			t.Fatalf("ClaimShards again: %v, %v", layout, err)
		}
	})
	t.Run("new undivided pool", func(t *testing.T) {
		_, r, kv := open(t)
		if layout, err := r.ClaimShards(ctx, 1); err != nil || layout != (ShardLayout{Leases: ShardLeases}) {
			t.Fatalf("ClaimShards: %v, %v", layout, err)
		}
		if got := recorded(t, kv); got != "1 leases=per-shard" {
			t.Errorf("recorded %q, want no placement", got)
		}
	})
	t.Run("begun before placement", func(t *testing.T) {
		_, r, kv := open(t)
		if _, err := kv.Create(ctx, "shards", []byte("3 leases=per-shard")); err != nil {
			t.Fatal(err)
		}
		if layout, err := r.ClaimShards(ctx, 3); err != nil || layout != (ShardLayout{Leases: ShardLeases}) {
			t.Fatalf("ClaimShards: %v, %v; want per-shard leases, jobs placed by hash", layout, err)
		}
	})
	t.Run("older nodes ran it", func(t *testing.T) {
		node, r, kv := open(t)
		newLeadership(t, node, 1, 5*time.Second, SharedLeases, 2)
		if layout, err := r.ClaimShards(ctx, 2); err != nil || layout != (ShardLayout{}) {
			t.Fatalf("ClaimShards: %v, %v", layout, err)
		}
		if got := recorded(t, kv); got != "2" {
			t.Errorf("recorded %q, want 2 as before", got)
		}
	})
	t.Run("recorded by older nodes", func(t *testing.T) {
		_, r, kv := open(t)
		if _, err := kv.Create(ctx, "shards", []byte("2")); err != nil {
			t.Fatal(err)
		}
		if layout, err := r.ClaimShards(ctx, 2); err != nil || layout != (ShardLayout{}) {
			t.Fatalf("ClaimShards: %v, %v", layout, err)
		}
	})
	for _, v := range []string{"2 leases=sideways", "2 placement=load", "1 leases=per-shard placement=load", "2 leases=per-shard placement=hash", "01 leases=per-shard placement=load"} {
		t.Run("unreadable "+v, func(t *testing.T) {
			_, r, kv := open(t)
			if _, err := kv.Create(ctx, "shards", []byte(v)); err != nil {
				t.Fatal(err)
			}
			k, _ := strconv.Atoi(strings.Fields(v)[0])
			if _, err := r.ClaimShards(ctx, k); err == nil || !strings.Contains(err.Error(), strconv.Quote(v)) {
				t.Fatalf("ClaimShards over an unreadable record: %v", err)
			}
		})
	}
}
