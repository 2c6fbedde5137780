package agent_test

import (
	"context"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/pool"
	"idlepool/store"
	"idlepool/worker"
)

// anyMachine makes the owner's settings compute on any machine the test
// runs on, whatever its input, load, battery or temperature readings.
func anyMachine(s *idle.Settings) {
	s.IdleFor, s.MaxOtherCPUShare, s.PauseOnBattery, s.MaxTemperatureC = 0, 1, false, 0
}

// startPolicyDonor runs a donor of dev that obeys the owner's settings
// (unless always) and follows dev's joined pools, until the test ends.
func startPolicyDonor(t *testing.T, dev *device, exec pool.Executor, always bool) *agent.Donor {
	t.Helper()
	d, err := agent.NewDonor(agent.DonorConfig{
		Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Name: "donor", Workers: 1,
		Executor: exec, Store: dev.local, HTTP: httpClient(t), Always: always,
		PoolReload: 50 * time.Millisecond, RetryAfter: 100 * time.Millisecond, SettingsReload: 50 * time.Millisecond,
		Logger: quietLogger(t).With("side", "donor"),
		Adjust: func(c *agent.Config) {
			c.MaxBackoff, c.IdlePoll, c.ReceiptPoll = 200*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
			c.SamplePeriod, c.RestSamplePeriod = 50*time.Millisecond, 50*time.Millisecond
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(patience(t)):
			t.Error("donor did not stop")
		}
	})
	return d
}

func updateSettings(t *testing.T, dev *device, d *agent.Donor, change func(*idle.Settings)) {
	t.Helper()
	if _, err := dev.local.UpdateSettings(context.Background(), func(s *idle.Settings) error { change(s); return nil }); err != nil {
		t.Fatal(err)
	}
	d.Reload()
}

// TestDonorFinishThenPause: asked to finish the tasks in hand and then
// pause, the donor takes no new task although the pool has one, lets the
// running task finish and report, and then says it is paused; Resume
// takes the next task.
func TestDonorFinishThenPause(t *testing.T) {
	ctx := context.Background()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	if _, err := dev.local.UpdateSettings(ctx, func(s *idle.Settings) error { anyMachine(s); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := dev.local.JoinPool(ctx, co.url, ""); err != nil {
		t.Fatal(err)
	}
	exec := &fakeExec{Block: make(chan struct{})}
	d := startPolicyDonor(t, dev, exec, false)
	sub := newSubmitter(t, co.url, nil)
	if err := sub.c.Submit(ctx, planJob(t, "squares-finish", 2, "redundancy = 1\nquorum = 1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first task runs", func() bool { return len(d.Status().Running) == 1 })
	updateSettings(t, dev, d, func(s *idle.Settings) { s.SetFinishThenPause() })
	waitFor(t, "the decision is to finish", func() bool {
		st := d.Status()
		return st.Decision.Finishing && st.ActiveSlots == 0
	})
	close(exec.Block)
	waitFor(t, "the finished task's result is recorded", func() bool {
		got, _ := dev.local.Contributions(ctx, store.Filter{})
		return len(got) == 1
	})
	waitFor(t, "the donor says it is paused", func() bool {
		st := d.Status()
		return st.Decision.State == idle.StatePaused && st.Decision.Reason == agent.FinishedReason && len(st.Running) == 0
	})
	// Several decisions later, no new task was taken.
	for range 5 {
		d.Reload()
		d.Status()
	}
	time.Sleep(200 * time.Millisecond) // a few sample periods, for a wrong lease to show
	if n := exec.Runs(); n != 1 {
		t.Fatalf("%d tasks run while finishing, want 1", n)
	}
	updateSettings(t, dev, d, func(s *idle.Settings) { s.SetPause(time.Time{}) })
	waitFor(t, "resuming takes the second task", func() bool { return exec.Runs() == 2 })
}

// TestDonorClearsComputeNowThatRanOut: compute now that has run out is
// cleared from the owner's settings, so that the tray and status stop
// naming it.
func TestDonorClearsComputeNowThatRanOut(t *testing.T) {
	ctx := context.Background()
	dev := newDevice(t, nil)
	d := startPolicyDonor(t, dev, &fakeExec{}, false)
	until := time.Now().Add(300 * time.Millisecond)
	updateSettings(t, dev, d, func(s *idle.Settings) { anyMachine(s); s.SetComputeUntil(until) })
	waitFor(t, "the decision computes now", func() bool {
		st := d.Status()
		return st.Decision.State == idle.StateComputing || !st.DecidedAt.Before(until)
	})
	waitFor(t, "compute now is cleared once it ran out", func() bool {
		s, err := dev.local.Settings(ctx)
		return err == nil && s.ComputeUntil.IsZero()
	})
}

// stubbornExec is an executor whose tasks take no notice of
// cancellation until release is closed: a worker slow to stop.
type stubbornExec struct {
	fakeExec
	release chan struct{}
}

func (s *stubbornExec) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	<-s.release
	return s.fakeExec.Run(context.Background(), req)
}

// TestDonorStatusDropsPoolLeftAtOnce: a pool left is gone from the
// donor's status while its agent still hands its task back, so that the
// tray no longer names it.
func TestDonorStatusDropsPoolLeftAtOnce(t *testing.T) {
	ctx := context.Background()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	exec := &stubbornExec{release: make(chan struct{})}
	d2 := startPolicyDonor(t, dev, exec, true)
	t.Cleanup(func() { close(exec.release) }) // before the donor stops
	if err := dev.local.JoinPool(ctx, co.url, ""); err != nil {
		t.Fatal(err)
	}
	d2.Reload()
	sub := newSubmitter(t, co.url, nil)
	if err := sub.c.Submit(ctx, planJob(t, "squares-leave", 1, "redundancy = 1\nquorum = 1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task runs", func() bool { return len(d2.Status().Running) == 1 })
	if err := dev.local.LeavePool(ctx, co.url); err != nil {
		t.Fatal(err)
	}
	d2.Reload()
	waitFor(t, "the pool left is gone from the status", func() bool {
		st := d2.Status()
		return len(st.Pools) == 0 && len(st.Running) == 0
	})
}

// TestDonorComputeNowOutsideTheHours: outside the owner's hours the donor
// waits and the pool leases it nothing; compute now makes it compute, and
// its offer says any hour, so that the pool leases it a task.
func TestDonorComputeNowOutsideTheHours(t *testing.T) {
	ctx := context.Background()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	away := idle.Clock(((time.Now().Hour() + 12) % 24) * 60) // an hour half a day from now
	if _, err := dev.local.UpdateSettings(ctx, func(s *idle.Settings) error {
		anyMachine(s)
		s.Schedule = idle.Schedule{{Days: idle.EveryDay, Start: away, End: away + 60}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := dev.local.JoinPool(ctx, co.url, ""); err != nil {
		t.Fatal(err)
	}
	exec := &fakeExec{}
	d := startPolicyDonor(t, dev, exec, false)
	sub := newSubmitter(t, co.url, nil)
	if err := sub.c.Submit(ctx, planJob(t, "squares-now", 1, "redundancy = 1\nquorum = 1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the donor waits outside the hours", func() bool {
		st := d.Status()
		return st.Decision.State == idle.StateWaiting && len(st.Pools) == 1 && st.Pools[0].Name == "test"
	})
	updateSettings(t, dev, d, func(s *idle.Settings) { s.SetComputeUntil(time.Now().Add(time.Hour)) })
	waitFor(t, "compute now computes the pool's task", func() bool {
		got, _ := dev.local.Contributions(ctx, store.Filter{})
		return exec.Runs() == 1 && len(got) == 1
	})
}
