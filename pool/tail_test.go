package pool_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

const tailLease = 5 * time.Minute

// newTailPool starts a job of tasks tasks (redundancy and quorum 2, lease
// timeout 5 min) submitted by alice-1, whose first learn tasks bob-1 and
// carol-1 computed in 10 minutes each, so that the job's median is 10
// minutes; it returns the harness, the job and bob-1's and carol-1's IDs.
func newTailPool(t *testing.T, tasks, learn int64, cfg func(*pool.SchedulerConfig)) (*pooltest.Harness, job.ID, string, string) {
	t.Helper()
	h := newHarness(t, pool.NewMemStore(), cfg)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("tail", tasks, pooltest.Policy{Redundancy: 2, Quorum: 2, LeaseTimeout: tailLease}, alice)
	for i := int64(0); i < learn; i++ {
		lb, lc := h.Lease(bob, 1), h.Lease(carol, 1)
		if len(lb) != 1 || len(lc) != 1 || lb[0].Task != i || lc[0].Task != i {
			t.Fatalf("learning: bob %v, carol %v, want task %d each", tasksOf(lb), tasksOf(lc), i)
		}
		pass(h, 10*time.Minute, lb[0], lc[0])
		h.Submit(lb[0], good(i))
		h.Submit(lc[0], good(i))
	}
	return h, j.ID, bob, carol
}

// pass advances h's clock by d, heartbeating ls every minute so that
// they stay live.
func pass(h *pooltest.Harness, d time.Duration, ls ...pool.Lease) {
	h.T.Helper()
	for ; d > 0; d -= time.Minute {
		h.Clock.Advance(min(d, time.Minute))
		for _, l := range ls {
			if _, err := h.S.Heartbeat(context.Background(), l.Peer, l.ID); err != nil {
				h.T.Fatalf("heartbeat task %d: %v", l.Task, err)
			}
		}
	}
}

