package pool_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// lease leases up to max tasks to peer, returning the error instead of
// failing the test.
func lease(h *pooltest.Harness, peer string, max int) ([]pool.Lease, error) {
	return h.S.Lease(context.Background(), peer, max)
}

// entriesOf counts the ledger's entries of kind naming peer.
func entriesOf(es []pool.Entry, kind, peer string) int {
	n := 0
	for _, e := range es {
		if e.Kind == kind && e.Peer == peer {
			n++
		}
	}
	return n
}

// Found by trying it: two colluding liars of distinct owners among six
// devices, quorum 2. A 1-1 split between a liar and an honest device was
// settled by whoever asked next, often the second liar, and the honest
// device was marked deviating. Now a split needs one more agreeing owner
// than the quorum, so two colluders never win a disputed task nor get an
// honest device marked, and an owner that deviated in the job does not
// settle its splits.
func TestTrustColludersDoNotSettleSplits(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) {
		c.Trust.ExcludeAfter = 1 << 20 // keep the liars in, to see every split they could settle
	})
	sub := h.Device("submitter", "sub-1")
	var honest, liars []string
	for _, o := range []string{"h1", "h2", "h3", "h4"} {
		honest = append(honest, h.Device(o, o+"-dev"))
	}
	for _, o := range []string{"m1", "m2"} {
		liars = append(liars, h.Device(o, o+"-dev"))
	}
	isLiar := map[string]bool{liars[0]: true, liars[1]: true}
	const tasks = 300
	j := h.Job("collude", tasks, pooltest.Policy{}, sub)
	devices := []string{honest[0], liars[0], honest[1], liars[1], honest[2], honest[3]}
	for round := 0; round < 400; round++ {
		// Rotate who asks first, so that every pairing happens.
		var held []pool.Lease
		for k := range devices {
			d := devices[(round+k)%len(devices)]
			ls, err := lease(h, d, 1)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, ls...)
		}
		if len(held) == 0 {
			break
		}
		for _, l := range held {
			if isLiar[l.Peer] {
				h.Submit(l, bad(l.Task))
			} else {
				h.Submit(l, good(l.Task))
			}
		}
	}
	st, err := h.S.Status(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Complete {
		t.Fatalf("job not complete: %+v", st)
	}
	es := h.Ledger()
	for _, d := range honest {
		if n := entriesOf(es, pool.KindDeviation, d); n != 0 {
			t.Errorf("honest device %s was marked deviating %d times", d, n)
		}
	}
	// A wrong result may still be accepted where both first replicas went
	// to the colluders (that is what spot checks are for), but never
	// after an honest device disagreed.
	wrong := 0
	for _, v := range h.Results(sub, j.ID) {
		if string(v.Result) != string(good(v.Task).Result) {
			wrong++
		}
	}
	disputedWins := 0
	for _, e := range es {
		if e.Kind == pool.KindReceipt && isLiar[e.Peer] {
			for _, x := range es {
				if x.Task == e.Task && x.Kind == pool.KindDeviation {
					disputedWins++
				}
			}
		}
	}
	if disputedWins != 0 {
		t.Errorf("liars earned %d receipts on tasks where someone was marked deviating", disputedWins)
	}
	t.Logf("%d of %d tasks accepted with the colluders' value (both first replicas theirs)", wrong, tasks)
}

