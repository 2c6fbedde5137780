package pooltest

import (
	"context"
	"errors"

	"idlepool/job"
	"idlepool/pool"
)

// RunTrustRestart checks that trust records survive a restart: a device
// that earned trust computes alone right after the restart, a device
// excluded for deviating stays excluded (and its owner's other device
// too), and records changed after the restart are stored again (their
// compare-and-set holds across another restart).
func RunTrustRestart(h *Harness) {
	t := h.T
	t.Helper()
	h.Config = func(c *pool.SchedulerConfig) { c.Trust.ExcludeAfter = 1 }
	h.Restart()
	sub, sub2 := h.Device("submitter", "sub-1"), h.Device("submitter2", "sub2-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	liar, liar2 := h.Device("mallory", "mallory-1"), h.Device("mallory", "mallory-2")
	dave, erin, frank := h.Device("dave", "dave-1"), h.Device("erin", "erin-1"), h.Device("frank", "frank-1")

	// Mallory lies on a task of another job that three owners settle;
	// one deviation excludes her and her owner's devices.
	var other *job.Job
	decideOne := func() {
		t.Helper()
		devices := []string{liar, dave, erin, frank} // a split needs one more agreeing owner
		for _, d := range devices {
			for _, l := range h.Lease(d, 1) {
				if l.Job != other.ID {
					t.Fatalf("lease %+v is not of job %s", l, other.ID)
				}
				if l.Peer == liar {
					h.Submit(l, Bad(l.Task))
				} else {
					h.Submit(l, Good(l.Task))
				}
			}
		}
		if st, err := h.S.Status(other.ID); err != nil || !st.Complete {
			t.Fatalf("job %s not decided: %+v %v", other.ID, st, err)
		}
	}
	other = h.Job("other", 1, Policy{}, sub2)
	decideOne()
	if _, err := h.S.Lease(context.Background(), liar, 1); !errors.Is(err, pool.ErrExcluded) {
		t.Fatalf("before the restart, mallory's lease: %v, want ErrExcluded", err)
	}
	alone := h.Job("alone", 100, Policy{Verify: "min_quorum = 1\nspot_check = 0\ntrust_after = 2\n"}, sub)

	// Bob and carol earn trust on two tasks checked by each other.
	for i := 0; i < 2; i++ {
		lb, lc := h.Lease(bob, 1), h.Lease(carol, 1)
		if len(lb) != 1 || len(lc) != 1 || lb[0].Task != lc[0].Task {
			t.Fatalf("warm-up leases %v %v", Tasks(lb), Tasks(lc))
		}
		h.Submit(lb[0], Good(lb[0].Task))
		h.Submit(lc[0], Good(lc[0].Task))
	}

	h.Restart()
	for _, d := range []string{liar, liar2} {
		if _, err := h.S.Lease(context.Background(), d, 1); !errors.Is(err, pool.ErrExcluded) {
			t.Errorf("after the restart, %s's lease: %v, want ErrExcluded", d, err)
		}
	}
	// Bob is still trusted: the task he is leased is his alone, and his
	// receipt comes at once.
	lb := h.Lease(bob, 1)
	if len(lb) != 1 || lb[0].Job != alone.ID {
		t.Fatalf("bob's lease after the restart: %+v", lb)
	}
	h.Submit(lb[0], Good(lb[0].Task))
	receipted := false
	for _, e := range h.Ledger() {
		receipted = receipted || e.Kind == pool.KindReceipt && e.Lease == lb[0].ID
	}
	if !receipted {
		t.Errorf("after the restart bob's task %d was not accepted alone: he lost his trust", lb[0].Task)
	}

	// Records change again (dave and erin agree once more) and
	// are stored over their earlier versions; another restart reads them.
	ld, le := h.Lease(dave, 1), h.Lease(erin, 1)
	if len(ld) != 1 || len(le) != 1 || ld[0].Task != le[0].Task {
		t.Fatalf("dave's and erin's leases %v %v, want one task for both", Tasks(ld), Tasks(le))
	}
	h.Submit(ld[0], Good(ld[0].Task))
	h.Submit(le[0], Good(le[0].Task))
	h.Restart()
	if _, err := h.S.Lease(context.Background(), liar, 1); !errors.Is(err, pool.ErrExcluded) {
		t.Errorf("after a second restart, mallory's lease: %v, want ErrExcluded", err)
	}
	if lb := h.Lease(bob, 1); len(lb) != 1 {
		t.Errorf("bob's lease after a second restart: %+v", lb)
	}
}
