package pool_test

import (
	"regexp"
	"sync"
	"testing"

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
