package agent_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/pool"
	"idlepool/worker"
)

// fakeSignals is a hand-written Signaller: the owner is away (input idle
// for an hour) until SetActive(true); CPUs is what Cores reports.
type fakeSignals struct {
	active atomic.Bool
	cores  atomic.Int64
}

func newFakeSignals(cores int) *fakeSignals {
	f := &fakeSignals{}
	f.cores.Store(int64(cores))
	return f
}

func (f *fakeSignals) Sample(ctx context.Context) idle.Signals {
	idleFor := time.Hour
	if f.active.Load() {
		idleFor = 0
	}
	return idle.Signals{
		At:        time.Now(),
		InputIdle: idle.Reading[time.Duration]{Value: idleFor, Known: true, Source: "fake"},
		CPUs:      int(f.cores.Load()),
	}
}

// decideFake is a minimal policy: compute on every CPU while the owner
// has been away a minute, wait otherwise.
func decideFake(sig idle.Signals, _ time.Time) idle.Decision {
	if !sig.InputIdle.Known || sig.InputIdle.Value < time.Minute {
		return idle.Decision{State: idle.StateWaiting, Reason: "waiting: the owner is active"}
	}
	return idle.Decision{State: idle.StateComputing, Cores: sig.CPUs, Reason: fmt.Sprintf("computing on %d cores", sig.CPUs)}
}

// suspendExec is a fakeExec that is also a Suspender, counting calls.
type suspendExec struct {
	*fakeExec
	suspends, resumes atomic.Int64
}

func (s *suspendExec) Suspend() error { s.suspends.Add(1); return nil }
func (s *suspendExec) Resume() error  { s.resumes.Add(1); return nil }

var _ agent.Suspender = (*worker.Pool)(nil)