// TestTailBackupOnlyInTailToIdle: a device is leased a backup replica
// only once every task is started and the undecided tasks are no more
// than the idle devices, only when it holds no replica itself, only of a
// task running well past the time expected of it, and two backups per
// task at most; the leases of a backed-up task are kept short.
func TestTailBackupOnlyInTailToIdle(t *testing.T) {
	h, _, bob, carol := newTailPool(t, 8, 6, nil)
	dave, erin := h.Device("dave", "dave-1"), h.Device("erin", "erin-1")
	frank, gina := h.Device("frank", "frank-1"), h.Device("gina", "gina-1")

	l6b, l6c := h.Lease(bob, 1), h.Lease(carol, 1)
	pass(h, 30*time.Minute, l6b[0], l6c[0]) // task 6 runs three medians: overdue
	// Before the tail: task 7 is still to start, and that is what dave
	// and erin get, not a backup of task 6.
	ld, le := h.Lease(dave, 1), h.Lease(erin, 1)
	if diff := cmp.Diff([]int64{6, 6, 7, 7}, tasksOf(append(append(append(l6b, l6c...), ld...), le...))); diff != "" {
		t.Fatalf("leases (-want +got):\n%s", diff)
	}
	// Every task started, two undecided: frank alone idle is not enough.
	if ls := h.Lease(frank, 1); len(ls) != 0 {
		t.Fatalf("frank got %v with 2 tasks undecided and 1 idle device", tasksOf(ls))
	}
	// dave holds a replica: not idle, no backup.
	if ls := h.Lease(dave, 1); len(ls) != 0 {
		t.Fatalf("dave, who holds task 7, got a backup %v", tasksOf(ls))
	}
	// gina makes two idle devices: a backup of task 6 (overdue), not of
	// task 7 (just started).
	lg := h.Lease(gina, 1)
	if diff := cmp.Diff([]int64{6}, tasksOf(lg)); diff != "" {
		t.Fatalf("gina's backup (-want +got):\n%s", diff)
	}
	if got, max := lg[0].Deadline.Sub(h.Clock.Now()), pool.DefaultBackupWindow; got > max {
		t.Errorf("the backup's lease runs %v, want at most %v", got, max)
	}
	// Task 6 still needs one of bob's and carol's overdue replicas: frank
	// backs that up too; then it has two backups, the most, and task 7 is
	// on time.
	if ls := h.Lease(frank, 1); len(ls) != 1 || ls[0].Task != 6 {
		t.Errorf("frank got %v, want a second backup of task 6", tasksOf(ls))
	}
	hana := h.Device("hana", "hana-1")
	h.Lease(hana, 1) // idle
	if ls := h.Lease(hana, 1); len(ls) != 0 {
		t.Errorf("hana got %v while task 6 has two backups and task 7 is on time", tasksOf(ls))
	}
	// The backed-up task's original replicas now get short leases.
	dl, err := h.S.Heartbeat(context.Background(), bob, l6b[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := dl.Sub(h.Clock.Now()); got > pool.DefaultBackupWindow {
		t.Errorf("a heartbeat of a backed-up replica extends it by %v, want at most %v", got, pool.DefaultBackupWindow)
	}
	// Task 7's replicas are not backed up: the job's lease timeout.
	dl, err = h.S.Heartbeat(context.Background(), dave, ld[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := dl.Sub(h.Clock.Now()); got != tailLease {
		t.Errorf("a heartbeat of a replica without backup extends it by %v, want the job's %v", got, tailLease)
	}
}

// TestTailBackupDecides: the backup's result completes the task's
// verification with the other owner's; the replica it backed up hears
// ErrTaskDecided on its heartbeat and its submission, and earns nothing;
// nobody is credited twice.
func TestTailBackupDecides(t *testing.T) {
	h, id, bob, carol := newTailPool(t, 7, 6, nil)
	dave := h.Device("dave", "dave-1")
	l6b, l6c := h.Lease(bob, 1), h.Lease(carol, 1)
	pass(h, 30*time.Minute, l6b[0], l6c[0])
	ld := h.Lease(dave, 1) // one task undecided, dave idle: the tail
	if diff := cmp.Diff([]int64{6}, tasksOf(ld)); diff != "" {
		t.Fatalf("dave's backup (-want +got):\n%s", diff)
	}
	h.Submit(l6c[0], good(6))
	h.Submit(ld[0], good(6))
	ctx := context.Background()
	if _, err := h.S.Heartbeat(ctx, bob, l6b[0].ID); !errors.Is(err, pool.ErrTaskDecided) {
		t.Errorf("the backed-up replica's heartbeat: %v, want ErrTaskDecided", err)
	}
	if err := h.S.Submit(ctx, bob, l6b[0].ID, good(6)); !errors.Is(err, pool.ErrTaskDecided) {
		t.Errorf("the backed-up replica's submission: %v, want ErrTaskDecided", err)
	}
	receipts := map[string]int{}
	for _, e := range h.Ledger() {
		if e.Task == 6 {
			if e.Kind != pool.KindReceipt {
				t.Errorf("task 6: a %s entry for %s", e.Kind, e.Peer)
			}
			receipts[e.Peer]++
		}
	}
	if diff := cmp.Diff(map[string]int{carol: 1, dave: 1}, receipts); diff != "" {
		t.Errorf("task 6's receipts by device (-want +got):\n%s", diff)
	}
	vs := h.Results(h.Peers["alice-1"].ID, id)
	if last := vs[len(vs)-1]; last.Task != 6 || last.Status != pool.OutcomeOK || string(last.Result) != string(good(6).Result) {
		t.Errorf("task 6's outcome %+v, want the result bob, carol and dave computed", last)
	}
	if st, err := h.S.Status(id); err != nil || !st.Complete || st.Leased != 0 {
		t.Errorf("status %+v, %v: want complete with nothing leased", st, err)
	}
}

// TestTailBackupNeverSameOwner: a device of an owner that holds or
// returned a replica of a task is never leased a backup of it (its
// result would count as that owner's second vote); another owner's
// idle device is.
func TestTailBackupNeverSameOwner(t *testing.T) {
	h, _, bob, carol := newTailPool(t, 7, 6, nil)
	bob2, carol2 := h.Device("bob", "bob-2"), h.Device("carol", "carol-2")
	l6b, l6c := h.Lease(bob, 1), h.Lease(carol, 1)
	pass(h, 30*time.Minute, l6b[0], l6c[0])
	for _, p := range []string{bob2, carol2, bob2} {
		if ls := h.Lease(p, 1); len(ls) != 0 {
			t.Fatalf("a second device of an owner computing task 6 got %v", tasksOf(ls))
		}
	}
	h.Submit(l6c[0], good(6)) // carol returned: still barred
	if ls := h.Lease(carol2, 1); len(ls) != 0 {
		t.Fatalf("a second device of carol, who returned task 6, got %v", tasksOf(ls))
	}
	dave := h.Device("dave", "dave-1")
	if ls := h.Lease(dave, 1); len(ls) != 1 || ls[0].Task != 6 {
		t.Fatalf("dave got %v, want a backup of task 6", tasksOf(ls))
	}
}

// TestTailRanking: a device whose finished tasks took three times the
// job's median is leased nothing of the job's tail while faster devices
// wait idle, and a faster one takes the replica handed back at once;
// with NoRanking the slow device is leased it as any other.
func TestTailRanking(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noRanking bool
	}{{"ranking", false}, {"no ranking", true}} {
		t.Run(tc.name, func(t *testing.T) {
			h, _, bob, carol := newTailPool(t, 10, 6, func(c *pool.SchedulerConfig) { c.Tail.NoRanking, c.Tail.NoBackups = tc.noRanking, true })
			sam := h.Device("sam", "sam-1")
			for i := int64(6); i < 9; i++ {
				ls, lb := h.Lease(sam, 1), h.Lease(bob, 1)
				if len(ls) != 1 || len(lb) != 1 || ls[0].Task != i || lb[0].Task != i {
					t.Fatalf("sam %v, bob %v, want task %d each", tasksOf(ls), tasksOf(lb), i)
				}
				pass(h, 10*time.Minute, ls[0], lb[0])
				h.Submit(lb[0], good(i))
				pass(h, 20*time.Minute, ls[0])
				h.Submit(ls[0], good(i))
			}
			lb := h.Lease(bob, 1) // task 9, the last
			h.Lease(carol, 1)
			dave, erin := h.Device("dave", "dave-1"), h.Device("erin", "erin-1")
			if ls := append(h.Lease(dave, 1), h.Lease(erin, 1)...); len(ls) != 0 {
				t.Fatalf("dave and erin got %v with every task started", tasksOf(ls))
			}
			if err := h.S.Release(context.Background(), lb[0].Peer, lb[0].ID); err != nil {
				t.Fatal(err)
			}
			got := h.Lease(sam, 1)
			if tc.noRanking {
				if len(got) != 1 || got[0].Task != 9 {
					t.Fatalf("without ranking sam got %v, want task 9", tasksOf(got))
				}
				return
			}
			if len(got) != 0 {
				t.Fatalf("sam, three times slower than the median, got %v while two faster devices wait", tasksOf(got))
			}
			if ld := h.Lease(dave, 1); len(ld) != 1 || ld[0].Task != 9 {
				t.Fatalf("dave got %v, want task 9 that bob handed back", tasksOf(ld))
			}
		})
	}
}

// TestTailLeaseTimeout: a device that kept its leases alive is leased
// for the job's lease timeout; one whose leases expired gets shorter
// leases, never under a quarter of the job's (nor 30 s), and longer
// again once it keeps them.
func TestTailLeaseTimeout(t *testing.T) {
	h, _, bob, _ := newTailPool(t, 40, 0, nil)
	vic := h.Device("vic", "vic-1")
	timeout := func(p string) time.Duration {
		t.Helper()
		ls := h.Lease(p, 1)
		if len(ls) != 1 {
			t.Fatalf("no lease for %s", p)
		}
		return ls[0].Deadline.Sub(h.Clock.Now())
	}
	var got []time.Duration
	for range 4 {
		got = append(got, timeout(vic))
		h.Clock.Advance(tailLease) // vic went silent: the lease expires
	}
	if got[0] != tailLease || got[3] != tailLease/4 {
		t.Errorf("vic's lease timeouts %v: want the job's %v at first and %v once its leases expired", got, tailLease, tailLease/4)
	}
	if d := timeout(bob); d != tailLease {
		t.Errorf("bob, who kept every lease, is leased for %v, want the job's %v", d, tailLease)
	}
	for range 4 { // vic keeps its leases again
		ls := h.Lease(vic, 1)
		h.Submit(ls[0], good(ls[0].Task))
	}
	if d := timeout(vic); d <= tailLease/4 || d > tailLease {
		t.Errorf("vic, keeping its leases again, is leased for %v, want more than %v and at most %v", d, tailLease/4, tailLease)
	}
}

// TestTailSlowSettlesSplit: the idle devices that keep a slow device off
// a job's tail are only those that may take what is left. Here the last
// task is split between bob and carol, who wait idle and fast; neither
// may vote on it again, so sam, slow but of an owner new to the task, is
// leased it rather than nobody (the task waited until bob's and carol's
// idleness aged out).
func TestTailSlowSettlesSplit(t *testing.T) {
	h, _, bob, carol := newTailPool(t, 5, 3, func(c *pool.SchedulerConfig) { c.Tail.NoBackups = true })
	sam := h.Device("sam", "sam-1")
	h.Device("dave", "dave-1") // a second owner that may settle the split: it is not stalled
	// Task 3: sam takes three medians, bob one.
	lb, ls := h.Lease(bob, 1), h.Lease(sam, 1)
	if len(lb) != 1 || len(ls) != 1 || lb[0].Task != 3 || ls[0].Task != 3 {
		t.Fatalf("bob %v, sam %v, want task 3 each", tasksOf(lb), tasksOf(ls))
	}
	pass(h, 10*time.Minute, lb[0], ls[0])
	h.Submit(lb[0], good(3))
	pass(h, 20*time.Minute, ls[0])
	h.Submit(ls[0], good(3))
	// Task 4, the last: bob and carol disagree.
	lb, lc := h.Lease(bob, 1), h.Lease(carol, 1)
	if len(lb) != 1 || len(lc) != 1 || lb[0].Task != 4 || lc[0].Task != 4 {
		t.Fatalf("bob %v, carol %v, want task 4 each", tasksOf(lb), tasksOf(lc))
	}
	pass(h, 10*time.Minute, lb[0], lc[0])
	h.Submit(lb[0], good(4))
	h.Submit(lc[0], pooltest.Bad(4))
	if got := append(h.Lease(bob, 1), h.Lease(carol, 1)...); len(got) != 0 {
		t.Fatalf("bob and carol got %v, who voted on the only task left", tasksOf(got))
	}
	if got := h.Lease(sam, 1); len(got) != 1 || got[0].Task != 4 {
		t.Fatalf("sam got %v, want task 4: the fast idle devices may not take it", tasksOf(got))
	}
}