// Found by trying it: one person with two self-made owner keys ran two
// lying devices beside one honest, established device, and got receipts
// on both while the honest device was marked deviating. Now two new owners
// never form a quorum together: every accepted task has an established
// owner among its agreeing voters.
func TestTrustNewOwnersCannotFormQuorum(t *testing.T) {
	honestOwner := pooltest.Key(t, "owner/honest")
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) {
		c.Trust.TrustedOwners = []string{identity.IDOf(honestOwner.Public())}
	})
	sub := h.Device("submitter", "sub-1")
	honest := h.Device("honest", "honest-1")
	s1, s2 := h.Device("sybil-a", "sybil-a-1"), h.Device("sybil-b", "sybil-b-1")
	j := h.Job("sybil", 40, pooltest.Policy{}, sub)
	for round := 0; round < 200; round++ {
		var held []pool.Lease
		for _, d := range []string{s1, s2, honest} {
			ls, err := lease(h, d, 4)
			if err != nil && !errors.Is(err, pool.ErrExcluded) {
				t.Fatal(err)
			}
			held = append(held, ls...)
		}
		if len(held) == 0 {
			break
		}
		for _, l := range held {
			if l.Peer == honest {
				h.Submit(l, good(l.Task))
			} else {
				h.Submit(l, bad(l.Task))
			}
		}
	}
	es := h.Ledger()
	for _, d := range []string{s1, s2} {
		if n := entriesOf(es, pool.KindReceipt, d); n != 0 {
			t.Errorf("sybil device %s earned %d receipts", d, n)
		}
	}
	if n := entriesOf(es, pool.KindDeviation, honest); n != 0 {
		t.Errorf("the honest device was marked deviating %d times", n)
	}
	for _, v := range h.Results(sub, j.ID) {
		if v.Status == pool.OutcomeOK && string(v.Result) != string(good(v.Task).Result) {
			t.Errorf("task %d accepted with the sybils' value", v.Task)
		}
	}
}

// Found by trying it: a liar returning fixed results at once was leased
// all 200 tasks of a job within seconds. A device without a record holds
// at most MaxUnverified replicas, and after ExcludeAfter deviations it and
// its owner are excluded for ExcludeFor.
func TestTrustRateLimitAndExclusion(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) {
		c.Trust.ExcludeFor = time.Hour
	})
	sub := h.Device("submitter", "sub-1")
	liar := h.Device("mallory", "mallory-1")
	liar2 := h.Device("mallory", "mallory-2")
	var honest []string
	for _, o := range []string{"h1", "h2", "h3"} {
		honest = append(honest, h.Device(o, o+"-dev"))
	}
	h.Job("greedy", 200, pooltest.Policy{}, sub)
	ls, err := lease(h, liar, 200)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != pool.DefaultMaxUnverified {
		t.Fatalf("a new device was leased %d tasks at once, want %d", len(ls), pool.DefaultMaxUnverified)
	}
	for _, l := range ls {
		h.Submit(l, bad(l.Task))
	}
	if more, _ := lease(h, liar, 200); len(more) != 0 {
		t.Fatalf("the device got %d more while its %d results are undecided", len(more), len(ls))
	}
	// Honest devices check its work: the liar is outvoted, three
	// deviations exclude it. Its votes on undecided tasks are then void,
	// which may decide a task another honest device still computes.
	for round := 0; round < 20; round++ {
		for _, d := range honest {
			for _, l := range h.Lease(d, 8) {
				if err := h.S.Submit(context.Background(), l.Peer, l.ID, good(l.Task)); err != nil && !errors.Is(err, pool.ErrTaskDecided) {
					t.Fatalf("Submit task %d: %v", l.Task, err)
				}
			}
		}
	}
	es := h.Ledger()
	if n := entriesOf(es, pool.KindDeviation, liar); n < pool.DefaultExcludeAfter {
		t.Fatalf("%d deviations of the liar, want at least %d", n, pool.DefaultExcludeAfter)
	}
	for _, d := range []string{liar, liar2} {
		_, err := lease(h, d, 1)
		var ex *pool.ExcludedError
		if !errors.Is(err, pool.ErrExcluded) || !errors.As(err, &ex) || !ex.Until.Equal(h.Clock.Now().Add(time.Hour)) {
			t.Errorf("lease of %s after repeated deviations: %v, want excluded for an hour", d, err)
		}
	}
	h.Clock.Advance(time.Hour + time.Second)
	if _, err := lease(h, liar2, 1); err != nil {
		t.Errorf("lease after the exclusion ended: %v", err)
	}
}

