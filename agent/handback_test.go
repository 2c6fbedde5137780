package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/job"
	"idlepool/store"
)

// switchPolicy is a policy the test switches between decisions: computing
// on one core until set.
type switchPolicy struct{ d atomic.Pointer[idle.Decision] }

func (p *switchPolicy) set(d idle.Decision) { p.d.Store(&d) }

func (p *switchPolicy) decide(idle.Signals, time.Time) idle.Decision {
	if d := p.d.Load(); d != nil {
		return *d
	}
	return idle.Decision{State: idle.StateComputing, Cores: 1, Reason: "computing on 1 of 1 cores"}
}

// TestEarlyHandBack: a task suspended for a pause that ends soon (the
// owner's pause until a few seconds from now) keeps its lease and goes
// on; suspended because a game started, it is handed back at once, long
// before its minute-long lease would let it go: the pool has it unleased,
// the status and the event log say so, no contribution is recorded for
// it, and once the device computes again the task is leased afresh and
// done.
func TestEarlyHandBack(t *testing.T) {
	exec := &suspendExec{fakeExec: &fakeExec{Block: make(chan struct{})}}
	j := planJob(t, "handback", 1, "redundancy = 1\nquorum = 1")
	j = withLeaseTimeout(t, j, time.Minute) // held suspended for 45 s at most
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	dev := newDevice(t, nil)
	events := filepath.Join(t.TempDir(), "events.log")
	policy := &switchPolicy{}
	a, err := agent.New(agent.Config{
		PoolURL: co.url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: exec, Store: dev.local, HTTP: httpClient(t),
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Signals: newFakeSignals(1), Decide: policy.decide, SamplePeriod: 20 * time.Millisecond,
		Events: agent.NewEventLog(events, 0, nil),
		Logger: quietLogger(t).With("side", "agent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(ctx)
	ra := &runningAgent{Agent: a, dev: dev, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Serve(actx) }()
	t.Cleanup(func() { ra.Stop(t) })

	eventually(t, 2*time.Minute, "running", func() bool { return len(ra.Running()) == 1 })
	first := ra.Running()[0].ID

	// A pause that ends in 10 s: not worth a hand-back.
	policy.set(idle.Decision{State: idle.StatePaused, Reason: "paused by you until soon", Hold: idle.HoldOwner,
		Cause: idle.CausePaused, Until: time.Now().Add(10 * time.Second)})
	eventually(t, 2*time.Minute, "suspended", func() bool { return exec.suspends.Load() == 1 })
	time.Sleep(300 * time.Millisecond) // fifteen decisions
	if r := ra.Running(); len(r) != 1 || r[0].ID != first || len(ra.Status().HandedBack) != 0 {
		t.Fatalf("a short pause handed the task back: running %v, handed back %v", r, ra.Status().HandedBack)
	}
	policy.set(idle.Decision{State: idle.StateComputing, Cores: 1, Reason: "computing"})
	eventually(t, 2*time.Minute, "resumed", func() bool { return exec.resumes.Load() == 2 })

	// A game starts: handed back at once.
	policy.set(idle.Decision{State: idle.StatePaused, Reason: "paused: a Steam game is running", Hold: idle.HoldOwner, Cause: idle.CauseGame})
	eventually(t, 2*time.Minute, "handed back", func() bool { return len(ra.Running()) == 0 })
	st := ra.Status()
	if len(st.HandedBack) != 1 || st.HandedBack[0].Lease != first || st.HandedBack[0].Why != "a game started" {
		t.Fatalf("status handed back %+v, want lease %s for a game", st.HandedBack, first)
	}
	if want := "handed back task 0 of job handback: a game started"; !slices.Contains(st.Notices(time.UTC, time.Now()), want) {
		t.Errorf("notices %q lack %q", st.Notices(time.UTC, time.Now()), want)
	}
	js, err := sub.c.Status(ctx, j.ID)
	if err != nil || js.Leased != 0 || js.Accepted != 0 {
		t.Errorf("job status %+v, %v; want the task unleased and not done", js, err)
	}
	b, err := os.ReadFile(events)
	if err != nil || !strings.Contains(string(b), "handed back task 0 of job handback: a game started, to pool") {
		t.Errorf("event log %q, %v", b, err)
	}

	// Computing again: the notice goes, and the task is leased afresh.
	close(exec.Block)
	policy.set(idle.Decision{State: idle.StateComputing, Cores: 1, Reason: "computing"})
	eventually(t, 2*time.Minute, "job done", func() bool {
		js, err := sub.c.Status(ctx, j.ID)
		return err == nil && js.Accepted == 1
	})
	if hb := ra.Status().HandedBack; len(hb) != 0 {
		t.Errorf("handed back still listed while computing: %+v", hb)
	}
	cs, err := dev.local.Contributions(ctx, store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if c.Lease == first {
			t.Errorf("the handed-back lease has a contribution: %+v", c)
		}
	}
	if len(cs) != 1 {
		t.Errorf("%d contributions, want 1 (the task computed afresh)", len(cs))
	}
}

// withLeaseTimeout returns j planned again with its lease timeout d.
func withLeaseTimeout(t *testing.T, j *job.Job, d time.Duration) *job.Job {
	t.Helper()
	m := *j.Manifest
	m.Policy.LeaseTimeout.Duration = d
	nj, err := job.Plan(&m)
	if err != nil {
		t.Fatal(err)
	}
	return nj
}
