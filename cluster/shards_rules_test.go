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
	if layout, err := late.ClaimShards(t.Context(), 3); err != nil || layout != ShardLeases {
		t.Fatalf("ClaimShards tried again: %v, %v; want per-shard leases", layout, err)
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
	if layout, err := r.ClaimShards(ctx, 4); err != nil || layout != ShardLeases {
		t.Fatalf("first ClaimShards(4) of a new pool: %v, %v; want per-shard leases", layout, err)
	}
	if layout, err := r.ClaimShards(ctx, 4); err != nil || layout != ShardLeases {
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

// Where a pool keeps its leases is recorded with its shard count: per
// shard for a new pool, in a form a node of an older version cannot
// read as a count (it refuses to start); shared when the shared lease
// bucket exists (nodes of an older version ran the pool), in the older
// form; shared for a count recorded by such nodes. A record in neither
// form is refused, naming it.
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
		if layout, err := r.ClaimShards(ctx, 3); err != nil || layout != ShardLeases {
			t.Fatalf("ClaimShards: %v, %v", layout, err)
		}
		got := recorded(t, kv)
		if got != "3 leases=per-shard" {
			t.Errorf("recorded %q", got)
		}
		if _, err := strconv.Atoi(got); err == nil {
			t.Errorf("%q reads as a count, as a node of an older version reads it", got)
		}
		// The buckets follow the record, and another node's ClaimShards
		// finds it whatever buckets exist by then.
		newLeadership(t, node, 1, 5*time.Second, ShardLeases, 3)
		if layout, err := r.ClaimShards(ctx, 3); err != nil || layout != ShardLeases {
			t.Fatalf("ClaimShards again: %v, %v", layout, err)
		}
	})
	t.Run("older nodes ran it", func(t *testing.T) {
		node, r, kv := open(t)
		newLeadership(t, node, 1, 5*time.Second, SharedLeases, 2)
		if layout, err := r.ClaimShards(ctx, 2); err != nil || layout != SharedLeases {
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
		if layout, err := r.ClaimShards(ctx, 2); err != nil || layout != SharedLeases {
			t.Fatalf("ClaimShards: %v, %v", layout, err)
		}
	})
	t.Run("unreadable", func(t *testing.T) {
		_, r, kv := open(t)
		if _, err := kv.Create(ctx, "shards", []byte("2 leases=sideways")); err != nil {
			t.Fatal(err)
		}
		if _, err := r.ClaimShards(ctx, 2); err == nil || !strings.Contains(err.Error(), `"2 leases=sideways"`) {
			t.Fatalf("ClaimShards over an unreadable record: %v", err)
		}
	})
}
