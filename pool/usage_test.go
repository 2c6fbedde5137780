package pool_test

import (
	"errors"
	"math"
	"testing"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// shardOneJobs starts shard 1 of a pool of 2 with an older job of owner
// alice and a newer one of owner bob, and returns it with a device of a
// third owner that may compute both.
func shardOneJobs(t *testing.T) (*pooltest.Harness, string, map[string]string) {
	t.Helper()
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) { c.Shard, c.Shards = 1, 2 })
	a := h.Job("alice-old", 4, pooltest.Policy{}, h.Device("alice", "alice-1"))
	b := h.Job("bob-new", 4, pooltest.Policy{}, h.Device("bob", "bob-1"))
	return h, h.Device("erin", "erin-1"), map[string]string{a.ID.String(): "alice", b.ID.String(): "bob"}
}

// In a divided pool an owner's use of the other shards counts in each
// shard's fair share: alice's jobs used shard 0, so on shard 1 bob's
// newer job goes before hers once shard 1 knows it (SetShardUsage), and
// after it without.
func TestFairShareAcrossShards(t *testing.T) {
	zero := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) { c.Shard, c.Shards = 0, 2 })
	zero.Job("alice-on-zero", 6, pooltest.Policy{TaskCost: 5}, zero.Device("alice", "alice-0"))
	for _, d := range []string{zero.Device("carol", "carol-0"), zero.Device("dave", "dave-0")} {
		if ls := zero.Lease(d, 6); len(ls) != 6 {
			t.Fatalf("shard 0 leased %d tasks, want 6", len(ls))
		}
	}
	use := zero.S.Usage()
	if use.Shard != 0 || use.Owners[zero.Peers["alice-0"].Owner].Usage != 60 {
		t.Fatalf("shard 0's Usage: %+v, want alice's owner at 60 units", use)
	}

	// Without shard 0's figures: alice's older job first.
	alone, erin, owners := shardOneJobs(t)
	if ls := alone.Lease(erin, 1); len(ls) != 1 || owners[ls[0].Job.String()] != "alice" {
		t.Fatalf("shard 1 alone leased %+v, want a task of alice's older job", ls)
	}
	// With them: bob's.
	tied, erin, owners := shardOneJobs(t)
	if err := tied.S.SetShardUsage([]pool.ShardUsage{use, tied.S.Usage()}); err != nil {
		t.Fatalf("SetShardUsage: %v", err)
	}
	if ls := tied.Lease(erin, 1); len(ls) != 1 || owners[ls[0].Job.String()] != "bob" {
		t.Fatalf("shard 1 knowing shard 0's use leased %+v, want a task of bob's job", ls)
	}
	// Figures forgotten (an empty set): alice first again.
	again, erin, owners := shardOneJobs(t)
	if err := again.S.SetShardUsage([]pool.ShardUsage{use}); err != nil {
		t.Fatal(err)
	}
	if err := again.S.SetShardUsage(nil); err != nil {
		t.Fatal(err)
	}
	if ls := again.Lease(erin, 1); len(ls) != 1 || owners[ls[0].Job.String()] != "alice" {
		t.Fatalf("shard 1 after its figures were replaced by none leased %+v, want alice's", ls)
	}
}

// Figures that cannot be a shard's are refused, and nothing changes.
func TestShardUsageRefused(t *testing.T) {
	h, erin, owners := shardOneJobs(t)
	for name, su := range map[string]pool.ShardUsage{
		"shard out of range": {Shard: 2},
		"negative usage":     {Shard: 0, Owners: map[string]pool.OwnerUse{"x": {Usage: -1}}},
		"NaN contribution":   {Shard: 0, Owners: map[string]pool.OwnerUse{"x": {Contributed: math.NaN()}}},
		"infinite usage":     {Shard: 0, Owners: map[string]pool.OwnerUse{"x": {Usage: math.Inf(1)}}},
	} {
		if err := h.S.SetShardUsage([]pool.ShardUsage{su}); !errors.Is(err, pool.ErrBadRequest) {
			t.Errorf("%s: SetShardUsage: %v, want ErrBadRequest", name, err)
		}
	}
	if ls := h.Lease(erin, 1); len(ls) != 1 || owners[ls[0].Job.String()] != "alice" {
		t.Fatalf("leased %+v after refused figures, want alice's older job", ls)
	}
	undivided := newHarness(t, pool.NewMemStore(), nil)
	if err := undivided.S.SetShardUsage(nil); !errors.Is(err, pool.ErrBadRequest) {
		t.Errorf("SetShardUsage in an undivided pool: %v, want ErrBadRequest", err)
	}
}
