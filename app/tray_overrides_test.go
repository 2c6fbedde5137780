package app

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
)

func (f *trayFixture) settings(t *testing.T) idle.Settings {
	t.Helper()
	s, err := f.store.Settings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *trayFixture) shows(label string) bool { return slices.Contains(labels(f.tray.Menu()), label) }

func running(n int) []agent.RunningTask {
	out := make([]agent.RunningTask, n)
	for i := range out {
		out[i] = agent.RunningTask{Pool: lab[0].URL, Job: "j", Task: int64(i), Lease: "l" + string(rune('a'+i))}
	}
	return out
}

// TestTrayComputeNow: "Compute now for 1 hour" sets compute now in the
// settings (ending a pause), tells the engine, names its end in the
// status line and offers to stop it; at the end, by the tray's clock,
// the line and the items are back as before without anyone clearing it.
func TestTrayComputeNow(t *testing.T) {
	f := newTrayFixture(t, false)
	if _, err := f.store.UpdateSettings(context.Background(), func(s *idle.Settings) error {
		s.TimeZone = "UTC"
		s.SetPause(f.now.Add(time.Hour))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.tray.cached.fresh = false
	f.tray.Refresh()
	f.tap(t, "Compute now for 1 hour")
	s := f.settings(t)
	if !s.ComputeUntil.Equal(f.now.Add(time.Hour)) || !s.PausedUntil.IsZero() {
		t.Fatalf("after Compute now for 1 hour: ComputeUntil %v, PausedUntil %v", s.ComputeUntil, s.PausedUntil)
	}
	if n := f.engine.reloaded(); n != 1 {
		t.Errorf("engine reloaded %d times, want 1", n)
	}
	if got := labels(f.tray.Menu())[0]; got != "(off) Computing now, as you asked, until 15:00: starting…" {
		t.Errorf("status while the engine has not decided again: %q", got)
	}
	if !f.shows("Stop computing now (it ends at 15:00)") || f.shows("Compute now for 1 hour") || f.shows(labelComputeHours) {
		t.Errorf("menu while computing now: %q", labels(f.tray.Menu()))
	}

	f.engine.set(agentStatus(idle.Decision{State: idle.StateComputing, Cores: 3, ComputeNow: true, Reason: "computing now, as you asked, until 15:00, on 3 of 4 cores"}, 2))
	f.now = f.now.Add(TrayTextRefresh)
	f.tray.Refresh()
	if got := labels(f.tray.Menu())[0]; got != "(off) Computing now until 15:00: 2 tasks for pool lab-a" {
		t.Errorf("status while computing now: %q", got)
	}

	// An hour later by the tray's clock compute now is over, even before
	// the engine clears it from the settings.
	f.engine.set(agentStatus(idle.Decision{State: idle.StateWaiting, Reason: "waiting: outside your hours (next window 22:00)"}, 0))
	f.now = f.now.Add(time.Hour)
	f.tray.Refresh()
	if got := labels(f.tray.Menu())[0]; got != "(off) Waiting: outside your hours (next window 22:00)" {
		t.Errorf("status after compute now ran out: %q", got)
	}
	if !f.shows("Compute now for 1 hour") || f.shows("Stop computing now (it ends at 15:00)") {
		t.Errorf("menu after compute now ran out: %q", labels(f.tray.Menu()))
	}

	f.tap(t, "Compute now for 3 hours")
	if s := f.settings(t); !s.ComputeUntil.Equal(f.now.Add(3 * time.Hour)) {
		t.Errorf("Compute now for 3 hours: ComputeUntil %v, want %v", s.ComputeUntil, f.now.Add(3*time.Hour))
	}
	f.tap(t, "Stop computing now (it ends at 18:00)")
	if s := f.settings(t); !s.ComputeUntil.IsZero() {
		t.Errorf("after stopping: ComputeUntil %v", s.ComputeUntil)
	}
}

// TestTrayComputeNowSaysAtOnce: after "Compute now" the status line says
// at once that it starts computing, never the reason the engine decided
// before the click (which it shows until it decides again, within a
// second), and the engine's new decision shows as soon as it is made,
// not TrayTextRefresh later: the line contradicted itself ("Compute now
// until 15:00: Waiting: outside your hours") for up to 15 s.
func TestTrayComputeNowSaysAtOnce(t *testing.T) {
	f := newTrayFixture(t, false)
	if _, err := f.store.UpdateSettings(context.Background(), func(s *idle.Settings) error {
		s.TimeZone = "UTC"
		s.Schedule = idle.Schedule{{Days: idle.EveryDay, Start: 22 * 60, End: 7 * 60}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.engine.set(agentStatus(idle.Decision{State: idle.StateWaiting, Reason: "waiting: outside your hours (next window 22:00)"}, 0))
	f.tray.cached.fresh = false
	f.tray.Refresh()
	f.now = f.now.Add(time.Minute)
	f.tap(t, "Compute now for 1 hour")
	check := func(when, want string) {
		t.Helper()
		got := labels(f.tray.Menu())
		if got[0] != want {
			t.Errorf("%s: status %q, want %q", when, got[0], want)
		}
		for _, l := range got {
			if strings.Contains(l, "outside your hours") {
				t.Errorf("%s: the menu still says why it waited before: %q", when, l)
			}
		}
	}
	check("at the click", "(off) Computing now, as you asked, until 15:01: starting…")

	// A second later the engine decided: computing, no task yet.
	f.engine.set(agentStatus(idle.Decision{State: idle.StateComputing, Cores: 3, ComputeNow: true,
		Reason: "computing now, as you asked, until 15:01, on 3 of 4 cores"}, 0))
	f.now = f.now.Add(time.Second)
	f.tray.Refresh()
	check("once the engine computes", "(off) Computing now until 15:01, but no tasks from pool lab-a right now")

	// Unplugged: compute now waits for mains power, and says so at once.
	f.engine.set(agentStatus(idle.Decision{State: idle.StateWaiting, ComputeNow: true,
		Reason: "waiting: on battery (43%); compute now until 15:01 waits for this"}, 0))
	f.now = f.now.Add(time.Second)
	f.tray.Refresh()
	check("on battery", "(off) Waiting: on battery (43%); compute now until 15:01 waits for this")
}

func agentStatus(d idle.Decision, tasks int) agent.AgentStatus {
	pools := []agent.PoolState{lab[0]}
	pools[0].Running = tasks
	return agent.AgentStatus{Pools: pools, Decision: d, Running: running(tasks)}
}

// TestTrayComputeUntilHours: outside the owner's hours the menu offers to
// compute until they start, and names when.
func TestTrayComputeUntilHours(t *testing.T) {
	f := newTrayFixture(t, false)
	if _, err := f.store.UpdateSettings(context.Background(), func(s *idle.Settings) error {
		s.TimeZone = "UTC"
		s.Schedule = idle.Schedule{{Days: idle.EveryDay, Start: 22 * 60, End: 7 * 60}}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.tray.cached.fresh = false
	f.tray.Refresh()
	f.tap(t, "Compute now until your hours start (22:00)")
	if s := f.settings(t); !s.ComputeUntil.Equal(time.Date(2025, 6, 2, 22, 0, 0, 0, time.UTC)) {
		t.Errorf("ComputeUntil %v, want 22:00", s.ComputeUntil)
	}
	// Inside the hours there is no start to wait for.
	f.now = time.Date(2025, 6, 2, 23, 0, 0, 0, time.UTC)
	f.tray.Refresh()
	for _, l := range labels(f.tray.Menu()) {
		if len(l) > 30 && l[:30] == "Compute now until your hours s" {
			t.Errorf("inside the hours the menu offers %q", l)
		}
	}
}

// TestTrayFinishThenPause: the item stops new tasks and says so; with no
// task left the tray says it is paused, and Resume ends it.
func TestTrayFinishThenPause(t *testing.T) {
	f := newTrayFixture(t, false)
	f.engine.set(agentStatus(idle.Decision{State: idle.StateComputing, Cores: 3, Reason: "computing on 3 of 4 cores"}, 2))
	f.tap(t, "Finish current tasks, then pause")
	if s := f.settings(t); !s.FinishThenPause {
		t.Fatal("FinishThenPause not set")
	}
	if got := labels(f.tray.Menu())[0]; got != "(off) Finishing 2 tasks, then pausing" {
		t.Errorf("status while finishing: %q", got)
	}
	if f.tray.Menu().State != TrayComputing || f.shows("Finish current tasks, then pause") || !f.shows("Resume") {
		t.Errorf("menu while finishing (%s): %q", f.tray.Menu().State, labels(f.tray.Menu()))
	}
	f.engine.set(agentStatus(idle.Decision{State: idle.StatePaused, Reason: agent.FinishedReason}, 0))
	f.tray.Refresh()
	if got := labels(f.tray.Menu())[0]; got != "(off) Paused by you after finishing the tasks in hand" {
		t.Errorf("status once finished: %q", got)
	}
	if f.tray.Menu().State != TrayPaused {
		t.Errorf("icon once finished: %s", f.tray.Menu().State)
	}
	f.tap(t, "Resume")
	if s := f.settings(t); s.FinishThenPause {
		t.Error("Resume left FinishThenPause set")
	}
}

// TestTrayForgetsPoolLeftAtOnce: when the engine no longer computes for a
// pool (the owner left it), the status line stops naming it at the next
// refresh, not only at the line's next timed change.
func TestTrayForgetsPoolLeftAtOnce(t *testing.T) {
	f := newTrayFixture(t, false)
	f.engine.set(agentStatus(idle.Decision{State: idle.StateComputing, Cores: 3, Reason: "computing on 3 of 4 cores"}, 0))
	f.now = f.now.Add(TrayTextRefresh)
	f.tray.Refresh()
	if got := labels(f.tray.Menu())[0]; got != "(off) Idle: no tasks from pool lab-a right now" {
		t.Fatalf("status with the pool: %q", got)
	}
	f.engine.set(agent.AgentStatus{Decision: idle.Decision{State: idle.StateComputing, Cores: 3, Reason: "computing on 3 of 4 cores"}})
	f.now = f.now.Add(TrayRefresh)
	f.tray.Refresh()
	if got := labels(f.tray.Menu())[0]; got != "(off) Idle: no pool joined" {
		t.Errorf("status after leaving the pool: %q", got)
	}
}