// Found by trying it: a job with 2^32 tasks took every lease because
// offers ranked jobs with more tasks left first, and with equal tasks left
// jobs were ordered by ID. Now leases go by fair share between owners:
// both owners' jobs progress.
func TestFairShareBetweenOwners(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	big := h.Device("big", "big-1")
	small := h.Device("small", "small-1")
	d1, d2 := h.Device("donor1", "donor1-1"), h.Device("donor2", "donor2-1")
	huge := h.Job("huge", 1<<32, pooltest.Policy{}, big)
	tiny := h.Job("tiny", 6, pooltest.Policy{}, small)
	leased := map[job.ID]int{}
	for round := 0; round < 16; round++ {
		for _, d := range []string{d1, d2} {
			for _, l := range h.Lease(d, 1) {
				leased[l.Job]++
				h.Submit(l, good(l.Task))
			}
		}
	}
	st, _ := h.S.Status(tiny.ID)
	if !st.Complete {
		t.Errorf("the 6-task job (12 replicas) is not complete after 32 leases shared by two owners: %+v (leases: huge %d, tiny %d)",
			st, leased[huge.ID], leased[tiny.ID])
	}
	if leased[huge.ID] < 12 {
		t.Errorf("the big job got %d of 32 leases, want at least the 12 the small job left", leased[huge.ID])
	}
}

// A donor's own contribution raises its jobs' share: the owner whose
// devices earned receipts gets more leases than one that only submits.
func TestFairShareWeightsContribution(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	donorSub := h.Device("donor", "donor-sub")
	donorDev := h.Device("donor", "donor-dev")
	takerSub := h.Device("taker", "taker-sub")
	other := h.Device("other", "other-1")
	d1, d2 := h.Device("d1", "d1-1"), h.Device("d2", "d2-1")
	// The donor contributes: its device computes a third owner's job.
	warm := h.Job("warm", 20, pooltest.Policy{}, other)
	for i := 0; i < 20; i++ {
		for _, d := range []string{donorDev, d1} {
			for _, l := range h.Lease(d, 1) {
				h.Submit(l, good(l.Task))
			}
		}
	}
	if st, _ := h.S.Status(warm.ID); !st.Complete {
		t.Fatalf("warm-up job incomplete: %+v", st)
	}
	dj := h.Job("donor-job", 1000, pooltest.Policy{}, donorSub)
	tj := h.Job("taker-job", 1000, pooltest.Policy{}, takerSub)
	leased := map[job.ID]int{}
	for i := 0; i < 60; i++ {
		for _, d := range []string{d1, d2} {
			for _, l := range h.Lease(d, 1) {
				leased[l.Job]++
				h.Submit(l, good(l.Task))
			}
		}
	}
	if leased[dj.ID] <= leased[tj.ID] || leased[tj.ID] == 0 {
		t.Errorf("leases: donor's job %d, taker's job %d; want the donor's larger and both progressing", leased[dj.ID], leased[tj.ID])
	}
}

