package agent_test

import (
	"context"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/energy"
	"idlepool/store"
)

// Each task the agent computes gets its energy recorded in the local
// store, marked as it was obtained; the receipts' cost stays the
// planner's (energy is the donor's own measurement).
func TestAgentRecordsTaskEnergy(t *testing.T) {
	const tasks = 6
	exec := &fakeExec{Delay: 20 * time.Millisecond}
	j := planJob(t, "energy", tasks, "")
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	// No counter and no CPU times here: each task is its span on one
	// core at 80 W / 8 CPUs, an estimate.
	meter := energy.NewMeter(energy.Config{RatedW: 80, CPUs: 8})
	a, err := agent.New(agent.Config{
		PoolURL: co.url, Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Slots: 2,
		Executor: exec, Store: dev.local, HTTP: httpClient(t), Energy: meter,
		MaxBackoff: 200 * time.Millisecond, IdlePoll: 50 * time.Millisecond, ReceiptPoll: 50 * time.Millisecond,
		Logger: quietLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	// A second device, so that each task reaches its quorum.
	startAgent(t, co.url, newDevice(t, nil), exec, 2, nil)

	sub := newSubmitter(t, co.url, nil)
	rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
	defer rcancel()
	if _, err := sub.run(t, rctx, j); err != nil {
		t.Fatalf("run: %v", err)
	}
	settle(t, dev)

	got, err := dev.local.Energy(context.Background(), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	contribs, err := dev.local.Contributions(context.Background(), store.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || len(got) < len(contribs) {
		t.Fatalf("%d tasks with energy for %d contributions", len(got), len(contribs))
	}
	byLease := map[string]store.TaskEnergy{}
	for _, e := range got {
		byLease[e.Lease] = e
		span := e.End.Sub(e.Start)
		if e.CPU.How != energy.Estimated || span < 20*time.Millisecond || !approx(e.CPU.Joules, span.Seconds()*10) {
			t.Errorf("task %d: %g J %s over %s, want %g J estimated", e.Task, e.CPU.Joules, e.CPU.How, span, span.Seconds()*10)
		}
		if e.Pool != co.url || e.Job != j.ID {
			t.Errorf("task %d recorded for pool %s job %s", e.Task, e.Pool, e.Job)
		}
	}
	for _, c := range contribs {
		if _, ok := byLease[c.Lease]; !ok {
			t.Errorf("contribution %s (task %d) has no energy recorded", c.Lease, c.Task)
		}
		if want := j.Cost(j.Task(c.Task)); c.Cost != want {
			t.Errorf("task %d: cost %g, want the planner's %g", c.Task, c.Cost, want)
		}
	}
}

// approx allows for the spans kept to the millisecond: 2 ms at 10 W.
func approx(a, b float64) bool { return a >= b-0.02 && a <= b+0.02 }
