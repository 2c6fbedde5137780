//go:build !darwin || cgo

// (fyne.io/fyne/v2/test pulls in fyne's internal/widget, whose macOS
// file needs cgo: vetting for darwin with CGO_ENABLED=0 skips this file.)

package app

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"fyne.io/fyne/v2"
	"fyne.io/fyne/v2/test"
	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/store"
)

// fakeEngine is an Engine whose status the test sets; it counts Reloads.
type fakeEngine struct {
	mu      sync.Mutex
	status  agent.AgentStatus
	reloads int
}

func (e *fakeEngine) Status() agent.AgentStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

func (e *fakeEngine) Reload() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reloads++
}

func (e *fakeEngine) set(st agent.AgentStatus) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status = st
}

func (e *fakeEngine) reloaded() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reloads
}

// fakeAutostart is an Autostart held in memory; fail makes Enable and
// Disable fail.
type fakeAutostart struct {
	on   bool
	fail error
}

func (a *fakeAutostart) Enabled() (bool, error) { return a.on, nil }

func (a *fakeAutostart) Enable() error {
	if a.fail != nil {
		return a.fail
	}
	a.on = true
	return nil
}

func (a *fakeAutostart) Disable() error {
	if a.fail != nil {
		return a.fail
	}
	a.on = false
	return nil
}

