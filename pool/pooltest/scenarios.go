package pooltest

import (
	"context"
	"errors"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
)

// RunRestart runs a job across three restarts of the scheduler (and of
// the store, when h.Reopen is set): leases come back with their deadlines,
// returned replicas and outcomes survive, a lease that expired during an
// outage goes to another peer, and the ledger neither loses nor repeats
// an entry.
func RunRestart(h *Harness) {
	t := h.T
	t.Helper()
	alice := h.Device("alice", "alice-1")
	bob, carol, dave := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	j := h.Job("restart", 3, Policy{LeaseTimeout: time.Minute}, alice)
	lb := h.Lease(bob, 3)
	lc := h.Lease(carol, 3)
	h.Submit(lb[0], Good(0))
	h.Submit(lc[0], Good(0)) // task 0 accepted
	h.Submit(lb[1], Good(1)) // tasks 1 and 2 half returned
	h.Submit(lb[2], Good(2))
	before := h.Ledger()

	h.Restart()
	if got := h.Ledger(); !cmp.Equal(before, got) {
		t.Fatalf("ledger changed across a restart:\n%s", cmp.Diff(before, got))
	}
	if got := h.Results(alice, j.ID); len(got) != 1 || got[0].Task != 0 || string(got[0].Result) != string(Good(0).Result) {
		t.Fatalf("results after restart: %+v", got)
	}
	st, _ := h.S.Status(j.ID)
	if st.Leased != 2 || st.Accepted != 1 {
		t.Fatalf("status after restart: %+v", st)
	}
	if err := h.S.Submit(context.Background(), bob, lb[1].ID, Good(1)); err != nil {
		t.Errorf("re-sending a submission after a restart: %v", err)
	}
	// carol's live leases came back; her submission completes task 1.
	h.Submit(lc[1], Good(1))
	// Her lease of task 2 expires during a second outage and goes to dave.
	h.Restart()
	h.Clock.Advance(2 * time.Minute)
	ld := h.Lease(dave, 3)
	if diff := cmp.Diff([]int64{2}, Tasks(ld)); diff != "" {
		t.Fatalf("dave's leases (-want +got):\n%s", diff)
	}
	if err := h.S.Submit(context.Background(), carol, lc[2].ID, Good(2)); !errors.Is(err, pool.ErrLeaseExpired) {
		t.Errorf("Submit on a lease that expired across a restart: %v", err)
	}
	h.Submit(ld[0], Good(2))
	h.Restart()
	var tasks []int64
	for _, v := range h.Results(alice, j.ID) {
		tasks = append(tasks, v.Task)
	}
	if diff := cmp.Diff([]int64{0, 1, 2}, tasks); diff != "" {
		t.Errorf("outcome tasks (-want +got):\n%s", diff)
	}
	want := SortSummaries([]EntrySummary{
		{pool.KindReceipt, 0, bob, 1}, {pool.KindReceipt, 0, carol, 1},
		{pool.KindReceipt, 1, bob, 1}, {pool.KindReceipt, 1, carol, 1},
		{pool.KindReceipt, 2, bob, 1}, {pool.KindReceipt, 2, dave, 1},
	})
	if diff := cmp.Diff(want, Summarize(h.Ledger())); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	if st, _ := h.S.Status(j.ID); !st.Complete || st.Accepted != 3 || st.Leased != 0 {
		t.Errorf("final status %+v", st)
	}
}

