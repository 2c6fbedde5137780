package pool_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// Lease IDs grow in the order the scheduler mints them, so that a store
// indexing replicas by lease appends to the end of its index (one page
// per group commit instead of one per new lease); they keep their wire
// shape of 32 lowercase hex digits.
func TestSchedLeaseIDsAscend(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	h.Job("ids", 64, pooltest.Policy{}, alice)
	shape := regexp.MustCompile(`^[0-9a-f]{32}$`)
	var ids []string
	for range 8 {
		for _, dev := range []string{bob, carol} {
			for _, l := range h.Lease(dev, 4) {
				ids = append(ids, l.ID)
				h.Submit(l, good(l.Task))
			}
		}
	}
	if len(ids) != 64 {
		t.Fatalf("%d leases, want 64", len(ids))
	}
	for i, id := range ids {
		if !shape.MatchString(id) {
			t.Fatalf("lease %d: ID %q is not 32 lowercase hex digits", i, id)
		}
		if i > 0 && id <= ids[i-1] {
			t.Fatalf("lease %d: ID %s does not sort after the one minted before it, %s", i, id, ids[i-1])
		}
	}
}

// IDs minted at once from many goroutines are all distinct, and each
// goroutine's IDs ascend.
func TestNewLeaseIDConcurrent(t *testing.T) {
	const goroutines, each = 8, 500
	got := make([][]string, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				got[g] = append(got[g], pool.NewLeaseID())
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for g, ids := range got {
		for i, id := range ids {
			if seen[id] {
				t.Fatalf("ID %s minted twice", id)
			}
			seen[id] = true
			if i > 0 && id <= ids[i-1] {
				t.Fatalf("goroutine %d: ID %s after %s", g, id, ids[i-1])
			}
		}
	}
}

// A scheduler that is shard s of k writes s into its lease IDs, which
// keep their shape and their order, and LeaseShard reads it back; the
// figure of tasks waiting falls as they are leased.
func TestSchedShardInLeaseIDs(t *testing.T) {
	for _, tc := range []struct{ shard, shards int }{{0, 2}, {2, 3}, {63, 64}, {255, 256}} {
		t.Run(fmt.Sprintf("%d of %d", tc.shard, tc.shards), func(t *testing.T) {
			h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) { c.Shard, c.Shards = tc.shard, tc.shards })
			alice, bob, carol := h.Device("alice", "alice-1"), h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
			h.Job("sharded", 5, pooltest.Policy{}, alice)
			if got := h.S.Queued(); got != 5 {
				t.Fatalf("Queued before any lease: %d, want 5", got)
			}
			shape := regexp.MustCompile(`^[0-9a-f]{32}$`)
			prev := ""
			for _, l := range h.Lease(bob, 3) {
				if !shape.MatchString(l.ID) || l.ID <= prev {
					t.Fatalf("lease ID %q: want 32 lowercase hex digits after %q", l.ID, prev)
				}
				prev = l.ID
				got, err := pool.LeaseShard(l.ID, tc.shards)
				if err != nil || got != tc.shard {
					t.Fatalf("LeaseShard(%s, %d) = %d, %v; want %d", l.ID, tc.shards, got, err, tc.shard)
				}
				if got, err := pool.LeaseShard(l.ID, 1); err != nil || got != 0 {
					t.Fatalf("LeaseShard(%s, 1) = %d, %v; want 0", l.ID, got, err)
				}
			}
			// Each task wants two replicas: the three leased once still wait.
			if got := h.S.Queued(); got != 5 {
				t.Fatalf("Queued after 3 of 5 tasks leased once: %d, want 5", got)
			}
			if ls := h.Lease(carol, 3); len(ls) != 3 {
				t.Fatalf("carol got %d leases, want 3", len(ls))
			}
			if got := h.S.Queued(); got != 2 {
				t.Fatalf("Queued after 3 of 5 tasks leased twice: %d, want 2", got)
			}
		})
	}
}

func TestLeaseShard(t *testing.T) {
	tests := []struct {
		name string
		id   string
		k    int
		want int
		err  string // a word the error must hold; "" for none
	}{
		{"one shard", "0000000000000000ff00000000000000", 1, 0, ""},
		{"shard 0", "00000000000000000000000000000000", 3, 0, ""},
		{"shard 2", "0123456789abcdef02ffffffffffffff", 3, 2, ""},
		{"shard 255", "0123456789abcdefff00000000000000", 256, 255, ""},
		{"shard byte past k", "0123456789abcdef03ffffffffffffff", 3, 0, "shard byte is 3"},
		{"too short", "0123", 3, 0, "4 characters"},
		{"upper case", "0123456789ABCDEF0000000000000000", 3, 0, "character 11"},
		{"not hex", "0123456789abcdefg000000000000000", 1, 0, "character 17"},
		{"no shards", "00000000000000000000000000000000", 0, 0, "0 shards"},
		{"too many shards", "00000000000000000000000000000000", 257, 0, "257 shards"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pool.LeaseShard(tc.id, tc.k)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("LeaseShard(%q, %d): %v", tc.id, tc.k, err)
			case tc.err != "" && (err == nil || !errors.Is(err, pool.ErrBadRequest) || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("LeaseShard(%q, %d) = %d, %v; want an ErrBadRequest saying %q", tc.id, tc.k, got, err, tc.err)
			case got != tc.want:
				t.Fatalf("LeaseShard(%q, %d) = %d, want %d", tc.id, tc.k, got, tc.want)
			}
		})
	}
}

// A shard outside its pool's count is refused when the scheduler is made.
func TestSchedShardConfigChecked(t *testing.T) {
	for _, sc := range [][2]int{{1, 1}, {-1, 2}, {0, 257}, {3, 2}} {
		_, err := pool.NewScheduler(context.Background(), pool.SchedulerConfig{Key: pooltest.Key(t, "c"), Store: pool.NewMemStore(),
			Blobs: func(job.Digest) string { return "" }, Shard: sc[0], Shards: sc[1]})
		if !errors.Is(err, pool.ErrBadRequest) {
			t.Errorf("shard %d of %d: %v, want ErrBadRequest", sc[0], sc[1], err)
		}
	}
}