// openStore opens a real local store in a temporary directory, with the
// schedule's time zone UTC so that clock texts do not depend on the
// machine's zone.
func openStore(t *testing.T) *store.Local {
	t.Helper()
	l, err := store.OpenLocal(filepath.Join(t.TempDir(), "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	s := idle.Defaults()
	s.TimeZone = "UTC"
	if err := l.SaveSettings(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return l
}

// lab is one joined pool named lab-a.
var lab = []agent.PoolState{{URL: "http://10.0.0.5:7420", Name: "lab-a", Slots: 4}}

func TestStatusOf(t *testing.T) {
	now := time.Date(2025, 6, 2, 14, 0, 0, 0, time.UTC) // a Monday
	utc := idle.Defaults()
	utc.TimeZone = "UTC"
	paused := utc
	paused.PausedUntil = now.Add(time.Hour)
	pausedLong := utc
	pausedLong.PausedUntil = now.Add(26 * time.Hour)
	expired := utc
	expired.PausedUntil = now.Add(-time.Minute)
	running := func(pools ...agent.PoolState) agent.AgentStatus {
		st := agent.AgentStatus{Decision: idle.Decision{State: idle.StateComputing, Cores: 4, Reason: "computing on 4 of 8 cores"}, Pools: pools}
		for _, p := range pools {
			for range p.Running {
				st.Running = append(st.Running, agent.RunningTask{Job: "j"})
			}
		}
		return st
	}
	tests := []struct {
		name     string
		status   agent.AgentStatus
		settings idle.Settings
		want     TrayStatus
	}{
		{"no pool", agent.AgentStatus{}, utc, TrayStatus{State: TrayIdle, Line: "Idle: no pool joined"}},
		{"starting", agent.AgentStatus{Pools: lab}, utc, TrayStatus{State: TrayIdle, Line: "Starting…"}},
		{"computing", running(agent.PoolState{URL: "http://a", Name: "lab-a", Running: 2}), utc,
			TrayStatus{State: TrayComputing, Line: "Computing: 2 tasks for pool lab-a"}},
		{"computing one task, two pools", running(agent.PoolState{URL: "http://a", Name: "lab-a", Running: 1}, agent.PoolState{URL: "http://b:7420"}), utc,
			TrayStatus{State: TrayComputing, Line: "Computing: 1 task for pool lab-a"}},
		{"computing for two pools", running(agent.PoolState{URL: "http://a", Name: "lab-a", Running: 1}, agent.PoolState{URL: "http://b:7420", Running: 3}), utc,
			TrayStatus{State: TrayComputing, Line: "Computing: 4 tasks for pools lab-a and b:7420"}},
		{"allowed, no task", running(lab...), utc, TrayStatus{State: TrayIdle, Line: "Idle: no tasks from pool lab-a right now"}},
		{"program runs", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StatePaused, Reason: "paused: game.exe is running"}}, utc,
			TrayStatus{State: TrayPaused, Line: "Paused: game.exe is running"}},
		{"on battery", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: on battery (43%)"}}, utc,
			TrayStatus{State: TrayIdle, Line: "Waiting: on battery (43%)"}},
		{"paused by you", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateComputing}}, paused,
			TrayStatus{State: TrayPaused, Line: "Paused by you until 15:00", PausedUntil: paused.PausedUntil}},
		{"paused by you until tomorrow", agent.AgentStatus{}, pausedLong,
			TrayStatus{State: TrayPaused, Line: "Paused by you until Tue 16:00", PausedUntil: pausedLong.PausedUntil}},
		{"pause over", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: outside your hours"}}, expired,
			TrayStatus{State: TrayIdle, Line: "Waiting: outside your hours"}},
		{"pool unreachable", agent.AgentStatus{Pools: []agent.PoolState{{URL: "http://10.0.0.5:7420", Error: "cannot reach the pool: connection refused"}}}, utc,
			TrayStatus{State: TrayIdle, Line: "Idle: 10.0.0.5:7420: cannot reach the pool: connection refused"}},
		{"long reason cut", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: " + strings.Repeat("x", 200)}}, utc,
			TrayStatus{State: TrayIdle, Line: "Waiting: " + strings.Repeat("x", 80) + "…"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := StatusOf(tc.status, tc.settings, now)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("StatusOf (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNextMorning(t *testing.T) {
	tests := []struct {
		now, want time.Time
		label     string
	}{
		{time.Date(2025, 6, 2, 21, 30, 0, 0, time.UTC), time.Date(2025, 6, 3, 8, 0, 0, 0, time.UTC), "Pause until tomorrow, 08:00"},
		{time.Date(2025, 6, 2, 8, 0, 0, 0, time.UTC), time.Date(2025, 6, 3, 8, 0, 0, 0, time.UTC), "Pause until tomorrow, 08:00"},
		{time.Date(2025, 6, 2, 2, 0, 0, 0, time.UTC), time.Date(2025, 6, 2, 8, 0, 0, 0, time.UTC), "Pause until 08:00"},
		{time.Date(2025, 12, 31, 23, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC), "Pause until tomorrow, 08:00"},
	}
	for _, tc := range tests {
		t.Run(tc.now.Format(time.DateTime), func(t *testing.T) {
			got := nextMorning(tc.now, time.UTC)
			if !got.Equal(tc.want) {
				t.Errorf("nextMorning(%v) = %v, want %v", tc.now, got, tc.want)
			}
			if l := morningLabel(got, tc.now); l != tc.label {
				t.Errorf("label %q, want %q", l, tc.label)
			}
		})
	}
}

// trayFixture is a Tray over a real store, a fake engine and a clock the
// test sets.
type trayFixture struct {
	tray   *Tray
	store  *store.Local
	engine *fakeEngine
	auto   *fakeAutostart
	now    time.Time
	icons  []fyne.Resource
	quits  int
}

func newTrayFixture(t *testing.T, auto bool) *trayFixture {
	t.Helper()
	test.NewTempApp(t)
	f := &trayFixture{store: openStore(t), engine: &fakeEngine{}, now: time.Date(2025, 6, 2, 14, 0, 0, 0, time.UTC)}
	f.engine.set(agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: on battery (43%)"}})
	deps := &Deps{Store: f.store, Engine: f.engine, Now: func() time.Time { return f.now }}
	if auto {
		f.auto = &fakeAutostart{}
		deps.Autostart = f.auto
	}
	u := New(fyne.CurrentApp(), deps)
	f.tray = u.NewTray(func() { f.quits++ }, func(r fyne.Resource) { f.icons = append(f.icons, r) }, nil)
	return f
}

// labels returns the labels of the menu's items ("-" for a separator,
// "[x] " before a checked item, "(off) " before a disabled one).
func labels(m *fyne.Menu) []string {
	var out []string
	for _, it := range m.Items {
		switch {
		case it.IsSeparator:
			out = append(out, "-")
		case it.Checked:
			out = append(out, "[x] "+it.Label)
		case it.Disabled:
			out = append(out, "(off) "+it.Label)
		default:
			out = append(out, it.Label)
		}
	}
	return out
}

// tap runs the action of the menu item labelled label.
func tap(t *testing.T, m *fyne.Menu, label string) {
	t.Helper()
	for _, it := range m.Items {
		if it.Label == label {
			it.Action()
			return
		}
	}
	t.Fatalf("no menu item %q in %q", label, labels(m))
}

func (f *trayFixture) pausedUntil(t *testing.T) time.Time {
	t.Helper()
	s, err := f.store.Settings(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.PausedUntil
}

func TestTrayPauseAndResume(t *testing.T) {
	f := newTrayFixture(t, false)
	m := f.tray.Menu()
	want := []string{"(off) Waiting: on battery (43%)", "-", "Pause for 1 hour", "Pause until tomorrow, 08:00", "-",
		"Settings…", "Browse jobs…", "Contribution history…", "-", "Quit"}
	if diff := cmp.Diff(want, labels(m)); diff != "" {
		t.Fatalf("menu (-want +got):\n%s", diff)
	}

	tap(t, m, "Pause for 1 hour")
	if got, want := f.pausedUntil(t), f.now.Add(time.Hour); !got.Equal(want) {
		t.Errorf("PausedUntil = %v, want %v", got, want)
	}
	if n := f.engine.reloaded(); n != 1 {
		t.Errorf("engine reloaded %d times, want 1", n)
	}
	want = []string{"(off) Paused by you until 15:00", "-", "Pause until tomorrow, 08:00", "Resume", "-",
		"Settings…", "Browse jobs…", "Contribution history…", "-", "Quit"}
	if diff := cmp.Diff(want, labels(m)); diff != "" {
		t.Errorf("menu after pausing (-want +got):\n%s", diff)
	}

	tap(t, m, "Pause until tomorrow, 08:00")
	if got, want := f.pausedUntil(t), time.Date(2025, 6, 3, 8, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("PausedUntil = %v, want %v", got, want)
	}
	want = []string{"(off) Paused by you until Tue 08:00", "-", "Resume", "-",
		"Settings…", "Browse jobs…", "Contribution history…", "-", "Quit"}
	if diff := cmp.Diff(want, labels(m)); diff != "" {
		t.Errorf("menu after pausing until tomorrow (-want +got):\n%s", diff)
	}

	tap(t, m, "Resume")
	if got := f.pausedUntil(t); !got.IsZero() {
		t.Errorf("PausedUntil = %v after Resume, want zero", got)
	}
	if n := f.engine.reloaded(); n != 3 {
		t.Errorf("engine reloaded %d times, want 3", n)
	}
	if got := labels(m)[0]; got != "(off) Waiting: on battery (43%)" {
		t.Errorf("status after Resume = %q", got)
	}
}

func TestTrayIconFollowsState(t *testing.T) {
	f := newTrayFixture(t, false)
	f.engine.set(agent.AgentStatus{
		Decision: idle.Decision{State: idle.StateComputing, Cores: 2},
		Pools:    []agent.PoolState{{URL: "http://a", Name: "lab-a", Running: 2}},
		Running:  []agent.RunningTask{{Job: "j", Task: 1}, {Job: "j", Task: 2}},
	})
	f.tray.Refresh()
	f.tray.Refresh() // unchanged: no new icon
	tap(t, f.tray.Menu(), "Pause for 1 hour")
	var got []string
	for _, r := range f.icons {
		got = append(got, r.Name())
	}
	want := []string{"idlepool-idle.png", "idlepool-computing.png", "idlepool-paused.png"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("icons set (-want +got):\n%s", diff)
	}
	if l := labels(f.tray.Menu())[0]; l != "(off) Paused by you until 15:00" {
		t.Errorf("status = %q", l)
	}
}

func TestTrayRefreshKeepsUnchangedItems(t *testing.T) {
	f := newTrayFixture(t, false)
	first := f.tray.Menu().Items[0]
	f.tray.Refresh()
	if f.tray.Menu().Items[0] != first {
		t.Error("an unchanged refresh replaced the menu's items")
	}

	// Only the words change, the state stays: shown after TrayTextRefresh.
	f.engine.set(agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: on battery (42%)"}})
	f.now = f.now.Add(TrayRefresh)
	f.tray.Refresh()
	if l := labels(f.tray.Menu())[0]; l != "(off) Waiting: on battery (43%)" {
		t.Errorf("status %q changed within TrayTextRefresh", l)
	}
	f.now = f.now.Add(TrayTextRefresh)
	f.tray.Refresh()
	if l := labels(f.tray.Menu())[0]; l != "(off) Waiting: on battery (42%)" {
		t.Errorf("status = %q after TrayTextRefresh", l)
	}

	// A new state shows at once.
	f.engine.set(agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StatePaused, Reason: "paused: game.exe is running"}})
	f.now = f.now.Add(TrayRefresh)
	f.tray.Refresh()
	if l := labels(f.tray.Menu())[0]; l != "(off) Paused: game.exe is running" {
		t.Errorf("status = %q", l)
	}
}

func TestTrayAutostartAndQuit(t *testing.T) {
	f := newTrayFixture(t, true)
	m := f.tray.Menu()
	want := []string{"(off) Waiting: on battery (43%)", "-", "Pause for 1 hour", "Pause until tomorrow, 08:00", "-",
		"Settings…", "Browse jobs…", "Contribution history…", "-", "Start at login", "-", "Quit"}
	if diff := cmp.Diff(want, labels(m)); diff != "" {
		t.Fatalf("menu (-want +got):\n%s", diff)
	}
	tap(t, m, "Start at login")
	if !f.auto.on {
		t.Error("Start at login did not enable the entry")
	}
	if got := labels(m)[9]; got != "[x] Start at login" {
		t.Errorf("item after enabling = %q", got)
	}
	tap(t, m, "Start at login")
	if f.auto.on {
		t.Error("Start at login did not disable the entry")
	}

	f.auto.fail = errors.New("permission denied")
	tap(t, m, "Start at login")
	if got := labels(m)[1]; got != "(off) Could not change start at login: permission denied" {
		t.Errorf("problem line = %q", got)
	}

	tap(t, m, "Quit")
	if f.quits != 1 {
		t.Errorf("quit called %d times, want 1", f.quits)
	}
	if it := m.Items[len(m.Items)-1]; !it.IsQuit {
		t.Error("the Quit item is not marked IsQuit")
	}
}

func TestTrayServeStopsWithContext(t *testing.T) {
	f := newTrayFixture(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.tray.Serve(ctx) }()
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
}