// startGoverned starts an agent of dev that obeys sig through decideFake,
// sampling every period (0: the default), with its local API at localAPI
// ("" for none).
func startGoverned(t testing.TB, url string, dev *device, exec pool.Executor, slots int, sig agent.Signaller, period time.Duration, localAPI string) *runningAgent {
	t.Helper()
	a, err := agent.New(agent.Config{
		PoolURL: url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: slots,
		Executor: exec, Store: dev.local, HTTP: httpClient(t),
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Signals: sig, Decide: decideFake, SamplePeriod: period, LocalAPI: localAPI,
		Logger: quietLogger(t).With("side", "agent", "peer", dev.key.ID()),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAgent{Agent: a, dev: dev, stop: cancel, done: make(chan error, 1)}
	go func() { ra.done <- a.Serve(ctx) }()
	t.Cleanup(func() { ra.Stop(t) })
	return ra
}

// eventually polls cond every 10 ms for at most limit.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) || i > int(limit/(10*time.Millisecond))+100 {
			t.Fatalf("not %s within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGovernorSlots: the agent leases on as many slots as the decision
// allows, lets running tasks finish when the cores shrink, and, with an
// executor that cannot suspend, hands every lease back at once when the
// owner comes back. Its local API reports the same as Status.
func TestGovernorSlots(t *testing.T) {
	exec := &fakeExec{Block: make(chan struct{})}
	j := planJob(t, "squares-governed", 6, "redundancy = 1\nquorum = 1")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	sig := newFakeSignals(1)
	dev := newDevice(t, nil)
	sock := filepath.Join(dev.dirs.Data, agent.LocalAPIFile)
	ra := startGoverned(t, co.url, dev, exec, 3, sig, 20*time.Millisecond, sock)
	running := func(n int) func() bool { return func() bool { return len(ra.Running()) == n } }

	eventually(t, 10*time.Second, "running 1 task", running(1))
	time.Sleep(200 * time.Millisecond) // ten samples: still one slot
	if n := len(ra.Running()); n != 1 {
		t.Fatalf("%d tasks run on 1 allowed core", n)
	}
	sig.cores.Store(3)
	eventually(t, 10*time.Second, "running 3 tasks", running(3))
	sig.cores.Store(1)
	eventually(t, 10*time.Second, "down to 1 active slot", func() bool { return ra.Status().ActiveSlots == 1 })
	if n := len(ra.Running()); n != 3 {
		t.Errorf("shrinking the cores stopped running tasks: %d left of 3", n)
	}

	var st agent.AgentStatus
	eventually(t, 10*time.Second, "status served", func() bool {
		var err error
		st, err = agent.ReadStatus(ctx, sock)
		return err == nil
	})
	if st.Decision.State != idle.StateComputing || st.Decision.Cores != 1 || st.Slots != 3 || len(st.Running) != 3 || st.Pool != co.url {
		t.Errorf("local API status %+v", st)
	}

	sig.active.Store(true)
	eventually(t, 10*time.Second, "leases handed back", running(0))
	js, err := sub.c.Status(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if js.Leased != 0 {
		t.Errorf("%d leases held while waiting", js.Leased)
	}
	st = ra.Status()
	if st.Decision.State != idle.StateWaiting || st.Decision.Reason != "waiting: the owner is active" || !st.Suspended || st.ActiveSlots != 0 {
		t.Errorf("status while waiting: %+v", st)
	}

	close(exec.Block)
	sig.active.Store(false)
	sig.cores.Store(3)
	eventually(t, 20*time.Second, "job done", func() bool {
		js, err := sub.c.Status(ctx, j.ID)
		return err == nil && js.Accepted == 6
	})
	ra.Stop(t)
	if _, err := agent.ReadStatus(ctx, sock); !errors.Is(err, agent.ErrNoAgent) {
		t.Errorf("ReadStatus after the agent stopped: %v", err)
	}
}

// TestGovernorSuspendHandsBack: with an executor that can suspend, a
// "wait" suspends it and keeps the lease until the job's lease timeout
// (less a margin) has passed suspended; then the lease is handed back.
// A short pause keeps the lease.
func TestGovernorSuspendHandsBack(t *testing.T) {
	exec := &suspendExec{fakeExec: &fakeExec{Block: make(chan struct{})}}
	j := planJob(t, "squares-suspended", 1, "redundancy = 1\nquorum = 1") // lease_timeout 2s: hand back after 1.5 s
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	sig := newFakeSignals(1)
	ra := startGoverned(t, co.url, newDevice(t, nil), exec, 1, sig, 20*time.Millisecond, "")
	eventually(t, 10*time.Second, "running", func() bool { return len(ra.Running()) == 1 })
	if exec.resumes.Load() != 1 || exec.suspends.Load() != 0 {
		t.Errorf("%d resumes and %d suspends at start, want 1 and 0", exec.resumes.Load(), exec.suspends.Load())
	}

	// A short pause: suspended and resumed, the lease kept.
	sig.active.Store(true)
	eventually(t, time.Second, "suspended", func() bool { return exec.suspends.Load() == 1 })
	sig.active.Store(false)
	eventually(t, time.Second, "resumed", func() bool { return exec.resumes.Load() == 2 })
	if len(ra.Running()) != 1 {
		t.Fatal("a short pause lost the task")
	}

	// A long one: the lease is handed back after 1.5 s.
	start := time.Now()
	sig.active.Store(true)
	eventually(t, 10*time.Second, "handed back", func() bool { return len(ra.Running()) == 0 })
	took := time.Since(start)
	if took < 1400*time.Millisecond || took > 5*time.Second {
		t.Errorf("handed back after %s suspended, want about 1.5 s", took)
	}
	js, err := sub.c.Status(ctx, j.ID)
	if err != nil || js.Leased != 0 || js.Accepted != 0 {
		t.Errorf("job status %+v, %v; want the task unleased and not done", js, err)
	}
	if exec.suspends.Load() != 2 {
		t.Errorf("%d suspends, want 2", exec.suspends.Load())
	}

	// Back to idle: the same agent leases it again and finishes it.
	close(exec.Block)
	sig.active.Store(false)
	eventually(t, 20*time.Second, "job done", func() bool {
		js, err := sub.c.Status(ctx, j.ID)
		return err == nil && js.Accepted == 1
	})
}

// countingSignals is a fakeSignals that counts its samples.
type countingSignals struct {
	*fakeSignals
	n atomic.Int64
}

func (c *countingSignals) Sample(ctx context.Context) idle.Signals {
	c.n.Add(1)
	return c.fakeSignals.Sample(ctx)
}

func TestGovernorSamplesLessAtRest(t *testing.T) {
	// While the owner is active nothing computes, so the governor samples
	// every RestSamplePeriod; once computing, every SamplePeriod, so that
	// it steps aside quickly.
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	sig := &countingSignals{fakeSignals: newFakeSignals(2)}
	sig.active.Store(true)
	a, err := agent.New(agent.Config{
		PoolURL: co.url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 1,
		Executor: &fakeExec{}, Store: dev.local, HTTP: httpClient(t),
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Signals: sig, Decide: decideFake, SamplePeriod: 20 * time.Millisecond, RestSamplePeriod: 200 * time.Millisecond,
		Logger: quietLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	defer func() { cancel(); <-done }()

	time.Sleep(time.Second)
	resting := sig.n.Load()
	sig.active.Store(false)
	time.Sleep(300 * time.Millisecond) // the next rest sample sees the owner gone
	from := sig.n.Load()
	time.Sleep(time.Second)
	computing := sig.n.Load() - from
	// At rest at most one sample per 200 ms (plus the first); computing
	// about fifty a second. The bounds are loose: shared machines stall.
	if resting > 10 {
		t.Errorf("%d samples in a second at rest, want at most about 5", resting)
	}
	if computing <= resting {
		t.Errorf("%d samples in a second while computing, %d at rest: want many more while computing", computing, resting)
	}
}
