package pool_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

func newHarness(t *testing.T, store pool.Store, cfg func(*pool.SchedulerConfig)) *pooltest.Harness {
	return pooltest.NewHarness(t, store, cfg)
}

type entrySummary = pooltest.EntrySummary

var (
	summarize = pooltest.Summarize
	tasksOf   = pooltest.Tasks
	good      = pooltest.Good
	bad       = pooltest.Bad
)

func TestSchedQuorumTwoOwners(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	alice2 := h.Device("alice", "alice-2")
	bob := h.Device("bob", "bob-1")
	bob2 := h.Device("bob", "bob-2")
	carol := h.Device("carol", "carol-1")
	j := h.Job("quorum", 3, pooltest.Policy{TaskCost: 2.5}, alice)

	if ls := h.Lease(alice2, 10); len(ls) != 0 {
		t.Fatalf("the owner's device got leases %v in an open pool", tasksOf(ls))
	}
	lb := h.Lease(bob, 10)
	if diff := cmp.Diff([]int64{0, 1, 2}, tasksOf(lb)); diff != "" {
		t.Fatalf("bob's leases (-want +got):\n%s", diff)
	}
	if ls := h.Lease(bob2, 10); len(ls) != 0 {
		t.Fatalf("a second device of bob got leases %v of tasks bob computes", tasksOf(ls))
	}
	lc := h.Lease(carol, 10)
	if diff := cmp.Diff([]int64{0, 1, 2}, tasksOf(lc)); diff != "" {
		t.Fatalf("carol's leases (-want +got):\n%s", diff)
	}
	for _, l := range append(lb, lc...) {
		h.Submit(l, good(l.Task))
	}
	want := []pool.Verified{}
	for i := int64(0); i < 3; i++ {
		want = append(want, pool.Verified{Seq: i + 1, Task: i, Status: pool.OutcomeOK, Result: good(i).Result, Work: pooltest.WorkCount})
	}
	if diff := cmp.Diff(want, h.Results(alice, j.ID)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	var wantE []entrySummary
	for i := int64(0); i < 3; i++ {
		wantE = append(wantE, summarize([]pool.Entry{{Kind: pool.KindReceipt, Task: i, Peer: bob, Cost: 2.5}, {Kind: pool.KindReceipt, Task: i, Peer: carol, Cost: 2.5}})...)
	}
	es := h.Ledger()
	if diff := cmp.Diff(wantE, summarize(es)); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	for _, e := range es {
		if e.Owner == h.Peers["alice-1"].Owner {
			t.Errorf("entry %d names the job owner", e.Seq)
		}
	}
	st, err := h.S.Status(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantSt := pool.JobStatus{Job: j.ID, Name: "quorum", Owner: h.Peers["alice-1"].Owner, Merger: alice, Tasks: 3,
		Accepted: 3, Complete: true, Quorum: 2, Redundancy: 2}
	if diff := cmp.Diff(wantSt, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if ls := h.Lease(bob2, 10); len(ls) != 0 {
		t.Errorf("leases %v of a complete job", tasksOf(ls))
	}
}

func TestSchedLyingPeer(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob := h.Device("bob", "bob-1")
	liar := h.Device("mallory", "mallory-1")
	carol := h.Device("carol", "carol-1")
	dave := h.Device("dave", "dave-1")
	j := h.Job("liar", 1, pooltest.Policy{}, alice)

	lb, lm := h.Lease(bob, 1), h.Lease(liar, 1)
	h.Submit(lb[0], good(0))
	h.Submit(lm[0], bad(0))
	if got := h.Results(alice, j.ID); len(got) != 0 {
		t.Fatalf("outcome %v before a majority", got)
	}
	if ls := h.Lease(bob, 1); len(ls) != 0 {
		t.Fatalf("bob got a second replica of task %v", tasksOf(ls))
	}
	lc := h.Lease(carol, 1)
	if diff := cmp.Diff([]int64{0}, tasksOf(lc)); diff != "" {
		t.Fatalf("carol's leases (-want +got):\n%s", diff)
	}
	h.Submit(lc[0], good(0))
	// 2-1 after a split is a bare majority: the task needs one more
	// agreeing owner before anyone is marked deviating.
	if got := h.Results(alice, j.ID); len(got) != 0 {
		t.Fatalf("decided by a bare majority after a split: %+v", got)
	}
	ld := h.Lease(dave, 1)
	if diff := cmp.Diff([]int64{0}, tasksOf(ld)); diff != "" {
		t.Fatalf("dave's leases (-want +got):\n%s", diff)
	}
	h.Submit(ld[0], good(0))
	want := []pool.Verified{{Seq: 1, Task: 0, Status: pool.OutcomeOK, Result: good(0).Result, Work: pooltest.WorkCount}}
	if diff := cmp.Diff(want, h.Results(alice, j.ID)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	wantE := summarize([]pool.Entry{
		{Kind: pool.KindReceipt, Peer: bob, Cost: 1},
		{Kind: pool.KindDeviation, Peer: liar},
		{Kind: pool.KindReceipt, Peer: carol, Cost: 1},
		{Kind: pool.KindReceipt, Peer: dave, Cost: 1},
	})
	if diff := cmp.Diff(wantE, summarize(h.Ledger())); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	mine, err := h.S.PeerLedger(liar, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 1 || mine[0].Kind != pool.KindDeviation || mine[0].Digest != bad(0).Digest || mine[0].Reason == "" {
		t.Errorf("the liar's ledger: %+v", mine)
	}
}

func TestSchedOwnerPool(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	a1 := h.Device("alice", "alice-1")
	a2 := h.Device("alice", "alice-2")
	a3 := h.Device("alice", "alice-3")
	bob := h.Device("bob", "bob-1")
	j := h.Job("own", 2, pooltest.Policy{Participants: "owner"}, a1)

	if ls := h.Lease(bob, 5); len(ls) != 0 {
		t.Fatalf("another owner's device got %v in an owner-only job", tasksOf(ls))
	}
	l1 := h.Lease(a1, 5)
	l2 := h.Lease(a2, 1)
	l3 := h.Lease(a3, 5)
	if diff := cmp.Diff([][]int64{{0, 1}, {0}, {1}}, [][]int64{tasksOf(l1), tasksOf(l2), tasksOf(l3)}); diff != "" {
		t.Fatalf("leases (-want +got):\n%s", diff)
	}
	for _, l := range append(append(l1, l2...), l3...) {
		h.Submit(l, good(l.Task))
	}
	if got := h.Results(a1, j.ID); len(got) != 2 || got[0].Status != pool.OutcomeOK || got[1].Status != pool.OutcomeOK {
		t.Errorf("results: %+v", got)
	}
	if es := h.Ledger(); len(es) != 0 {
		t.Errorf("an owner-only job wrote ledger entries: %+v", summarize(es))
	}
}

func TestSchedVerifiedFailure(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob := h.Device("bob", "bob-1")
	carol := h.Device("carol", "carol-1")
	j := h.Job("fail", 1, pooltest.Policy{}, alice)
	h.Submit(h.Lease(bob, 1)[0], pooltest.Failure("panic: boom"))
	h.Submit(h.Lease(carol, 1)[0], pooltest.Failure("panic: boom"))
	want := []pool.Verified{{Seq: 1, Task: 0, Status: pool.OutcomeFailed, Reason: "panic: boom"}}
	if diff := cmp.Diff(want, h.Results(alice, j.ID)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	// The agreement earns a receipt, but not the declared cost of a
	// completed task: a program that fails at once must not pay out.
	wantE := summarize([]pool.Entry{{Kind: pool.KindReceipt, Peer: bob, Cost: 0}, {Kind: pool.KindReceipt, Peer: carol, Cost: 0}})
	if diff := cmp.Diff(wantE, summarize(h.Ledger())); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	st, _ := h.S.Status(j.ID)
	if st.Failed != 1 || !st.Complete {
		t.Errorf("status %+v", st)
	}
}

func TestSchedUnverified(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) { c.MaxReplicas = 4 })
	alice := h.Device("alice", "alice-1")
	peers := []string{h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1"), h.Device("erin", "erin-1")}
	j := h.Job("unverified", 1, pooltest.Policy{}, alice)
	h.Submit(h.Lease(peers[0], 1)[0], pooltest.Result([]byte("a")))
	h.Submit(h.Lease(peers[1], 1)[0], pooltest.Result([]byte("b")))
	h.Submit(h.Lease(peers[2], 1)[0], pooltest.Result([]byte("c")))
	if ls := h.Lease(peers[3], 1); len(ls) != 0 {
		t.Errorf("a replica past MaxReplicas: %v", tasksOf(ls))
	}
	got := h.Results(alice, j.ID)
	if len(got) != 1 || got[0].Status != pool.OutcomeUnverified || got[0].Result != nil || got[0].Reason == "" {
		t.Fatalf("results: %+v", got)
	}
	var wantE []entrySummary
	for _, p := range peers[:3] {
		wantE = append(wantE, entrySummary{Kind: pool.KindUnverified, Peer: p})
	}
	if diff := cmp.Diff(pooltest.SortSummaries(wantE), summarize(h.Ledger())); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
}

// Two replicas disagree; a third agrees with one of them, which is a
// bare majority after a split, so a fourth settles it: the majority rule
// counts every voter that returned, and a disputed task needs one more
// agreeing voter than the quorum.
func TestSchedMajorityNeedsStrictMajority(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	b, c, d := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	e := h.Device("erin", "erin-1")
	j := h.Job("majority", 1, pooltest.Policy{Redundancy: 3, Quorum: 2}, alice)
	lb, lc, ld := h.Lease(b, 1), h.Lease(c, 1), h.Lease(d, 1)
	h.Submit(lb[0], pooltest.Result([]byte("x")))
	h.Submit(lc[0], pooltest.Result([]byte("y")))
	if got := h.Results(alice, j.ID); len(got) != 0 {
		t.Fatalf("decided on a 1:1 split: %+v", got)
	}
	h.Submit(ld[0], pooltest.Result([]byte("y")))
	if got := h.Results(alice, j.ID); len(got) != 0 {
		t.Fatalf("decided on a bare 2:1 majority after a split: %+v", got)
	}
	h.Submit(h.Lease(e, 1)[0], pooltest.Result([]byte("y")))
	got := h.Results(alice, j.ID)
	if len(got) != 1 || string(got[0].Result) != "y" {
		t.Fatalf("results %+v", got)
	}
}

func TestSchedLeaseLifecycle(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob, carol, dave := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	j := h.Job("expiry", 1, pooltest.Policy{LeaseTimeout: 30 * time.Second}, alice)
	ctx := context.Background()

	lb, lc := h.Lease(bob, 1), h.Lease(carol, 1)
	if want := h.Clock.Now().Add(30 * time.Second); !lb[0].Deadline.Equal(want) {
		t.Errorf("deadline %v, want %v", lb[0].Deadline, want)
	}
	h.Clock.Advance(20 * time.Second)
	d, err := h.S.Heartbeat(ctx, carol, lc[0].ID)
	if err != nil || !d.Equal(h.Clock.Now().Add(30*time.Second)) {
		t.Fatalf("Heartbeat: %v, %v", d, err)
	}
	if ls := h.Lease(dave, 1); len(ls) != 0 {
		t.Fatalf("dave got %v while both replicas are leased", tasksOf(ls))
	}
	h.Clock.Advance(15 * time.Second) // bob's lease is past its deadline, carol's is not
	ld := h.Lease(dave, 1)
	if diff := cmp.Diff([]int64{0}, tasksOf(ld)); diff != "" {
		t.Fatalf("dave's leases after expiry (-want +got):\n%s", diff)
	}
	if err := h.S.Submit(ctx, bob, lb[0].ID, good(0)); !errors.Is(err, pool.ErrLeaseExpired) {
		t.Errorf("Submit on an expired lease: %v, want ErrLeaseExpired", err)
	}
	if _, err := h.S.Heartbeat(ctx, bob, lb[0].ID); !errors.Is(err, pool.ErrLeaseExpired) {
		t.Errorf("Heartbeat on an expired lease: %v, want ErrLeaseExpired", err)
	}
	// dave hands his lease back; bob may take the replica again.
	if err := h.S.Release(ctx, dave, ld[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := h.S.Release(ctx, dave, ld[0].ID); err != nil {
		t.Errorf("second Release: %v", err)
	}
	if err := h.S.Submit(ctx, dave, ld[0].ID, good(0)); !errors.Is(err, pool.ErrLeaseExpired) {
		t.Errorf("Submit on a released lease: %v, want ErrLeaseExpired", err)
	}
	lb2 := h.Lease(bob, 1)
	if len(lb2) != 1 {
		t.Fatalf("no lease after a release")
	}
	st, _ := h.S.Status(j.ID)
	if st.Leased != 2 {
		t.Errorf("status: %d leased, want 2", st.Leased)
	}
	h.Submit(lb2[0], good(0))
	h.Submit(lc[0], good(0))
	if got := h.Results(alice, j.ID); len(got) != 1 || got[0].Status != pool.OutcomeOK {
		t.Errorf("results %+v", got)
	}
}

// A replica still in flight when its task is decided is cancelled.
func TestSchedLeaseCancelled(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	b, c, d := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	h.Job("cancel", 1, pooltest.Policy{Redundancy: 3, Quorum: 2}, alice)
	lb, lc, ld := h.Lease(b, 1), h.Lease(c, 1), h.Lease(d, 1)
	h.Submit(lb[0], good(0))
	h.Submit(lc[0], good(0))
	ctx := context.Background()
	if _, err := h.S.Heartbeat(ctx, d, ld[0].ID); !errors.Is(err, pool.ErrTaskDecided) {
		t.Errorf("Heartbeat: %v, want ErrTaskDecided", err)
	}
	if err := h.S.Submit(ctx, d, ld[0].ID, good(0)); !errors.Is(err, pool.ErrTaskDecided) {
		t.Errorf("Submit: %v, want ErrTaskDecided", err)
	}
}

func TestSchedErrors(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("errors", 2, pooltest.Policy{}, alice)
	ctx := context.Background()
	lb := h.Lease(bob, 1)[0]
	lc := h.Lease(carol, 1)[0]
	h.Submit(lc, good(0))
	other := pooltest.Job(t, h.Blobs, h.Dir, "other", 1, pooltest.Policy{})
	mismatch := good(0)
	mismatch.Result = []byte("something else")

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"submit another peer's lease", func() error { return h.S.Submit(ctx, carol, lb.ID, good(0)) }, pool.ErrNotYourLease},
		{"heartbeat another peer's lease", func() error { _, err := h.S.Heartbeat(ctx, carol, lb.ID); return err }, pool.ErrNotYourLease},
		{"release another peer's lease", func() error { return h.S.Release(ctx, carol, lb.ID) }, pool.ErrNotYourLease},
		{"submit unknown lease", func() error { return h.S.Submit(ctx, bob, "00112233445566778899aabbccddeeff", good(0)) }, pool.ErrUnknownLease},
		{"digest mismatch", func() error { return h.S.Submit(ctx, bob, lb.ID, mismatch) }, pool.ErrBadSubmission},
		{"failure with bytes", func() error {
			s := pooltest.Failure("x")
			s.Result = []byte("y")
			return h.S.Submit(ctx, bob, lb.ID, s)
		}, pool.ErrBadSubmission},
		{"machine-dependent result", func() error {
			s := good(0)
			s.Machine = true
			return h.S.Submit(ctx, bob, lb.ID, s)
		}, pool.ErrBadSubmission},
		{"duplicate submit", func() error { return h.S.Submit(ctx, carol, lc.ID, good(0)) }, nil},
		{"different second submit", func() error { return h.S.Submit(ctx, carol, lc.ID, bad(0)) }, pool.ErrConflict},
		{"lease for unknown peer", func() error { _, err := h.S.Lease(ctx, "idnobody", 1); return err }, pool.ErrUnknownPeer},
		{"add job for unknown peer", func() error { _, err := h.S.AddJob(ctx, other, "idnobody"); return err }, pool.ErrUnknownPeer},
		{"results by a non-merger", func() error { _, err := h.S.Results(ctx, bob, j.ID, 0, 10); return err }, pool.ErrNotMerger},
		{"ack by a non-merger", func() error { return h.S.Ack(ctx, bob, j.ID, 0) }, pool.ErrNotMerger},
		{"results of unknown job", func() error { _, err := h.S.Results(ctx, alice, other.ID, 0, 10); return err }, pool.ErrUnknownJob},
		{"status of unknown job", func() error { _, err := h.S.Status(other.ID); return err }, pool.ErrUnknownJob},
		{"ack beyond delivered", func() error { return h.S.Ack(ctx, alice, j.ID, 5) }, pool.ErrBadRequest},
		{"peer with wrong ID", func() error {
			p := pooltest.Device(t, pooltest.Key(t, "owner/x"), "x-1")
			p.ID = "idwrong"
			return h.S.RegisterPeer(ctx, p)
		}, pool.ErrBadRequest},
		{"peer with a forged endorsement", func() error {
			p := pooltest.Device(t, pooltest.Key(t, "owner/x"), "x-1")
			p.Endorsement = pooltest.Key(t, "owner/y").Sign(pool.EndorsementMessage(p.Key))
			return h.S.RegisterPeer(ctx, p)
		}, pool.ErrBadRequest},
		{"peer ID with other keys", func() error {
			p := h.Peers["bob-1"]
			q := pooltest.Device(t, pooltest.Key(t, "owner/x"), "x-1")
			p.OwnerKey, p.Owner, p.Endorsement = q.OwnerKey, q.Owner, q.Endorsement
			p.Owner = identity.IDOf(p.OwnerKey)
			p.Endorsement = pooltest.Key(t, "owner/x").Sign(pool.EndorsementMessage(p.Key))
			return h.S.RegisterPeer(ctx, p)
		}, pool.ErrConflict},
		{"register again", func() error { return h.S.RegisterPeer(ctx, h.Peers["bob-1"]) }, nil},
		{"add job again", func() error {
			created, err := h.S.AddJob(ctx, j, alice)
			if created {
				return errors.New("created twice")
			}
			return err
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("got %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSchedResultsAndAck(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("ack", 4, pooltest.Policy{}, alice)
	for _, l := range append(h.Lease(bob, 4), h.Lease(carol, 4)...) {
		h.Submit(l, good(l.Task))
	}
	ctx := context.Background()
	page, err := h.S.Results(ctx, alice, j.ID, 1, 2)
	if err != nil || len(page) != 2 || page[0].Seq != 2 || page[1].Seq != 3 {
		t.Fatalf("Results(after 1, max 2): %+v, %v", page, err)
	}
	if err := h.S.Ack(ctx, alice, j.ID, 2); err != nil {
		t.Fatal(err)
	}
	if err := h.S.Ack(ctx, alice, j.ID, 1); err != nil {
		t.Errorf("Ack below the mark: %v", err)
	}
	if _, err := h.S.Results(ctx, alice, j.ID, 0, 10); !errors.Is(err, pool.ErrConflict) {
		t.Errorf("Results before the ack mark: %v, want ErrConflict", err)
	}
	h.Restart()
	rest, err := h.S.Results(ctx, alice, j.ID, 2, 10)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	for _, v := range rest {
		seqs = append(seqs, v.Seq)
		if v.Result == nil {
			t.Errorf("outcome %d lost its bytes before the ack", v.Seq)
		}
	}
	if diff := cmp.Diff([]int64{3, 4}, seqs); diff != "" {
		t.Errorf("unacknowledged after restart (-want +got):\n%s", diff)
	}
	if st, _ := h.S.Status(j.ID); st.Acked != 2 {
		t.Errorf("acked %d after restart, want 2", st.Acked)
	}
}

// A restart in the middle of a job keeps leases (with their deadlines),
// returned replicas, outcomes and the ledger, and duplicates nothing.
func TestSchedRestartMemStore(t *testing.T) {
	pooltest.RunRestart(newHarness(t, pool.NewMemStore(), nil))
}

func TestSchedMachineFailuresAreNoVotes(t *testing.T) {
	pooltest.RunMachineFailures(newHarness(t, pool.NewMemStore(), nil))
}

func TestCancelMemStore(t *testing.T) {
	pooltest.RunCancel(newHarness(t, pool.NewMemStore(), nil))
}

// Many peers lease and submit at once; every task ends accepted exactly
// once and the ledger verifies.
func TestSchedConcurrent(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	const tasks, peers = 200, 8
	ids := make([]string, peers)
	for i := range ids {
		ids[i] = h.Device(fmt.Sprintf("owner%d", i), fmt.Sprintf("dev%d", i))
	}
	j := h.Job("concurrent", tasks, pooltest.Policy{}, alice)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, peers)
	for _, id := range ids {
		wg.Go(func() {
			for {
				ls, err := h.S.Lease(ctx, id, 3)
				if err != nil {
					errs <- err
					return
				}
				if len(ls) == 0 {
					if st, _ := h.S.Status(j.ID); st.Complete {
						return
					}
					continue
				}
				for _, l := range ls {
					if err := h.S.Submit(ctx, id, l.ID, good(l.Task)); err != nil && !errors.Is(err, pool.ErrTaskDecided) {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := h.Results(alice, j.ID)
	seen := map[int64]bool{}
	for _, v := range got {
		if seen[v.Task] || v.Status != pool.OutcomeOK {
			t.Fatalf("outcome %+v duplicated or not ok", v)
		}
		seen[v.Task] = true
	}
	if len(seen) != tasks {
		t.Fatalf("%d outcomes, want %d", len(seen), tasks)
	}
	if es := h.Ledger(); len(es) != 2*tasks {
		t.Errorf("%d ledger entries, want %d", len(es), 2*tasks)
	}
}

// A failed commit stops the scheduler: the waiting call fails, later
// calls are refused, and a new scheduler on the store continues.
func TestSchedCommitFailure(t *testing.T) {
	st := pool.NewMemStore()
	h := newHarness(t, st, nil)
	alice := h.Device("alice", "alice-1")
	bob := h.Device("bob", "bob-1")
	h.Job("commitfail", 1, pooltest.Policy{}, alice)
	boom := errors.New("disk on fire")
	st.FailNext(boom)
	if _, err := h.S.Lease(context.Background(), bob, 1); !errors.Is(err, pool.ErrStopped) || !errors.Is(err, boom) {
		t.Fatalf("Lease during a failed commit: %v", err)
	}
	if err := h.Wait(); !errors.Is(err, boom) {
		t.Fatalf("Serve: %v, want the commit error", err)
	}
	h.Stop()
	if _, err := h.S.Lease(context.Background(), bob, 1); !errors.Is(err, pool.ErrStopped) {
		t.Fatalf("Lease after a failed commit: %v", err)
	}
	h.Start()
	if ls := h.Lease(bob, 1); len(ls) != 1 {
		t.Fatalf("leases after rebuilding: %v", ls)
	}
}

// TestSchedSubmitQueued: SubmitQueued checks and records a submission as
// Submit does and returns before its commit; Wait returns once the
// commit is durable, or with its failure, naming the lease. A refusal
// comes at once, and the zero Committed waits for nothing.
func TestSchedSubmitQueued(t *testing.T) {
	st := pool.NewMemStore()
	h := newHarness(t, st, nil)
	ctx := context.Background()
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("queued", 3, pooltest.Policy{}, alice)
	lb := h.Lease(bob, 3)
	if len(lb) != 3 {
		t.Fatalf("bob's leases: %v", lb)
	}

	wrong := good(lb[0].Task)
	wrong.Digest = pool.ReplicaDigest([]byte("other bytes"), false, "")
	c, err := h.S.SubmitQueued(ctx, bob, lb[0].ID, wrong)
	if !errors.Is(err, pool.ErrBadSubmission) || !strings.Contains(err.Error(), lb[0].ID) {
		t.Fatalf("SubmitQueued of a digest that does not match: %v, want ErrBadSubmission naming the lease", err)
	}
	if err := c.Wait(ctx); err != nil {
		t.Fatalf("Wait of a refused submission's zero Committed: %v", err)
	}
	if _, err := h.S.SubmitQueued(ctx, carol, lb[0].ID, good(lb[0].Task)); !errors.Is(err, pool.ErrNotYourLease) {
		t.Fatalf("SubmitQueued of another device's lease: %v, want ErrNotYourLease", err)
	}

	var commits []pool.Committed
	for _, l := range lb[:2] {
		c, err := h.S.SubmitQueued(ctx, bob, l.ID, good(l.Task))
		if err != nil {
			t.Fatalf("SubmitQueued task %d: %v", l.Task, err)
		}
		commits = append(commits, c)
	}
	again, err := h.S.SubmitQueued(ctx, bob, lb[0].ID, good(lb[0].Task))
	if err != nil {
		t.Fatalf("the same submission queued again: %v, want nil (idempotent)", err)
	}
	for i, c := range append(commits, again) {
		if err := c.Wait(ctx); err != nil {
			t.Fatalf("Wait %d: %v", i, err)
		}
	}
	if _, err := h.S.SubmitQueued(ctx, bob, lb[0].ID, bad(lb[0].Task)); !errors.Is(err, pool.ErrConflict) {
		t.Fatalf("another result for a returned lease: %v, want ErrConflict", err)
	}
	for _, l := range h.Lease(carol, 3) {
		if l.Task != 2 {
			h.Submit(l, good(l.Task))
		}
	}
	if vs := h.Results(alice, j.ID); len(vs) != 2 {
		t.Fatalf("results after both devices agreed on tasks 0 and 1: %d, want 2", len(vs))
	}

	boom := errors.New("disk on fire")
	st.FailNext(boom)
	c, err = h.S.SubmitQueued(ctx, bob, lb[2].ID, good(lb[2].Task))
	if err != nil {
		t.Fatalf("SubmitQueued before a failing commit: %v", err)
	}
	if err := c.Wait(ctx); !errors.Is(err, boom) || !strings.Contains(err.Error(), "submit "+lb[2].ID) {
		t.Fatalf("Wait for a failed commit: %v, want the store's error naming the lease", err)
	}
	if err := h.Wait(); !errors.Is(err, boom) {
		t.Fatalf("Serve: %v, want the commit error", err)
	}
	// Nothing of the failed commit was kept: after a restart the lease is
	// live and takes the result again.
	h.Stop()
	h.Start()
	h.Submit(lb[2], good(lb[2].Task))
}

// TestSchedSelect: SchedulerConfig.Select keeps a job away from peers it
// leaves out and orders the jobs it keeps; Seeking lists unfinished jobs.
func TestSchedSelect(t *testing.T) {
	var mu sync.Mutex
	var (
		bobID  string
		gpuJob *string
		seen   [][]string
	)
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) {
		c.Select = func(p pool.Peer, jobs []pool.JobView) []job.ID {
			mu.Lock()
			defer mu.Unlock()
			var names []string
			var ids []job.ID
			for _, v := range jobs {
				names = append(names, v.Job.Manifest.Name)
				if gpuJob != nil && v.Job.Manifest.Name == *gpuJob {
					if p.ID == bobID {
						continue // bob offers no GPU
					}
					ids = append([]job.ID{v.Job.ID}, ids...) // GPU jobs first for GPU devices
					continue
				}
				ids = append(ids, v.Job.ID)
			}
			seen = append(seen, names)
			return append(ids, job.ID{1}) // an unknown ID is ignored
		}
	})
	alice := h.Device("alice", "alice-1")
	bob := h.Device("bob", "bob-1")
	carol := h.Device("carol", "carol-1")
	mu.Lock()
	bobID = bob
	name := "gpu"
	gpuJob = &name
	mu.Unlock()
	cpu := h.Job("cpu", 2, pooltest.Policy{}, alice)
	gpu := h.Job("gpu", 2, pooltest.Policy{}, alice)

	lb := h.Lease(bob, 10)
	for _, l := range lb {
		if l.Job != cpu.ID {
			t.Errorf("bob was leased task %d of job %s, which Select left out", l.Task, l.Job)
		}
	}
	if len(lb) != 2 {
		t.Errorf("bob got %d leases, want the 2 tasks of the cpu job", len(lb))
	}
	lc := h.Lease(carol, 1)
	if len(lc) != 1 || lc[0].Job != gpu.ID {
		t.Errorf("carol's first lease %+v: want a task of the gpu job, which Select ranks first", lc)
	}
	if ls := h.Lease(alice, 10); len(ls) != 0 {
		t.Errorf("the owner's device got leases %v: Select must not widen who may compute", tasksOf(ls))
	}
	mu.Lock()
	if diff := cmp.Diff([]string{"cpu", "gpu"}, seen[0]); diff != "" { // equal usage: oldest first
		t.Errorf("Select saw (-want +got):\n%s", diff)
	}
	mu.Unlock()
	var names []string
	for _, v := range h.S.Seeking() {
		names = append(names, v.Job.Manifest.Name)
		if v.Status.Job != v.Job.ID || v.Status.Tasks != 2 {
			t.Errorf("Seeking: status %+v does not describe job %s", v.Status, v.Job.ID)
		}
	}
	if diff := cmp.Diff([]string{"cpu", "gpu"}, names); diff != "" {
		t.Errorf("Seeking (-want +got):\n%s", diff)
	}
}

// A task that timed out on MaxTimeouts distinct devices ends: unverified
// (a decision of the pool, not a verified result, and no ledger entry),
// with a reason that says how often, on how many devices and after how
// long, and the end of the program's log. Until then the job's status
// says how many tasks time out, on how many devices; a second timeout on
// the same device does not count as another device.
func TestSchedGivesUpAfterTimeoutsOnDistinctDevices(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) { c.MaxTimeouts = 3 })
	alice := h.Device("alice", "alice-1")
	bob, carol, dave, erin := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1"), h.Device("erin", "erin-1")
	j := h.Job("gives-up", 2, pooltest.Policy{LeaseTimeout: time.Minute, TimeLimit: 2 * time.Minute}, alice)
	timeout := pool.Submission{Failed: true, Machine: true,
		Reason: "worker: task failed: timeout: task ran longer than its limit of 2m0s (raise policy.time_limit if the task needs longer)\nprogram log:\nlooping at step 7"}
	timeout.Digest = pool.ReplicaDigest(nil, true, timeout.Reason)

	lb, lc := h.Lease(bob, 2), h.Lease(carol, 2)
	h.Submit(lb[0], timeout) // task 0 times out on bob
	h.Submit(lb[1], good(1))
	h.Submit(lc[1], good(1)) // task 1 accepted
	st, _ := h.S.Status(j.ID)
	want := "1 task timing out: it ran past the 2m time limit, on 1 device in all; a task ends failed (unverified) once it timed out on 3 devices or failed 6 times"
	if st.TimingOut != 1 || st.TimeoutDevices != 1 || st.Timeouts != want {
		t.Errorf("status after one timeout: timing out %d on %d devices, %q; want 1 on 1, %q", st.TimingOut, st.TimeoutDevices, st.Timeouts, want)
	}
	h.Submit(lc[0], timeout) // and on carol
	h.Clock.Advance(time.Minute)
	// bob again, after the hold: still two devices.
	lb = h.Lease(bob, 2)
	if diff := cmp.Diff([]int64{0}, tasksOf(lb)); diff != "" {
		t.Fatalf("bob's leases after the hold (-want +got):\n%s", diff)
	}
	h.Submit(lb[0], timeout)
	st, _ = h.S.Status(j.ID)
	if st.Complete || st.TimingOut != 1 || st.TimeoutDevices != 2 || !strings.HasPrefix(st.Timeouts, "1 task timing out: it ran past the 2m time limit, on 2 devices in all;") {
		t.Errorf("status after three timeouts on two devices: %+v", st)
	}
	h.Restart()
	ld := h.Lease(dave, 2)
	if diff := cmp.Diff([]int64{0}, tasksOf(ld)); diff != "" {
		t.Fatalf("dave's leases (-want +got):\n%s", diff)
	}
	h.Submit(ld[0], timeout) // the third device: the pool gives up
	st, _ = h.S.Status(j.ID)
	if !st.Complete || st.Accepted != 1 || st.Failed != 1 || st.TimingOut != 0 || st.Timeouts != "" || st.Retrying != 0 {
		t.Errorf("status once given up: %+v", st)
	}
	if ls := h.Lease(erin, 2); len(ls) != 0 {
		t.Errorf("erin was leased %v after the pool gave up", tasksOf(ls))
	}
	got := h.Results(alice, j.ID)
	wantV := pool.Verified{Seq: 2, Task: 0, Status: pool.OutcomeUnverified,
		Reason: "timed out 4 times on 3 devices, after 2m each: the pool gave up on it, which is its decision and no verified result (raise policy.time_limit if the task needs longer)\nprogram log:\nlooping at step 7"}
	if len(got) != 2 || !cmp.Equal(got[1], wantV, cmpopts.EquateEmpty()) {
		t.Errorf("outcomes %+v, want the second %+v", got, wantV)
	}
	if !pool.GaveUp("unverified: "+wantV.Reason) || pool.CauseOf("unverified: "+wantV.Reason) != pool.CauseTimeLimit {
		t.Errorf("GaveUp or CauseOf does not recognise %q", wantV.Reason)
	}
	for _, e := range h.Ledger() {
		if e.Task == 0 {
			t.Errorf("the timeouts wrote a ledger entry: %+v", e)
		}
	}
}

// A device held from a task it timed out on takes it again before the
// hold ends when no other present device may take it, once the job's
// time limit doubled per failure of its own has passed since it leased
// the task: two donors that both timed out on a task of a 3 s time limit
// and a 1-minute lease timeout retry after 6 s, then 12 s (where each
// waited out the minute), and the task ends unverified after five
// timeouts. A registered device that is not present (the submitter, a
// donor gone) does not hold them back; one that is does.
func TestSchedHeldDeviceRetakesWhenNoOtherIsPresent(t *testing.T) {
	present := map[string]bool{}
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) {
		c.Present = func(peer string, _ time.Time) bool { return present[peer] }
	})
	alice := h.Device("alice", "alice-1")
	bob, carol, dave := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	present[bob], present[carol], present[dave] = true, true, true
	j := h.Job("alone-together", 1, pooltest.Policy{Redundancy: 1, Quorum: 1, LeaseTimeout: time.Minute, TimeLimit: 3 * time.Second}, alice)

	timeOut := func(who string, want bool, when string) {
		t.Helper()
		ls := h.Lease(who, 1)
		switch {
		case !want && len(ls) != 0:
			t.Fatalf("%s: leased %v, want nothing", when, pooltest.Tasks(ls))
		case want && (len(ls) != 1 || ls[0].Job != j.ID):
			t.Fatalf("%s: leased %v, want task 0 again (no other present device may take it)", when, pooltest.Tasks(ls))
		case want:
			h.Submit(ls[0], pooltest.Timeout())
		}
	}
	timeOut(bob, true, "bob first")
	timeOut(bob, false, "bob again while carol and dave, present, may take it")
	present[dave] = false // dave leaves
	timeOut(carol, true, "carol first")
	h.Clock.Advance(5 * time.Second)
	timeOut(bob, false, "bob a second before his retry is due (twice the time limit after his lease)")
	timeOut(carol, false, "carol a second before hers")
	h.Clock.Advance(time.Second)
	timeOut(bob, true, "bob's second try, due")
	timeOut(carol, true, "carol's second try, due")
	h.Clock.Advance(11 * time.Second)
	timeOut(bob, false, "bob a second before his third try (four time limits after his second lease)")
	h.Clock.Advance(time.Second)
	timeOut(bob, true, "bob's third try, due")
	st, _ := h.S.Status(j.ID)
	if !st.Complete || st.Failed != 1 || st.Retrying != 0 {
		t.Errorf("status after five timeouts on two devices: %+v", st)
	}
	got := h.Results(alice, j.ID)
	if len(got) != 1 || got[0].Status != pool.OutcomeUnverified || !strings.HasPrefix(got[0].Reason, "timed out 5 times on 2 devices") {
		t.Errorf("outcome: %+v, want unverified after 5 timeouts on 2 devices", got)
	}
}