// Adaptive replication with a hold: a trusted device computes tasks
// alone and earns receipts at once, but its results reach the merge only
// after a later spot check of it passes. When it is caught lying, its
// held tasks are computed again, the merge gets the right values, and the
// receipts it earned for the wrong ones are revoked by signed entries.
func TestAdaptiveCaughtLiarIsCorrectedAndRevoked(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) {
		c.Trust.Secret = []byte("a fixed secret, so that the test is repeatable")
	})
	sub := h.Device("submitter", "sub-1")
	bob := h.Device("bob", "bob-1")
	var others []string
	for _, o := range []string{"carol", "dave", "erin", "frank"} {
		others = append(others, h.Device(o, o+"-1"))
	}
	j := h.Job("adaptive", 60, pooltest.Policy{Verify: "min_quorum = 1\nspot_check = 0.3\ntrust_after = 3\n"}, sub)
	ledgerHas := func(kind, lease string) bool {
		for _, e := range h.Ledger() {
			if e.Kind == kind && e.Lease == lease {
				return true
			}
		}
		return false
	}
	// Bob earns trust: three results checked by carol.
	for i := 0; i < 3; i++ {
		lb := h.Lease(bob, 1)
		lc := h.Lease(others[0], 1)
		if len(lb) != 1 || len(lc) != 1 || lb[0].Task != lc[0].Task {
			t.Fatalf("warm-up leases %v %v", tasksOf(lb), tasksOf(lc))
		}
		h.Submit(lb[0], good(lb[0].Task))
		h.Submit(lc[0], good(lc[0].Task))
	}
	// Bob now lies. Tasks he computes alone are accepted (receipt) and
	// held; the first checked one catches him.
	var heldLies []pool.Lease
	caught := false
	for i := 0; i < 40 && !caught; i++ {
		lb := h.Lease(bob, 1)
		if len(lb) != 1 {
			t.Fatalf("bob got %v", tasksOf(lb))
		}
		h.Submit(lb[0], bad(lb[0].Task))
		if ledgerHas(pool.KindReceipt, lb[0].ID) {
			heldLies = append(heldLies, lb[0])
			continue
		}
		// A checked task: the others compute it, each check leased after
		// a random number of requests for work to an owner the pool
		// draws; the split needs three agreeing owners.
		for round := 0; round < 200 && !caught; round++ {
			for _, l := range h.Lease(others[round%len(others)], 1) {
				h.Submit(l, good(l.Task))
			}
			caught = ledgerHas(pool.KindDeviation, lb[0].ID)
		}
	}
	if !caught || len(heldLies) == 0 {
		t.Fatalf("caught %v after %d held lies: the secret gives no case to test; choose another", caught, len(heldLies))
	}
	for _, v := range h.Results(sub, j.ID) {
		for _, l := range heldLies {
			if v.Task == l.Task {
				t.Fatalf("held result of task %d reached the merge before its check", l.Task)
			}
		}
	}
	// The held tasks are computed again by others, without bob's vote.
	for round := 0; round < 10; round++ {
		for _, o := range others {
			for _, l := range h.Lease(o, 4) {
				h.Submit(l, good(l.Task))
			}
		}
	}
	got := map[int64]string{}
	for _, v := range h.Results(sub, j.ID) {
		got[v.Task] = string(v.Result)
	}
	for _, l := range heldLies {
		if got[l.Task] != string(good(l.Task).Result) {
			t.Errorf("task %d merged as %q, want the recomputed %q", l.Task, got[l.Task], good(l.Task).Result)
		}
		if !ledgerHas(pool.KindRevocation, l.ID) {
			t.Errorf("bob's receipt for task %d (lease %s) was not revoked", l.Task, l.ID)
		}
	}
	var revoked []int64
	for _, e := range h.Ledger() { // Ledger checks the chain and signatures
		if e.Kind == pool.KindRevocation {
			revoked = append(revoked, e.Task)
			if e.Peer != bob || e.Cost != 1 {
				t.Errorf("revocation %+v: want bob's receipt of cost 1", e)
			}
		}
	}
	var want []int64
	for _, l := range heldLies {
		want = append(want, l.Task)
	}
	slices.Sort(revoked) // recomputed by drawn devices, in no set order
	if diff := cmp.Diff(want, revoked); diff != "" {
		t.Errorf("revoked receipts' tasks (-want +got):\n%s", diff)
	}
}

