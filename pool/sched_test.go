package pool_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// harness runs a Scheduler on a store with a fake clock.
type harness struct {
	t      *testing.T
	s      *pool.Scheduler
	store  pool.Store
	clock  *pooltest.Clock
	blobs  *pooltest.Blobs
	key    *identity.Key
	dir    string
	cfg    func(*pool.SchedulerConfig)
	cancel context.CancelFunc
	served chan error
	peers  map[string]pool.Peer // by device name
}

func newHarness(t *testing.T, store pool.Store, cfg func(*pool.SchedulerConfig)) *harness {
	t.Helper()
	h := &harness{t: t, store: store, clock: pooltest.NewClock(), blobs: &pooltest.Blobs{},
		key: pooltest.Key(t, "coordinator"), dir: t.TempDir(), cfg: cfg, peers: map[string]pool.Peer{}}
	h.start()
	t.Cleanup(func() { h.stop() })
	return h
}

func (h *harness) start() {
	h.t.Helper()
	cfg := pool.SchedulerConfig{Pool: "test", Key: h.key, Store: h.store, Blobs: h.blobs.Path, Now: h.clock.Now}
	if h.cfg != nil {
		h.cfg(&cfg)
	}
	s, err := pool.NewScheduler(context.Background(), cfg)
	if err != nil {
		h.t.Fatalf("NewScheduler: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.s, h.cancel, h.served = s, cancel, make(chan error, 1)
	go func() { h.served <- s.Serve(ctx) }()
}

func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	if err := <-h.served; err != nil {
		h.t.Errorf("Serve: %v", err)
	}
	h.cancel = nil
}

// restart stops the scheduler and builds a new one on the same store.
func (h *harness) restart() {
	h.t.Helper()
	h.stop()
	h.start()
}

// device registers device name of owner and returns its peer ID.
func (h *harness) device(owner, name string) string {
	h.t.Helper()
	p := pooltest.Device(h.t, pooltest.Key(h.t, "owner/"+owner), name)
	if err := h.s.RegisterPeer(context.Background(), p); err != nil {
		h.t.Fatalf("RegisterPeer %s: %v", name, err)
	}
	h.peers[name] = p
	return p.ID
}

func (h *harness) job(name string, tasks int64, pol pooltest.Policy, submitter string) *job.Job {
	h.t.Helper()
	j := pooltest.Job(h.t, h.blobs, h.dir, name, tasks, pol)
	created, err := h.s.AddJob(context.Background(), j, submitter)
	if err != nil || !created {
		h.t.Fatalf("AddJob: created %v, %v", created, err)
	}
	return j
}

func (h *harness) lease(peer string, max int) []pool.Lease {
	h.t.Helper()
	ls, err := h.s.Lease(context.Background(), peer, max)
	if err != nil {
		h.t.Fatalf("Lease: %v", err)
	}
	return ls
}

func (h *harness) submit(l pool.Lease, sub pool.Submission) {
	h.t.Helper()
	if err := h.s.Submit(context.Background(), l.Peer, l.ID, sub); err != nil {
		h.t.Fatalf("Submit task %d: %v", l.Task, err)
	}
}

func (h *harness) ledger() []pool.Entry {
	h.t.Helper()
	es, err := h.s.Ledger(0, 10000)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := pool.VerifyLedger(es, h.s.PublicKey()); err != nil {
		h.t.Fatalf("VerifyLedger: %v", err)
	}
	return es
}

func (h *harness) results(peer string, id job.ID) []pool.Verified {
	h.t.Helper()
	vs, err := h.s.Results(context.Background(), peer, id, 0, 1000)
	if err != nil {
		h.t.Fatalf("Results: %v", err)
	}
	return vs
}

func tasksOf(ls []pool.Lease) []int64 {
	out := []int64{}
	for _, l := range ls {
		out = append(out, l.Task)
	}
	return out
}

// entrySummary is the part of an entry a test checks.
type entrySummary struct {
	Kind string
	Task int64
	Peer string
	Cost float64
}

func summarize(es []pool.Entry) []entrySummary {
	out := []entrySummary{}
	for _, e := range es {
		out = append(out, entrySummary{e.Kind, e.Task, e.Peer, e.Cost})
	}
	sort.Slice(out, func(i, k int) bool {
		if out[i].Task != out[k].Task {
			return out[i].Task < out[k].Task
		}
		return out[i].Peer < out[k].Peer
	})
	return out
}

func good(task int64) pool.Submission { return pooltest.Result([]byte(fmt.Sprintf("result %d", task))) }
func bad(task int64) pool.Submission  { return pooltest.Result([]byte(fmt.Sprintf("lie %d", task))) }

func TestSchedQuorumTwoOwners(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.device("alice", "alice-1")
	alice2 := h.device("alice", "alice-2")
	bob := h.device("bob", "bob-1")
	bob2 := h.device("bob", "bob-2")
	carol := h.device("carol", "carol-1")
	j := h.job("quorum", 3, pooltest.Policy{TaskCost: 2.5}, alice)

	if ls := h.lease(alice2, 10); len(ls) != 0 {
		t.Fatalf("the owner's device got leases %v in an open pool", tasksOf(ls))
	}
	lb := h.lease(bob, 10)
	if diff := cmp.Diff([]int64{0, 1, 2}, tasksOf(lb)); diff != "" {
		t.Fatalf("bob's leases (-want +got):\n%s", diff)
	}
	if ls := h.lease(bob2, 10); len(ls) != 0 {
		t.Fatalf("a second device of bob got leases %v of tasks bob computes", tasksOf(ls))
	}
	lc := h.lease(carol, 10)
	if diff := cmp.Diff([]int64{0, 1, 2}, tasksOf(lc)); diff != "" {
		t.Fatalf("carol's leases (-want +got):\n%s", diff)
	}
	for _, l := range append(lb, lc...) {
		h.submit(l, good(l.Task))
	}
	want := []pool.Verified{}
	for i := int64(0); i < 3; i++ {
		want = append(want, pool.Verified{Seq: i + 1, Task: i, Status: pool.OutcomeOK, Result: good(i).Result})
	}
	if diff := cmp.Diff(want, h.results(alice, j.ID)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	var wantE []entrySummary
	for i := int64(0); i < 3; i++ {
		wantE = append(wantE, summarize([]pool.Entry{{Kind: pool.KindReceipt, Task: i, Peer: bob, Cost: 2.5}, {Kind: pool.KindReceipt, Task: i, Peer: carol, Cost: 2.5}})...)
	}
	es := h.ledger()
	if diff := cmp.Diff(wantE, summarize(es)); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	for _, e := range es {
		if e.Owner == h.peers["alice-1"].Owner {
			t.Errorf("entry %d names the job owner", e.Seq)
		}
	}
	st, err := h.s.Status(j.ID)
	if err != nil {
		t.Fatal(err)
	}
	wantSt := pool.JobStatus{Job: j.ID, Name: "quorum", Owner: h.peers["alice-1"].Owner, Merger: alice, Tasks: 3,
		Accepted: 3, Complete: true, Quorum: 2, Redundancy: 2}
	if diff := cmp.Diff(wantSt, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
	if ls := h.lease(bob2, 10); len(ls) != 0 {
		t.Errorf("leases %v of a complete job", tasksOf(ls))
	}
}

func TestSchedLyingPeer(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.device("alice", "alice-1")
	bob := h.device("bob", "bob-1")
	liar := h.device("mallory", "mallory-1")
	carol := h.device("carol", "carol-1")
	j := h.job("liar", 1, pooltest.Policy{}, alice)

	lb, lm := h.lease(bob, 1), h.lease(liar, 1)
	h.submit(lb[0], good(0))
	h.submit(lm[0], bad(0))
	if got := h.results(alice, j.ID); len(got) != 0 {
		t.Fatalf("outcome %v before a majority", got)
	}
	if ls := h.lease(bob, 1); len(ls) != 0 {
		t.Fatalf("bob got a second replica of task %v", tasksOf(ls))
	}
	lc := h.lease(carol, 1)
	if diff := cmp.Diff([]int64{0}, tasksOf(lc)); diff != "" {
		t.Fatalf("carol's leases (-want +got):\n%s", diff)
	}
	h.submit(lc[0], good(0))
	want := []pool.Verified{{Seq: 1, Task: 0, Status: pool.OutcomeOK, Result: good(0).Result}}
	if diff := cmp.Diff(want, h.results(alice, j.ID)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	wantE := summarize([]pool.Entry{
		{Kind: pool.KindReceipt, Peer: bob, Cost: 1},
		{Kind: pool.KindDeviation, Peer: liar},
		{Kind: pool.KindReceipt, Peer: carol, Cost: 1},
	})
	if diff := cmp.Diff(wantE, summarize(h.ledger())); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	mine, err := h.s.PeerLedger(liar, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(mine) != 1 || mine[0].Kind != pool.KindDeviation || mine[0].Digest != bad(0).Digest || mine[0].Reason == "" {
		t.Errorf("the liar's ledger: %+v", mine)
	}
}

func TestSchedOwnerPool(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	a1 := h.device("alice", "alice-1")
	a2 := h.device("alice", "alice-2")
	a3 := h.device("alice", "alice-3")
	bob := h.device("bob", "bob-1")
	j := h.job("own", 2, pooltest.Policy{Participants: "owner"}, a1)

	if ls := h.lease(bob, 5); len(ls) != 0 {
		t.Fatalf("another owner's device got %v in an owner-only job", tasksOf(ls))
	}
	l1 := h.lease(a1, 5)
	l2 := h.lease(a2, 1)
	l3 := h.lease(a3, 5)
	if diff := cmp.Diff([][]int64{{0, 1}, {0}, {1}}, [][]int64{tasksOf(l1), tasksOf(l2), tasksOf(l3)}); diff != "" {
		t.Fatalf("leases (-want +got):\n%s", diff)
	}
	for _, l := range append(append(l1, l2...), l3...) {
		h.submit(l, good(l.Task))
	}
	if got := h.results(a1, j.ID); len(got) != 2 || got[0].Status != pool.OutcomeOK || got[1].Status != pool.OutcomeOK {
		t.Errorf("results: %+v", got)
	}
	if es := h.ledger(); len(es) != 0 {
		t.Errorf("an owner-only job wrote ledger entries: %+v", summarize(es))
	}
}

func TestSchedVerifiedFailure(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.device("alice", "alice-1")
	bob := h.device("bob", "bob-1")
	carol := h.device("carol", "carol-1")
	j := h.job("fail", 1, pooltest.Policy{}, alice)
	h.submit(h.lease(bob, 1)[0], pooltest.Failure("panic: boom"))
	h.submit(h.lease(carol, 1)[0], pooltest.Failure("panic: boom"))
	want := []pool.Verified{{Seq: 1, Task: 0, Status: pool.OutcomeFailed, Reason: "panic: boom"}}
	if diff := cmp.Diff(want, h.results(alice, j.ID)); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	wantE := summarize([]pool.Entry{{Kind: pool.KindReceipt, Peer: bob, Cost: 1}, {Kind: pool.KindReceipt, Peer: carol, Cost: 1}})
	if diff := cmp.Diff(wantE, summarize(h.ledger())); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	st, _ := h.s.Status(j.ID)
	if st.Failed != 1 || !st.Complete {
		t.Errorf("status %+v", st)
	}
}

func TestSchedUnverified(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), func(c *pool.SchedulerConfig) { c.MaxReplicas = 3 })
	alice := h.device("alice", "alice-1")
	peers := []string{h.device("bob", "bob-1"), h.device("carol", "carol-1"), h.device("dave", "dave-1"), h.device("erin", "erin-1")}
	j := h.job("unverified", 1, pooltest.Policy{}, alice)
	h.submit(h.lease(peers[0], 1)[0], pooltest.Result([]byte("a")))
	h.submit(h.lease(peers[1], 1)[0], pooltest.Result([]byte("b")))
	h.submit(h.lease(peers[2], 1)[0], pooltest.Result([]byte("c")))
	if ls := h.lease(peers[3], 1); len(ls) != 0 {
		t.Errorf("a replica past MaxReplicas: %v", tasksOf(ls))
	}
	got := h.results(alice, j.ID)
	if len(got) != 1 || got[0].Status != pool.OutcomeUnverified || got[0].Result != nil || got[0].Reason == "" {
		t.Fatalf("results: %+v", got)
	}
	var wantE []entrySummary
	for _, p := range peers[:3] {
		wantE = append(wantE, entrySummary{Kind: pool.KindUnverified, Peer: p})
	}
	if diff := cmp.Diff(summarize(wantE2(wantE)), summarize(h.ledger())); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
}

func wantE2(s []entrySummary) []pool.Entry {
	var out []pool.Entry
	for _, e := range s {
		out = append(out, pool.Entry{Kind: e.Kind, Task: e.Task, Peer: e.Peer, Cost: e.Cost})
	}
	return out
}

// Two replicas agree, a third disagrees with both, then a fourth settles
// it: the majority rule counts every voter that returned.
func TestSchedMajorityNeedsStrictMajority(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.device("alice", "alice-1")
	b, c, d := h.device("bob", "bob-1"), h.device("carol", "carol-1"), h.device("dave", "dave-1")
	j := h.job("majority", 1, pooltest.Policy{Redundancy: 3, Quorum: 2}, alice)
	lb, lc, ld := h.lease(b, 1), h.lease(c, 1), h.lease(d, 1)
	h.submit(lb[0], pooltest.Result([]byte("x")))
	h.submit(lc[0], pooltest.Result([]byte("y")))
	if got := h.results(alice, j.ID); len(got) != 0 {
		t.Fatalf("decided on a 1:1 split: %+v", got)
	}
	h.submit(ld[0], pooltest.Result([]byte("y")))
	got := h.results(alice, j.ID)
	if len(got) != 1 || string(got[0].Result) != "y" {
		t.Fatalf("results %+v", got)
	}
}

func TestSchedLeaseLifecycle(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.device("alice", "alice-1")
	bob, carol, dave := h.device("bob", "bob-1"), h.device("carol", "carol-1"), h.device("dave", "dave-1")
	j := h.job("expiry", 1, pooltest.Policy{LeaseTimeout: 30 * time.Second}, alice)
	ctx := context.Background()

	lb, lc := h.lease(bob, 1), h.lease(carol, 1)
	if want := h.clock.Now().Add(30 * time.Second); !lb[0].Deadline.Equal(want) {
		t.Errorf("deadline %v, want %v", lb[0].Deadline, want)
	}
	h.clock.Advance(20 * time.Second)
	d, err := h.s.Heartbeat(ctx, carol, lc[0].ID)
	if err != nil || !d.Equal(h.clock.Now().Add(30*time.Second)) {
		t.Fatalf("Heartbeat: %v, %v", d, err)
	}
	if ls := h.lease(dave, 1); len(ls) != 0 {
		t.Fatalf("dave got %v while both replicas are leased", tasksOf(ls))
	}
	h.clock.Advance(15 * time.Second) // bob's lease is past its deadline, carol's is not
	ld := h.lease(dave, 1)
	if diff := cmp.Diff([]int64{0}, tasksOf(ld)); diff != "" {
		t.Fatalf("dave's leases after expiry (-want +got):\n%s", diff)
	}
	if err := h.s.Submit(ctx, bob, lb[0].ID, good(0)); !errors.Is(err, pool.ErrLeaseExpired) {
		t.Errorf("Submit on an expired lease: %v, want ErrLeaseExpired", err)
	}
	if _, err := h.s.Heartbeat(ctx, bob, lb[0].ID); !errors.Is(err, pool.ErrLeaseExpired) {
		t.Errorf("Heartbeat on an expired lease: %v, want ErrLeaseExpired", err)
	}
	// dave hands his lease back; bob may take the replica again.
	if err := h.s.Release(ctx, dave, ld[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Release(ctx, dave, ld[0].ID); err != nil {
		t.Errorf("second Release: %v", err)
	}
	if err := h.s.Submit(ctx, dave, ld[0].ID, good(0)); !errors.Is(err, pool.ErrLeaseExpired) {
		t.Errorf("Submit on a released lease: %v, want ErrLeaseExpired", err)
	}
	lb2 := h.lease(bob, 1)
	if len(lb2) != 1 {
		t.Fatalf("no lease after a release")
	}
	st, _ := h.s.Status(j.ID)
	if st.Leased != 2 {
		t.Errorf("status: %d leased, want 2", st.Leased)
	}
	h.submit(lb2[0], good(0))
	h.submit(lc[0], good(0))
	if got := h.results(alice, j.ID); len(got) != 1 || got[0].Status != pool.OutcomeOK {
		t.Errorf("results %+v", got)
	}
}

// A replica still in flight when its task is decided is cancelled.
func TestSchedLeaseCancelled(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.device("alice", "alice-1")
	b, c, d := h.device("bob", "bob-1"), h.device("carol", "carol-1"), h.device("dave", "dave-1")
	h.job("cancel", 1, pooltest.Policy{Redundancy: 3, Quorum: 2}, alice)
	lb, lc, ld := h.lease(b, 1), h.lease(c, 1), h.lease(d, 1)
	h.submit(lb[0], good(0))
	h.submit(lc[0], good(0))
	ctx := context.Background()
	if _, err := h.s.Heartbeat(ctx, d, ld[0].ID); !errors.Is(err, pool.ErrTaskDecided) {
		t.Errorf("Heartbeat: %v, want ErrTaskDecided", err)
	}
	if err := h.s.Submit(ctx, d, ld[0].ID, good(0)); !errors.Is(err, pool.ErrTaskDecided) {
		t.Errorf("Submit: %v, want ErrTaskDecided", err)
	}
}

func TestSchedErrors(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.device("alice", "alice-1")
	bob, carol := h.device("bob", "bob-1"), h.device("carol", "carol-1")
	j := h.job("errors", 2, pooltest.Policy{}, alice)
	ctx := context.Background()
	lb := h.lease(bob, 1)[0]
	lc := h.lease(carol, 1)[0]
	h.submit(lc, good(0))
	other := pooltest.Job(t, h.blobs, h.dir, "other", 1, pooltest.Policy{})
	mismatch := good(0)
	mismatch.Result = []byte("something else")

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"submit another peer's lease", func() error { return h.s.Submit(ctx, carol, lb.ID, good(0)) }, pool.ErrNotYourLease},
		{"heartbeat another peer's lease", func() error { _, err := h.s.Heartbeat(ctx, carol, lb.ID); return err }, pool.ErrNotYourLease},
		{"release another peer's lease", func() error { return h.s.Release(ctx, carol, lb.ID) }, pool.ErrNotYourLease},
		{"submit unknown lease", func() error { return h.s.Submit(ctx, bob, "00112233445566778899aabbccddeeff", good(0)) }, pool.ErrUnknownLease},
		{"digest mismatch", func() error { return h.s.Submit(ctx, bob, lb.ID, mismatch) }, pool.ErrBadSubmission},
		{"failure with bytes", func() error {
			s := pooltest.Failure("x")
			s.Result = []byte("y")
			return h.s.Submit(ctx, bob, lb.ID, s)
		}, pool.ErrBadSubmission},
		{"duplicate submit", func() error { return h.s.Submit(ctx, carol, lc.ID, good(0)) }, nil},
		{"different second submit", func() error { return h.s.Submit(ctx, carol, lc.ID, bad(0)) }, pool.ErrConflict},
		{"lease for unknown peer", func() error { _, err := h.s.Lease(ctx, "idnobody", 1); return err }, pool.ErrUnknownPeer},
		{"add job for unknown peer", func() error { _, err := h.s.AddJob(ctx, other, "idnobody"); return err }, pool.ErrUnknownPeer},
		{"results by a non-merger", func() error { _, err := h.s.Results(ctx, bob, j.ID, 0, 10); return err }, pool.ErrNotMerger},
		{"ack by a non-merger", func() error { return h.s.Ack(ctx, bob, j.ID, 0) }, pool.ErrNotMerger},
		{"results of unknown job", func() error { _, err := h.s.Results(ctx, alice, other.ID, 0, 10); return err }, pool.ErrUnknownJob},
		{"status of unknown job", func() error { _, err := h.s.Status(other.ID); return err }, pool.ErrUnknownJob},
		{"ack beyond delivered", func() error { return h.s.Ack(ctx, alice, j.ID, 5) }, pool.ErrBadRequest},
		{"peer with wrong ID", func() error {
			p := pooltest.Device(t, pooltest.Key(t, "owner/x"), "x-1")
			p.ID = "idwrong"
			return h.s.RegisterPeer(ctx, p)
		}, pool.ErrBadRequest},
		{"peer with a forged endorsement", func() error {
			p := pooltest.Device(t, pooltest.Key(t, "owner/x"), "x-1")
			p.Endorsement = pooltest.Key(t, "owner/y").Sign(pool.EndorsementMessage(p.Key))
			return h.s.RegisterPeer(ctx, p)
		}, pool.ErrBadRequest},
		{"peer ID with other keys", func() error {
			p := h.peers["bob-1"]
			q := pooltest.Device(t, pooltest.Key(t, "owner/x"), "x-1")
			p.OwnerKey, p.Owner, p.Endorsement = q.OwnerKey, q.Owner, q.Endorsement
			p.Owner = identity.IDOf(p.OwnerKey)
			p.Endorsement = pooltest.Key(t, "owner/x").Sign(pool.EndorsementMessage(p.Key))
			return h.s.RegisterPeer(ctx, p)
		}, pool.ErrConflict},
		{"register again", func() error { return h.s.RegisterPeer(ctx, h.peers["bob-1"]) }, nil},
		{"add job again", func() error {
			created, err := h.s.AddJob(ctx, j, alice)
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
	alice := h.device("alice", "alice-1")
	bob, carol := h.device("bob", "bob-1"), h.device("carol", "carol-1")
	j := h.job("ack", 4, pooltest.Policy{}, alice)
	for _, l := range append(h.lease(bob, 4), h.lease(carol, 4)...) {
		h.submit(l, good(l.Task))
	}
	ctx := context.Background()
	page, err := h.s.Results(ctx, alice, j.ID, 1, 2)
	if err != nil || len(page) != 2 || page[0].Seq != 2 || page[1].Seq != 3 {
		t.Fatalf("Results(after 1, max 2): %+v, %v", page, err)
	}
	if err := h.s.Ack(ctx, alice, j.ID, 2); err != nil {
		t.Fatal(err)
	}
	if err := h.s.Ack(ctx, alice, j.ID, 1); err != nil {
		t.Errorf("Ack below the mark: %v", err)
	}
	if _, err := h.s.Results(ctx, alice, j.ID, 0, 10); !errors.Is(err, pool.ErrConflict) {
		t.Errorf("Results before the ack mark: %v, want ErrConflict", err)
	}
	h.restart()
	rest, err := h.s.Results(ctx, alice, j.ID, 2, 10)
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
	if st, _ := h.s.Status(j.ID); st.Acked != 2 {
		t.Errorf("acked %d after restart, want 2", st.Acked)
	}
}

// A restart in the middle of a job keeps leases (with their deadlines),
// returned replicas, outcomes and the ledger, and duplicates nothing.
func TestSchedRestartMemStore(t *testing.T) {
	RunRestart(t, pool.NewMemStore())
}

// RunRestart is the restart scenario on any store.
func RunRestart(t *testing.T, store pool.Store) {
	h := newHarness(t, store, nil)
	alice := h.device("alice", "alice-1")
	bob, carol, dave := h.device("bob", "bob-1"), h.device("carol", "carol-1"), h.device("dave", "dave-1")
	j := h.job("restart", 3, pooltest.Policy{LeaseTimeout: time.Minute}, alice)
	lb := h.lease(bob, 3)
	lc := h.lease(carol, 3)
	h.submit(lb[0], good(0))
	h.submit(lc[0], good(0)) // task 0 accepted
	h.submit(lb[1], good(1)) // task 1 half returned
	h.submit(lb[2], good(2))
	before := h.ledger()

	h.restart()
	if got := h.ledger(); !cmp.Equal(before, got) {
		t.Fatalf("ledger changed across a restart:\n%s", cmp.Diff(before, got))
	}
	if got := h.results(alice, j.ID); len(got) != 1 || got[0].Task != 0 {
		t.Fatalf("results after restart: %+v", got)
	}
	st, _ := h.s.Status(j.ID)
	if st.Leased != 2 || st.Accepted != 1 {
		t.Fatalf("status after restart: %+v", st)
	}
	// carol's live leases came back; her submissions complete the tasks.
	h.submit(lc[1], good(1))
	// Her lease of task 2 expires during a second outage and goes to dave.
	h.restart()
	h.clock.Advance(2 * time.Minute)
	ld := h.lease(dave, 3)
	if diff := cmp.Diff([]int64{2}, tasksOf(ld)); diff != "" {
		t.Fatalf("dave's leases (-want +got):\n%s", diff)
	}
	if err := h.s.Submit(context.Background(), carol, lc[2].ID, good(2)); !errors.Is(err, pool.ErrLeaseExpired) {
		t.Errorf("Submit on a lease that expired across a restart: %v", err)
	}
	h.submit(ld[0], good(2))
	h.restart()
	got := h.results(alice, j.ID)
	var tasks []int64
	for _, v := range got {
		tasks = append(tasks, v.Task)
	}
	if diff := cmp.Diff([]int64{0, 1, 2}, tasks); diff != "" {
		t.Errorf("outcome tasks (-want +got):\n%s", diff)
	}
	es := h.ledger()
	wantE := summarize(wantE2([]entrySummary{
		{pool.KindReceipt, 0, bob, 1}, {pool.KindReceipt, 0, carol, 1},
		{pool.KindReceipt, 1, bob, 1}, {pool.KindReceipt, 1, carol, 1},
		{pool.KindReceipt, 2, bob, 1}, {pool.KindReceipt, 2, dave, 1},
	}))
	if diff := cmp.Diff(wantE, summarize(es)); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	if st, _ := h.s.Status(j.ID); !st.Complete || st.Accepted != 3 || st.Leased != 0 {
		t.Errorf("final status %+v", st)
	}
}

// Many peers lease and submit at once; every task ends accepted exactly
// once and the ledger verifies.
func TestSchedConcurrent(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	alice := h.device("alice", "alice-1")
	const tasks, peers = 200, 8
	ids := make([]string, peers)
	for i := range ids {
		ids[i] = h.device(fmt.Sprintf("owner%d", i), fmt.Sprintf("dev%d", i))
	}
	j := h.job("concurrent", tasks, pooltest.Policy{}, alice)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, peers)
	for _, id := range ids {
		wg.Go(func() {
			for {
				ls, err := h.s.Lease(ctx, id, 3)
				if err != nil {
					errs <- err
					return
				}
				if len(ls) == 0 {
					if st, _ := h.s.Status(j.ID); st.Complete {
						return
					}
					continue
				}
				for _, l := range ls {
					if err := h.s.Submit(ctx, id, l.ID, good(l.Task)); err != nil && !errors.Is(err, pool.ErrTaskDecided) {
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
	got := h.results(alice, j.ID)
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
	if es := h.ledger(); len(es) != 2*tasks {
		t.Errorf("%d ledger entries, want %d", len(es), 2*tasks)
	}
}

// A failed commit stops the scheduler: the waiting call fails, later
// calls are refused, and a new scheduler on the store continues.
func TestSchedCommitFailure(t *testing.T) {
	st := pool.NewMemStore()
	h := newHarness(t, st, nil)
	alice := h.device("alice", "alice-1")
	bob := h.device("bob", "bob-1")
	h.job("commitfail", 1, pooltest.Policy{}, alice)
	boom := errors.New("disk on fire")
	st.FailNext(boom)
	if _, err := h.s.Lease(context.Background(), bob, 1); !errors.Is(err, pool.ErrStopped) || !errors.Is(err, boom) {
		t.Fatalf("Lease during a failed commit: %v", err)
	}
	if err := <-h.served; !errors.Is(err, boom) {
		t.Fatalf("Serve: %v, want the commit error", err)
	}
	h.cancel()
	h.cancel = nil
	if _, err := h.s.Lease(context.Background(), bob, 1); !errors.Is(err, pool.ErrStopped) {
		t.Fatalf("Lease after a failed commit: %v", err)
	}
	h.start()
	if ls := h.lease(bob, 1); len(ls) != 1 {
		t.Fatalf("leases after rebuilding: %v", ls)
	}
}
