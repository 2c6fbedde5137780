package pooltest

import (
	"context"
	"errors"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
)

// RunArchive checks, on h's store (which must be a pool.ReplicaArchive),
// that replicas leave the scheduler's memory once settled and committed,
// before and after a restart, and that a request naming one later is
// answered as before from the store: the same result again is taken
// (idempotent), another one is a conflict, a heartbeat says it was
// returned, a release is nil, another peer's request is not its own, and
// a lease nobody granted stays unknown. The deadline heap is compacted:
// after 1,500 tasks it holds about the live leases, not every lease.
func RunArchive(h *Harness) {
	t := h.T
	t.Helper()
	ctx := context.Background()
	merger := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	const tasks = 1500
	j := h.Job("archive", tasks, Policy{}, merger)
	var first []pool.Lease
	for {
		lb, lc := h.Lease(bob, 256), h.Lease(carol, 256)
		if len(lb)+len(lc) == 0 {
			break
		}
		if first == nil {
			first = lb
		}
		for _, l := range append(lb, lc...) {
			h.Submit(l, Good(l.Task))
		}
	}
	st, err := h.S.Status(j.ID)
	if err != nil || !st.Complete || st.Accepted != tasks {
		t.Fatalf("status %+v, %v: want %d tasks accepted", st, err, tasks)
	}
	check := func(when string) {
		t.Helper()
		f := h.S.Footprint()
		if f.Replicas != 0 || f.Active != 0 || f.Deadlines > 2048 {
			t.Errorf("%s: footprint %+v, want no replicas, no active tasks and at most 2048 deadlines", when, f)
		}
		l := first[0]
		if err := h.S.Submit(ctx, bob, l.ID, Good(l.Task)); err != nil {
			t.Errorf("%s: the same result again: %v, want nil", when, err)
		}
		errs := []error{
			h.S.Submit(ctx, bob, l.ID, Bad(l.Task)),
			func() error { _, err := h.S.Heartbeat(ctx, bob, l.ID); return err }(),
			h.S.Submit(ctx, carol, l.ID, Good(l.Task)),
			h.S.Submit(ctx, bob, "00000000000000000000000000000000", Good(l.Task)),
			h.S.Release(ctx, bob, l.ID),
		}
		want := []error{pool.ErrConflict, pool.ErrConflict, pool.ErrNotYourLease, pool.ErrUnknownLease, nil}
		for i := range want {
			if !errors.Is(errs[i], want[i]) || (want[i] == nil) != (errs[i] == nil) {
				t.Errorf("%s: request %d answered %v, want %v", when, i, errs[i], want[i])
			}
		}
		if f := h.S.Footprint(); f.Replicas != 0 {
			t.Errorf("%s: an answer from the store brought %d replicas back into memory", when, f.Replicas)
		}
	}
	check("after the job")
	before := h.Ledger()
	h.Restart()
	check("after a restart")
	if diff := cmp.Diff(len(before), len(h.Ledger())); diff != "" {
		t.Errorf("ledger length changed (-before +after):\n%s", diff)
	}
}