// A job that cannot reach its quorum says why in its status.
func TestStatusSaysWhyNoQuorum(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.Device("alice", "alice-1")
	bob, bob2 := h.Device("bob", "bob-1"), h.Device("bob", "bob-2")
	j := h.Job("lonely", 3, pooltest.Policy{}, alice)
	h.Lease(alice, 1) // the owner's own device asks too: it cannot vote
	for _, l := range append(h.Lease(bob, 3), h.Lease(bob2, 3)...) {
		h.Submit(l, good(l.Task))
	}
	st, err := h.S.Status(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "needs devices of 2 owners to agree on each task; 1 other owner's devices are connected"; st.Trouble != want {
		t.Errorf("trouble %q, want %q", st.Trouble, want)
	}
	carol := h.Device("carol", "carol-1")
	h.Lease(carol, 0)
	if st, _ := h.S.Status(j.ID); st.Trouble != "" {
		t.Errorf("trouble %q with two owners connected, want none", st.Trouble)
	}
	h.Clock.Advance(time.Hour)
	if st, _ := h.S.Status(j.ID); st.Trouble != "needs devices of 2 owners to agree on each task; 0 other owners' devices are connected" {
		t.Errorf("trouble %q an hour after anyone asked", st.Trouble)
	}
}

// Found by trying it: with equal tasks left, jobs were ordered by ID, so a
// job's last task waited behind thousands of one-task jobs. Another
// owner's many one-task jobs now take turns with it, and an owner's own
// jobs go in the order submitted.
func TestFairShareLastTaskDoesNotWait(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	many := h.Device("many", "many-1")
	one := h.Device("one", "one-1")
	d1, d2 := h.Device("d1", "d1-1"), h.Device("d2", "d2-1")
	var small []*job.Job
	for i := range 60 {
		small = append(small, h.Job(fmt.Sprintf("single-%d", i), 1, pooltest.Policy{}, many))
	}
	long := h.Job("long", 4, pooltest.Policy{}, one) // submitted last: oldest-first would make it wait for 120 leases
	leases := 0
	for leases < 200 {
		if st, _ := h.S.Status(long.ID); st.Complete {
			break
		}
		for _, d := range []string{d1, d2} {
			for _, l := range h.Lease(d, 1) {
				leases++
				h.Submit(l, good(l.Task))
			}
		}
	}
	if st, _ := h.S.Status(long.ID); !st.Complete || leases > 20 {
		t.Errorf("the 4-task job took %d leases (complete %v) beside 60 one-task jobs of another owner; want at most 20", leases, st.Complete)
	}
	// The other owner's jobs went oldest first.
	for i, j := range small[:4] {
		if st, _ := h.S.Status(j.ID); !st.Complete {
			t.Errorf("one-task job %d of the other owner, among the oldest, is not complete", i)
		}
	}
}

// The bound on a newcomer's undecided replicas is for other owners' jobs:
// an owner's own devices take as many of its own tasks as they ask for.
func TestRateLimitSparesOwnJobs(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	a1 := h.Device("alice", "alice-1")
	a2 := h.Device("alice", "alice-2")
	h.Job("own", 40, pooltest.Policy{Participants: "owner"}, a1)
	if ls := h.Lease(a2, 32); len(ls) != 32 {
		t.Errorf("the owner's device got %d of its own tasks, want 32", len(ls))
	}
}

// Found by trying it: spot_check = 0 read back as the default 0.1, so a
// job that asked never to replicate a trusted device's task still had
// about one in ten replicated. Now 0 means never: after earning trust, a
// device computes each of 100 tasks alone.
func TestAdaptiveSpotCheckZeroNeverChecks(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	sub := h.Device("submitter", "sub-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	h.Job("never", 200, pooltest.Policy{Verify: "min_quorum = 1\nspot_check = 0\ntrust_after = 1\n"}, sub)
	lb, lc := h.Lease(bob, 1), h.Lease(carol, 1)
	if len(lb) != 1 || len(lc) != 1 || lb[0].Task != lc[0].Task {
		t.Fatalf("warm-up leases %v %v", tasksOf(lb), tasksOf(lc))
	}
	h.Submit(lb[0], good(lb[0].Task))
	h.Submit(lc[0], good(lc[0].Task))
	for i := 0; i < 100; i++ {
		l := h.Lease(bob, 1)
		if len(l) != 1 {
			t.Fatalf("bob's lease %d: %v", i, tasksOf(l))
		}
		h.Submit(l[0], good(l[0].Task))
	}
	alone := 0
	for _, e := range h.Ledger() {
		if e.Kind == pool.KindReceipt && e.Peer == bob && e.Task > 0 {
			alone++
		}
	}
	if alone != 100 {
		t.Errorf("bob earned %d receipts for tasks computed alone, want 100: some were spot checked", alone)
	}
	// Nothing is left for carol to check while the job has fresh tasks:
	// bob's results wait for their check window.
	for _, l := range h.Lease(carol, 8) {
		if l.Task <= 100 {
			t.Errorf("carol was leased task %d, which bob computed alone and is never spot checked", l.Task)
		}
	}
}

// A restarted coordinator keeps its devices' trust records: trusted stays
// trusted, excluded stays excluded.
func TestTrustSurvivesRestart(t *testing.T) {
	pooltest.RunTrustRestart(newHarness(t, pool.NewMemStore(), nil))
}

// Found by a CI run of the kill test: three devices, one killed while it
// held the second replicas of the other two's tasks. Each survivor's
// bound on unverified work was then used up by its own results, which
// waited for the other survivor, and neither was leased anything: the
// job waited for good with "28 results waiting for a quorum, none
// computing". A check of another owner's returned result may now go
// MaxUnverified beyond the bound, so the two check each other.
func TestUnverifiedBoundDoesNotDeadlock(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) {
		c.Trust.MaxUnverified = 2
	})
	sub := h.Device("submitter", "sub-1")
	a, b, c := h.Device("a", "a-1"), h.Device("b", "b-1"), h.Device("c", "c-1")
	j := h.Job("bound", 6, pooltest.Policy{LeaseTimeout: time.Minute}, sub)
	la := h.Lease(a, 2) // tasks 0 and 1
	lc := h.Lease(c, 2) // their second replicas
	lb := h.Lease(b, 2) // tasks 2 and 3
	if diff := cmp.Diff([]int64{0, 1, 0, 1, 2, 3}, append(append(tasksOf(la), tasksOf(lc)...), tasksOf(lb)...)); diff != "" {
		t.Fatalf("leases of a, c and b (-want +got):\n%s", diff)
	}
	for _, l := range append(la, lb...) {
		h.Submit(l, good(l.Task))
	}
	h.Clock.Advance(2 * time.Minute) // c is gone: its leases expire
	for round := 0; round < 10; round++ {
		got := 0
		for _, d := range []string{a, b} {
			for _, l := range h.Lease(d, 2) {
				got++
				h.Submit(l, good(l.Task))
			}
		}
		if got == 0 {
			break
		}
	}
	st, err := h.S.Status(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Complete {
		t.Fatalf("the job did not complete with two devices left: %+v", st)
	}
	if n := len(h.Lease(c, 2)); n != 0 {
		t.Errorf("c was leased %d replicas of a complete job", n)
	}
}

// Found by killing a divided pool's nodes: right after a take-over the
// new scheduler said "0 other owners' devices are connected" beside
// tasks those devices computed, since when a device last asked is kept
// in memory only. A device that holds a live lease counts as connected.
func TestStatusAfterRestartCountsLeaseHolders(t *testing.T) {
	store := pool.NewMemStore()
	h := newHarness(t, store, nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("restarted", 4, pooltest.Policy{LeaseTimeout: time.Hour}, alice)
	if n := len(h.Lease(bob, 2)) + len(h.Lease(carol, 2)); n != 4 {
		t.Fatalf("%d leases, want 4", n)
	}
	h.Restart()
	st, err := h.S.Status(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st.Leased != 4 || st.Trouble != "" {
		t.Errorf("after a restart: %d leased, trouble %q; want 4 and none (bob and carol hold leases)", st.Leased, st.Trouble)
	}
}
