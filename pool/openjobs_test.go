package pool_test

import (
	"fmt"
	"testing"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// A lease looks only at the jobs still in play: complete jobs leave the
// set it walks (Footprint.Open) at the next lease, after a restart too,
// while every job is still listed.
func TestLeaseLooksAtOpenJobsOnly(t *testing.T) {
	h := pooltest.NewHarness(t, pool.NewMemStore(), nil)
	merger := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	const jobs = 20
	for i := range jobs {
		h.Job(fmt.Sprintf("done-%d", i), 2, pooltest.Policy{}, merger)
	}
	for {
		lb, lc := h.Lease(bob, 8), h.Lease(carol, 8)
		if len(lb)+len(lc) == 0 {
			break
		}
		for _, l := range append(lb, lc...) {
			h.Submit(l, pooltest.Good(l.Task))
		}
	}
	h.Job("open", 4, pooltest.Policy{}, merger)
	h.Lease(bob, 1)
	if f := h.S.Footprint(); f.Open != 1 {
		t.Fatalf("after %d complete jobs and one open: a lease walks %d jobs, want 1", jobs, f.Open)
	}
	if n := len(h.S.Jobs()); n != jobs+1 {
		t.Fatalf("%d jobs listed, want %d", n, jobs+1)
	}
	h.Restart()
	h.Lease(carol, 1)
	if f := h.S.Footprint(); f.Open != 1 {
		t.Fatalf("after a restart: a lease walks %d jobs, want 1", f.Open)
	}
}