// RunMachineFailures runs a job whose tasks time out on some devices, a
// failure that depends on the machine: a timeout is no vote and earns no
// receipt, the task is leased again to other devices first (also across a
// restart), the job's status says how often it failed, a submission
// without the Machine flag whose reason is a timeout counts the same, and
// a task that times out MaxReplicas times ends unverified.
func RunMachineFailures(h *Harness) {
	t := h.T
	t.Helper()
	ctx := context.Background()
	alice := h.Device("alice", "alice-1")
	bob, carol, dave := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	j := h.Job("machine", 2, Policy{Redundancy: 1, Quorum: 1, LeaseTimeout: time.Minute}, alice)

	lb := h.Lease(bob, 1)
	h.Submit(lb[0], Timeout())
	if err := h.S.Submit(ctx, bob, lb[0].ID, Timeout()); err != nil {
		t.Errorf("sending the same timeout again: %v", err)
	}
	st, _ := h.S.Status(j.ID)
	if st.Retrying != 1 || st.Failed != 0 || st.Trouble != "task 0 timed out on 1 device; it ends unverified at 5 such failures" {
		t.Errorf("status after one timeout: retrying %d, failed %d, trouble %q", st.Retrying, st.Failed, st.Trouble)
	}
	// bob is not leased task 0 again while others may take it.
	lb = h.Lease(bob, 5)
	if diff := cmp.Diff([]int64{1}, Tasks(lb)); diff != "" {
		t.Fatalf("bob's leases after his timeout (-want +got):\n%s", diff)
	}
	h.Submit(lb[0], Good(1))

	h.Restart()
	if ls := h.Lease(bob, 5); len(ls) != 0 {
		t.Fatalf("bob was leased tasks %v after a restart, want none", Tasks(ls))
	}
	lc := h.Lease(carol, 5)
	if diff := cmp.Diff([]int64{0}, Tasks(lc)); diff != "" {
		t.Fatalf("carol's leases (-want +got):\n%s", diff)
	}
	old := Timeout() // an agent that does not send the class
	old.Machine = false
	h.Submit(lc[0], old)
	st, _ = h.S.Status(j.ID)
	if st.Retrying != 1 || st.Failed != 0 || st.Trouble != "task 0 timed out on 2 devices; it ends unverified at 5 such failures" {
		t.Errorf("status after two timeouts: retrying %d, failed %d, trouble %q", st.Retrying, st.Failed, st.Trouble)
	}
	if ls := h.Lease(carol, 5); len(ls) != 0 {
		t.Fatalf("carol was leased tasks %v after her timeout, want none", Tasks(ls))
	}
	ld := h.Lease(dave, 5)
	if diff := cmp.Diff([]int64{0}, Tasks(ld)); diff != "" {
		t.Fatalf("dave's leases (-want +got):\n%s", diff)
	}
	h.Submit(ld[0], Good(0))
	h.Restart()
	want := []pool.Verified{
		{Seq: 1, Task: 1, Status: pool.OutcomeOK, Result: Good(1).Result, Work: WorkCount},
		{Seq: 2, Task: 0, Status: pool.OutcomeOK, Result: Good(0).Result, Work: WorkCount},
	}
	if diff := cmp.Diff(want, h.Results(alice, j.ID)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	wantE := SortSummaries([]EntrySummary{{pool.KindReceipt, 0, dave, 1}, {pool.KindReceipt, 1, bob, 1}})
	if diff := cmp.Diff(wantE, Summarize(h.Ledger())); diff != "" {
		t.Errorf("ledger: the timeouts earned entries (-want +got):\n%s", diff)
	}
	if st, _ := h.S.Status(j.ID); !st.Complete || st.Accepted != 2 || st.Retrying != 0 || st.Trouble != "" {
		t.Errorf("final status %+v", st)
	}

	// Alone, a device takes its timed-out task again once the hold (the
	// job's lease timeout) has passed; five timeouts end the task
	// unverified, with no ledger entry: the pool gave up on it.
	before := len(h.Ledger())
	k := h.Job("machine-alone", 1, Policy{Redundancy: 1, Quorum: 1, LeaseTimeout: time.Minute}, alice)
	for try := 1; try <= 5; try++ {
		if try == 3 {
			h.Restart()
		}
		ls := h.Lease(bob, 1)
		if len(ls) != 1 || ls[0].Job != k.ID {
			t.Fatalf("try %d: bob's leases %v, want task 0 of the second job", try, Tasks(ls))
		}
		h.Submit(ls[0], Timeout())
		if ls := h.Lease(bob, 1); len(ls) != 0 && try < 5 {
			t.Fatalf("try %d: bob was leased %v again within the hold", try, Tasks(ls))
		}
		h.Clock.Advance(time.Minute)
	}
	st, _ = h.S.Status(k.ID)
	if !st.Complete || st.Failed != 1 || st.Accepted != 0 || st.Retrying != 0 {
		t.Errorf("status after five timeouts: %+v", st)
	}
	got := h.Results(alice, k.ID)
	if len(got) != 1 || got[0].Status != pool.OutcomeUnverified || got[0].Reason != "timed out 5 times on 1 device, after 10m each: the pool gave up on it, which is its decision and no verified result (raise policy.time_limit if the task needs longer)" {
		t.Errorf("outcome after five timeouts: %+v", got)
	}
	if n := len(h.Ledger()); n != before {
		t.Errorf("five timeouts wrote %d ledger entries", n-before)
	}
}

// RunCancel cancels a job part way (and restarts the scheduler, and the
// store when h.Reopen is set): the accepted task keeps its outcome and
// receipts, live leases answer ErrJobCancelled at their next heartbeat
// and submission, a result returned for an undecided task earns nothing,
// nothing is leased any more, the job is no longer seeking compute,
// another owner's device is refused with ErrNotOwner, cancelling again is
// nil, and submitting the job again is refused.
func RunCancel(h *Harness) {
	t := h.T
	t.Helper()
	ctx := context.Background()
	alice, alice2 := h.Device("alice", "alice-1"), h.Device("alice", "alice-2")
	bob, carol, dave := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	j := h.Job("cancel", 4, Policy{LeaseTimeout: time.Minute}, alice)
	lb := h.Lease(bob, 4)
	lc := h.Lease(carol, 4)
	h.Submit(lb[0], Good(0))
	h.Submit(lc[0], Good(0)) // task 0 accepted
	h.Submit(lb[1], Good(1)) // task 1 waits for a second owner
	if st, _ := h.S.Status(j.ID); st.Waiting != 1 || st.Accepted != 1 || st.Leased != 5 {
		t.Fatalf("status before cancel: %+v, want 1 accepted, 1 waiting, 5 leased", st)
	}
	before := h.Ledger()

	if err := h.S.Cancel(ctx, bob, j.ID); !errors.Is(err, pool.ErrNotOwner) {
		t.Errorf("Cancel by another owner's device: %v, want ErrNotOwner", err)
	}
	if err := h.S.Cancel(ctx, alice2, j.ID); err != nil {
		t.Fatalf("Cancel by a device of the job's owner: %v", err)
	}
	if err := h.S.Cancel(ctx, alice, j.ID); err != nil {
		t.Errorf("Cancel again: %v, want nil", err)
	}
	check := func(when string) {
		t.Helper()
		if _, err := h.S.Heartbeat(ctx, bob, lb[2].ID); !errors.Is(err, pool.ErrJobCancelled) {
			t.Errorf("%s: Heartbeat of a withdrawn lease: %v, want ErrJobCancelled", when, err)
		}
		if err := h.S.Submit(ctx, carol, lc[1].ID, Good(1)); !errors.Is(err, pool.ErrJobCancelled) {
			t.Errorf("%s: Submit on a withdrawn lease: %v, want ErrJobCancelled", when, err)
		}
		if ls := h.Lease(dave, 4); len(ls) != 0 {
			t.Errorf("%s: leases of a cancelled job: %+v", when, ls)
		}
		if v := h.S.Seeking(); len(v) != 0 {
			t.Errorf("%s: a cancelled job is seeking compute: %+v", when, v)
		}
		st, _ := h.S.Status(j.ID)
		if !st.Cancelled || st.Complete || st.Leased != 0 || st.Waiting != 0 || st.Accepted != 1 {
			t.Errorf("%s: status %+v, want cancelled, 1 accepted, nothing leased or waiting", when, st)
		}
		if got := h.Ledger(); !cmp.Equal(before, got) {
			t.Errorf("%s: the ledger changed:\n%s", when, cmp.Diff(before, got))
		}
		if got := h.Results(alice, j.ID); len(got) != 1 || got[0].Task != 0 {
			t.Errorf("%s: results %+v, want task 0's", when, got)
		}
	}
	check("after cancel")
	h.Restart()
	check("after a restart")
	if _, err := h.S.AddJob(ctx, j, alice); !errors.Is(err, pool.ErrJobCancelled) {
		t.Errorf("AddJob of a cancelled job: %v, want ErrJobCancelled", err)
	}
}

// RunAckedRestart runs a job whose merger acknowledges outcomes across
// two restarts of the scheduler (and of the store, when h.Reopen is
// set; a Reopen that makes the store summarise the acknowledged
// outcomes, pool.OutcomeSummary, is what it is for): the job's status
// is the same after each restart, the unacknowledged outcome is still
// delivered with its result, a decided task is neither leased again nor
// decided twice (a re-sent submission of one changes nothing), and the
// tasks left undecided are leased and decided once each.
func RunAckedRestart(h *Harness) {
	t := h.T
	t.Helper()
	ctx := context.Background()
	alice := h.Device("alice", "alice-1")
	bob, carol, dave := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	j := h.Job("acked", 8, Policy{LeaseTimeout: time.Hour}, alice)
	lb, lc := h.Lease(bob, 6), h.Lease(carol, 6)
	if diff := cmp.Diff([]int64{0, 1, 2, 3, 4, 5}, Tasks(lb)); diff != "" {
		t.Fatalf("bob's leases (-want +got):\n%s", diff)
	}
	for i := range 5 { // tasks 0 to 4 decided in order: outcomes 1 to 5
		sub := Good(int64(i))
		if i == 3 {
			sub = Failure("the program fails on task 3")
		}
		h.Submit(lb[i], sub)
		h.Submit(lc[i], sub)
	}
	h.Submit(lb[5], Good(5)) // task 5 waits for a second result
	if err := h.S.Ack(ctx, alice, j.ID, 4); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	before, err := h.S.Status(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if before.Accepted != 4 || before.Failed != 1 || before.Acked != 4 || before.Waiting != 1 || before.Complete {
		t.Fatalf("status before the restart: %+v", before)
	}

	// What the devices' connections say is not what the store holds.
	status := func() pool.JobStatus {
		st, err := h.S.Status(j.ID)
		if err != nil {
			t.Fatal(err)
		}
		st.Trouble = ""
		return st
	}
	before.Trouble = ""
	h.Restart()
	if got := status(); got != before {
		t.Errorf("status after a restart:\n%s", cmp.Diff(before, got))
	}
	if _, err := h.S.Results(ctx, alice, j.ID, 0, 100); !errors.Is(err, pool.ErrConflict) {
		t.Errorf("results from 0 after outcomes up to 4 were acknowledged: %v, want ErrConflict", err)
	}
	got, err := h.S.Results(ctx, alice, j.ID, 4, 100)
	if err != nil || len(got) != 1 || got[0].Seq != 5 || got[0].Task != 4 || string(got[0].Result) != string(Good(4).Result) {
		t.Fatalf("results after 4: %+v, %v", got, err)
	}
	// Re-sending a decided task's submission decides nothing again.
	if err := h.S.Submit(ctx, bob, lb[0].ID, Good(0)); err != nil {
		t.Errorf("re-sending a decided task's submission: %v", err)
	}
	// Tasks 6 and 7 were never leased; 0 to 4 are decided and 5 has
	// its replicas.
	ld := h.Lease(dave, 8)
	if diff := cmp.Diff([]int64{6, 7}, Tasks(ld)); diff != "" {
		t.Fatalf("dave's leases after the restart (-want +got):\n%s", diff)
	}
	h.Submit(lc[5], Good(5))
	lb2 := h.Lease(bob, 8)
	if diff := cmp.Diff([]int64{6, 7}, Tasks(lb2)); diff != "" {
		t.Fatalf("bob's second leases (-want +got):\n%s", diff)
	}
	for i := range ld {
		h.Submit(ld[i], Good(ld[i].Task))
		h.Submit(lb2[i], Good(lb2[i].Task))
	}
	got, err = h.S.Results(ctx, alice, j.ID, 4, 100)
	if err != nil {
		t.Fatal(err)
	}
	var tasks []int64
	for i, v := range got {
		if v.Seq != int64(5+i) {
			t.Errorf("outcome %d after 4 has Seq %d", i, v.Seq)
		}
		tasks = append(tasks, v.Task)
	}
	if diff := cmp.Diff([]int64{4, 5, 6, 7}, tasks); diff != "" {
		t.Fatalf("outcome tasks after 4 (-want +got):\n%s", diff)
	}
	if err := h.S.Ack(ctx, alice, j.ID, 8); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	final := status()
	h.Restart()
	if got := status(); got != final || !got.Complete || got.Accepted != 7 || got.Failed != 1 || got.Leased != 0 || got.Acked != 8 {
		t.Errorf("final status %+v, before the restart %+v", got, final)
	}
	if ls := h.Lease(carol, 8); len(ls) != 0 {
		t.Errorf("a complete job leased tasks %v after a restart", Tasks(ls))
	}
	receipts := map[int64]int{}
	for _, e := range h.Ledger() {
		if e.Job == j.ID {
			receipts[e.Task]++
		}
	}
	for task := range int64(8) {
		if receipts[task] != 2 {
			t.Errorf("task %d has %d ledger entries, want 2", task, receipts[task])
		}
	}
}
