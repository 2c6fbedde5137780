package pooltest

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
)

// Harness runs a pool.Scheduler on a Store with a fake Clock, serving
// until the test ends. Its helpers fail the test on any error.
type Harness struct {
	T      testing.TB
	S      *pool.Scheduler
	Store  pool.Store
	Clock  *Clock
	Blobs  *Blobs
	Key    *identity.Key // the coordinator's
	Dir    string
	Peers  map[string]pool.Peer // registered devices by name
	Config func(*pool.SchedulerConfig)
	// Reopen, when set, is called by Restart between the old scheduler
	// and the new one: close the old store and open it again.
	Reopen func(old pool.Store) pool.Store

	cancel context.CancelFunc
	served chan error
	done   bool
	err    error
}

// NewHarness starts a scheduler on store; config, if not nil, adjusts its
// configuration. The scheduler stops when the test ends.
func NewHarness(tb testing.TB, store pool.Store, config func(*pool.SchedulerConfig)) *Harness {
	tb.Helper()
	h := &Harness{T: tb, Store: store, Clock: NewClock(), Blobs: &Blobs{}, Key: Key(tb, "coordinator"),
		Dir: tb.TempDir(), Config: config, Peers: map[string]pool.Peer{}}
	h.Start()
	tb.Cleanup(func() {
		if err := h.Stop(); err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return h
}

// Start builds a scheduler from the store and serves it.
func (h *Harness) Start() {
	h.T.Helper()
	cfg := pool.SchedulerConfig{Pool: "test", Key: h.Key, Store: h.Store, Blobs: h.Blobs.Path, Now: h.Clock.Now}
	if h.Config != nil {
		h.Config(&cfg)
	}
	s, err := pool.NewScheduler(context.Background(), cfg)
	if err != nil {
		h.T.Fatalf("NewScheduler: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.S, h.cancel, h.served, h.done, h.err = s, cancel, make(chan error, 1), false, nil
	go func() { h.served <- s.Serve(ctx) }()
}

// Wait returns what Serve returned, waiting for it to return on its own.
func (h *Harness) Wait() error {
	if !h.done {
		h.err, h.done = <-h.served, true
	}
	return h.err
}

// Stop cancels Serve and returns what it returned.
func (h *Harness) Stop() error {
	if h.cancel == nil {
		return nil
	}
	h.cancel()
	h.cancel = nil
	return h.Wait()
}

// Restart stops the scheduler, reopens the store if Reopen is set, and
// starts a new scheduler on it: what a coordinator restart does.
func (h *Harness) Restart() {
	h.T.Helper()
	if err := h.Stop(); err != nil {
		h.T.Fatalf("Serve: %v", err)
	}
	if h.Reopen != nil {
		h.Store = h.Reopen(h.Store)
	}
	h.Start()
}

// Device registers device name of owner and returns its peer ID.
func (h *Harness) Device(owner, name string) string {
	h.T.Helper()
	p := Device(h.T, Key(h.T, "owner/"+owner), name)
	if err := h.S.RegisterPeer(context.Background(), p); err != nil {
		h.T.Fatalf("RegisterPeer %s: %v", name, err)
	}
	h.Peers[name] = p
	return p.ID
}

// Job adds a new job (see Job) submitted by the peer submitter.
func (h *Harness) Job(name string, tasks int64, pol Policy, submitter string) *job.Job {
	h.T.Helper()
	j := Job(h.T, h.Blobs, h.Dir, name, tasks, pol)
	created, err := h.S.AddJob(context.Background(), j, submitter)
	if err != nil || !created {
		h.T.Fatalf("AddJob: created %v, %v", created, err)
	}
	return j
}

// Lease leases up to max tasks to peer.
func (h *Harness) Lease(peer string, max int) []pool.Lease {
	h.T.Helper()
	ls, err := h.S.Lease(context.Background(), peer, max)
	if err != nil {
		h.T.Fatalf("Lease: %v", err)
	}
	return ls
}

// Submit submits sub for l by its holder.
func (h *Harness) Submit(l pool.Lease, sub pool.Submission) {
	h.T.Helper()
	if err := h.S.Submit(context.Background(), l.Peer, l.ID, sub); err != nil {
		h.T.Fatalf("Submit task %d: %v", l.Task, err)
	}
}

// Decide adds job name of tasks tasks (the default Policy: two agreeing
// replicas decide a task), submitted by a device of its own, and has two
// other devices each lease and compute every task alike, a task at a
// time: tasks tasks decided, their receipts in the ledger. The devices
// are registered under the job's name (owners name+"-owner", name+"-a",
// name+"-b").
func (h *Harness) Decide(name string, tasks int64) *job.Job {
	h.T.Helper()
	owner := h.Device(name+"-owner", name+"-owner-1")
	a, b := h.Device(name+"-a", name+"-a-1"), h.Device(name+"-b", name+"-b-1")
	j := h.Job(name, tasks, Policy{}, owner)
	for range tasks {
		for _, dev := range []string{a, b} {
			ls := h.Lease(dev, 1)
			if len(ls) != 1 {
				h.T.Fatalf("device %s leased %d tasks of job %s, want 1", dev, len(ls), name)
			}
			h.Submit(ls[0], Good(ls[0].Task))
		}
	}
	return j
}

// Ledger returns the whole ledger after checking it with VerifyLedger.
func (h *Harness) Ledger() []pool.Entry {
	h.T.Helper()
	es, err := h.S.Ledger(0, 10000)
	if err != nil {
		h.T.Fatal(err)
	}
	if err := pool.VerifyLedger(es, h.S.PublicKey()); err != nil {
		h.T.Fatalf("VerifyLedger: %v", err)
	}
	return es
}

// Results returns the job's unacknowledged outcomes, for its merger.
func (h *Harness) Results(merger string, id job.ID) []pool.Verified {
	h.T.Helper()
	vs, err := h.S.Results(context.Background(), merger, id, 0, 10000)
	if err != nil {
		h.T.Fatalf("Results: %v", err)
	}
	return vs
}

// Tasks returns the task indexes of leases.
func Tasks(ls []pool.Lease) []int64 {
	out := []int64{}
	for _, l := range ls {
		out = append(out, l.Task)
	}
	return out
}

// EntrySummary is the part of a ledger entry most tests check.
type EntrySummary struct {
	Kind string
	Task int64
	Peer string
	Cost float64
}

// Summarize returns the summaries of es sorted by task, then peer.
func Summarize(es []pool.Entry) []EntrySummary {
	out := []EntrySummary{}
	for _, e := range es {
		out = append(out, EntrySummary{e.Kind, e.Task, e.Peer, e.Cost})
	}
	SortSummaries(out)
	return out
}

// SortSummaries sorts s by task, then peer.
func SortSummaries(s []EntrySummary) []EntrySummary {
	sort.Slice(s, func(i, k int) bool {
		if s[i].Task != s[k].Task {
			return s[i].Task < s[k].Task
		}
		return s[i].Peer < s[k].Peer
	})
	return s
}

// Good is the honest result of a task; Bad a wrong one.
func Good(task int64) pool.Submission { return Result(fmt.Appendf(nil, "result %d", task)) }

// Bad is a wrong result for task.
func Bad(task int64) pool.Submission { return Result(fmt.Appendf(nil, "lie %d", task)) }
