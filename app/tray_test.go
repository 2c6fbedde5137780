//go:build !darwin || cgo

// (fyne.io/fyne/v2/test pulls in fyne's internal/widget, whose macOS
// file needs cgo: vetting for darwin with CGO_ENABLED=0 skips this file.)

package app

import (
	"context"
	"errors"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/energy"
	"idlepool/idle"
	"idlepool/store"
	"idlepool/version"
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
	pausedFar := utc
	pausedFar.PausedUntil = time.Date(2026, 1, 5, 9, 30, 0, 0, time.UTC)
	pausedLater := utc
	pausedLater.PausedUntil = now.Add(20 * 24 * time.Hour)
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
		{"computing, GPU held under the ceiling", func() agent.AgentStatus {
			st := running(agent.PoolState{URL: "http://a", Name: "lab-a", Running: 1})
			st.Energy = &agent.EnergyStatus{PowerW: 100, How: energy.Sampled, GPUHeld: &agent.GPUHold{CeilingW: 150, Share: 0.5, FullW: 250}}
			return st
		}(), utc, TrayStatus{State: TrayComputing, Line: "Computing: 1 task for pool lab-a; GPU held at 150 W of ~250 W (tasks run 50% of the time)"}},
		{"computing, GPU not held", func() agent.AgentStatus {
			st := running(agent.PoolState{URL: "http://a", Name: "lab-a", Running: 1})
			st.Energy = &agent.EnergyStatus{PowerW: 100, How: energy.Sampled}
			return st
		}(), utc, TrayStatus{State: TrayComputing, Line: "Computing: 1 task for pool lab-a"}},
		{"allowed, no task", running(lab...), utc, TrayStatus{State: TrayIdle, Line: "Idle: no tasks from pool lab-a right now"}},
		{"program runs", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StatePaused, Reason: "paused: game.exe is running"}}, utc,
			TrayStatus{State: TrayPaused, Line: "Paused: game.exe is running"}},
		{"on battery", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: on battery (43%)"}}, utc,
			TrayStatus{State: TrayIdle, Line: "Waiting: on battery (43%)"}},
		{"disk full", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateComputing},
			Store: agent.StoreStatus{Problem: "disk full", Message: "paused: disk full, 0 B free on /d"}}, utc,
			TrayStatus{State: TrayPaused, Line: "Paused: disk full, 0 B free on /d"}},
		{"paused by you", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateComputing}}, paused,
			TrayStatus{State: TrayPaused, Line: "Paused by you until 15:00", PausedUntil: paused.PausedUntil}},
		{"paused by you until tomorrow", agent.AgentStatus{}, pausedLong,
			TrayStatus{State: TrayPaused, Line: "Paused by you until Tue 16:00", PausedUntil: pausedLong.PausedUntil}},
		{"paused by you until a later date", agent.AgentStatus{}, pausedLater,
			TrayStatus{State: TrayPaused, Line: "Paused by you until 22 Jun 14:00", PausedUntil: pausedLater.PausedUntil}},
		{"paused by you until next year", agent.AgentStatus{}, pausedFar,
			TrayStatus{State: TrayPaused, Line: "Paused by you until 5 Jan 2026 09:30", PausedUntil: pausedFar.PausedUntil}},
		{"pause over", agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: outside your hours"}}, expired,
			TrayStatus{State: TrayIdle, Line: "Waiting: outside your hours"}},
		{"pool unreachable", agent.AgentStatus{Pools: []agent.PoolState{{URL: "http://10.0.0.5:7420", Error: "cannot reach the pool: connection refused"}}}, utc,
			TrayStatus{State: TrayIdle, Line: "Idle: 10.0.0.5:7420: cannot reach the pool: connection refused"}},
		{"pool down, no task", running(agent.PoolState{URL: "http://a", Name: "lanparty", UnreachableSince: now.Add(-3 * time.Minute)}), utc,
			TrayStatus{State: TrayIdle, Line: "Idle: lanparty: cannot reach the pool since 13:57, retrying"}},
		{"lone agent's pool down", agent.AgentStatus{Pool: "http://a:7420", PoolName: "lanparty", UnreachableSince: now.Add(-3 * time.Minute),
			Decision: idle.Decision{State: idle.StateComputing, Reason: "computing on 4 of 8 cores"}}, utc,
			TrayStatus{State: TrayIdle, Line: "Idle: lanparty: cannot reach the pool since 13:57, retrying"}},
		{"pool down, game runs", agent.AgentStatus{Pools: []agent.PoolState{{URL: "http://a", Name: "lanparty", UnreachableSince: now}},
			Decision: idle.Decision{State: idle.StatePaused, Reason: "paused: game.exe is running"}}, utc,
			TrayStatus{State: TrayPaused, Line: "Paused: game.exe is running"}},
		{"one of two pools down", running(agent.PoolState{URL: "http://a", Name: "lanparty", UnreachableSince: now}, agent.PoolState{URL: "http://b", Name: "lab-a"}), utc,
			TrayStatus{State: TrayIdle, Line: "Idle: no tasks from pool lab-a right now"}},
		{"clock refused", running(agent.PoolState{URL: "http://a", Name: "lab-a", ClockOffsetMS: 7 * 60 * 1000, ClockRefused: true}), utc,
			TrayStatus{State: TrayIdle, Line: "Waiting: this device's clock is 7 min off the pool's (behind): set the clock right"}},
		{"clock off but accepted", running(agent.PoolState{URL: "http://a", Name: "lab-a", ClockOffsetMS: 7 * 60 * 1000, Running: 1}), utc,
			TrayStatus{State: TrayComputing, Line: "Computing: 1 task for pool lab-a"}},
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
// test sets; it records what the tray showed and the actions it handed
// on.
type trayFixture struct {
	tray   *Tray
	store  *store.Local
	engine *fakeEngine
	auto   *fakeAutostart
	now    time.Time
	menus  int         // SetMenu calls
	icons  []TrayState // SetIcon calls
	done   []TrayAction
}

func (f *trayFixture) SetMenu(TrayMenu)        { f.menus++ }
func (f *trayFixture) SetIcon(state TrayState) { f.icons = append(f.icons, state) }

func newTrayFixture(t *testing.T, auto bool) *trayFixture {
	t.Helper()
	f := &trayFixture{store: openStore(t), engine: &fakeEngine{}, now: time.Date(2025, 6, 2, 14, 0, 0, 0, time.UTC)}
	f.engine.set(agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: on battery (43%)"}})
	deps := &Deps{Store: f.store, Engine: f.engine, Now: func() time.Time { return f.now }}
	if auto {
		f.auto = &fakeAutostart{}
		deps.Autostart = f.auto
	}
	f.tray = NewTray(deps, f, func(a TrayAction) { f.done = append(f.done, a) }, nil)
	return f
}

// labels returns the labels of the menu's shown items ("-" for a
// separator, "[x] " before a checked item, "(off) " before a disabled
// one).
func labels(m TrayMenu) []string {
	var out []string
	for _, it := range m.Items {
		switch {
		case it.Hidden:
		case it.Separator:
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

// tap carries out the action of the shown menu item labelled label.
func (f *trayFixture) tap(t *testing.T, label string) {
	t.Helper()
	for _, it := range f.tray.Menu().Items {
		if it.Label == label && !it.Hidden && !it.Disabled {
			f.tray.Do(it.Action)
			return
		}
	}
	t.Fatalf("no menu item %q in %q", label, labels(f.tray.Menu()))
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
	want := []string{"(off) Waiting: on battery (43%)", "-", "Pause for 1 hour", "Pause until tomorrow, 08:00", "Finish current tasks, then pause", "-",
		"Compute now for 1 hour", "Compute now for 3 hours", "-",
		"Now…", "Settings…", "Browse jobs…", "Contribution history…", "Help…", "(off) " + AboutLabel(), "-", "Quit"}
	if diff := cmp.Diff(want, labels(f.tray.Menu())); diff != "" {
		t.Fatalf("menu (-want +got):\n%s", diff)
	}
	size := len(f.tray.Menu().Items)

	f.tap(t, "Pause for 1 hour")
	if got, want := f.pausedUntil(t), f.now.Add(time.Hour); !got.Equal(want) {
		t.Errorf("PausedUntil = %v, want %v", got, want)
	}
	if n := f.engine.reloaded(); n != 1 {
		t.Errorf("engine reloaded %d times, want 1", n)
	}
	want = []string{"(off) Paused by you until 15:00", "-", "Pause until tomorrow, 08:00", "Finish current tasks, then pause", "Resume", "-",
		"Compute now for 1 hour", "Compute now for 3 hours", "-",
		"Now…", "Settings…", "Browse jobs…", "Contribution history…", "Help…", "(off) " + AboutLabel(), "-", "Quit"}
	if diff := cmp.Diff(want, labels(f.tray.Menu())); diff != "" {
		t.Errorf("menu after pausing (-want +got):\n%s", diff)
	}

	f.tap(t, "Pause until tomorrow, 08:00")
	if got, want := f.pausedUntil(t), time.Date(2025, 6, 3, 8, 0, 0, 0, time.UTC); !got.Equal(want) {
		t.Errorf("PausedUntil = %v, want %v", got, want)
	}
	want = []string{"(off) Paused by you until Tue 08:00", "-", "Finish current tasks, then pause", "Resume", "-",
		"Compute now for 1 hour", "Compute now for 3 hours", "-",
		"Now…", "Settings…", "Browse jobs…", "Contribution history…", "Help…", "(off) " + AboutLabel(), "-", "Quit"}
	if diff := cmp.Diff(want, labels(f.tray.Menu())); diff != "" {
		t.Errorf("menu after pausing until tomorrow (-want +got):\n%s", diff)
	}

	f.tap(t, "Resume")
	if got := f.pausedUntil(t); !got.IsZero() {
		t.Errorf("PausedUntil = %v after Resume, want zero", got)
	}
	if n := f.engine.reloaded(); n != 3 {
		t.Errorf("engine reloaded %d times, want 3", n)
	}
	if got := labels(f.tray.Menu())[0]; got != "(off) Waiting: on battery (43%)" {
		t.Errorf("status after Resume = %q", got)
	}
	// A system tray keeps its items: hiding and showing them is enough.
	if n := len(f.tray.Menu().Items); n != size {
		t.Errorf("the menu has %d items after pausing and resuming, %d before", n, size)
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
	f.tap(t, "Pause for 1 hour")
	want := []TrayState{TrayIdle, TrayComputing, TrayPaused}
	if diff := cmp.Diff(want, f.icons); diff != "" {
		t.Errorf("icons set (-want +got):\n%s", diff)
	}
	m := f.tray.Menu()
	if l := labels(m)[0]; l != "(off) Paused by you until 15:00" {
		t.Errorf("status = %q", l)
	}
	if m.State != TrayPaused || m.Status != "Paused by you until 15:00" {
		t.Errorf("menu state %q, status %q", m.State, m.Status)
	}
	for s, png := range map[TrayState][]byte{TrayIdle: TrayIcon(TrayIdle), TrayComputing: TrayIcon(TrayComputing), TrayPaused: TrayIcon(TrayPaused)} {
		if len(png) < 8 || string(png[1:4]) != "PNG" {
			t.Errorf("TrayIcon(%s) is not a PNG", s)
		}
	}
}

func TestTrayRefreshKeepsUnchangedItems(t *testing.T) {
	f := newTrayFixture(t, false)
	f.tray.Refresh()
	if f.menus != 1 {
		t.Errorf("an unchanged refresh showed the menu again (%d SetMenu calls, want 1)", f.menus)
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

func TestTrayAutostartWindowsAndQuit(t *testing.T) {
	f := newTrayFixture(t, true)
	want := []string{"(off) Waiting: on battery (43%)", "-", "Pause for 1 hour", "Pause until tomorrow, 08:00", "Finish current tasks, then pause", "-",
		"Compute now for 1 hour", "Compute now for 3 hours", "-",
		"Now…", "Settings…", "Browse jobs…", "Contribution history…", "Help…", "(off) " + AboutLabel(), "-", "Start at login", "-", "Quit"}
	if diff := cmp.Diff(want, labels(f.tray.Menu())); diff != "" {
		t.Fatalf("menu (-want +got):\n%s", diff)
	}
	f.tap(t, "Start at login")
	if !f.auto.on {
		t.Error("Start at login did not enable the entry")
	}
	if got := labels(f.tray.Menu())[16]; got != "[x] Start at login" {
		t.Errorf("item after enabling = %q", got)
	}
	f.tap(t, "Start at login")
	if f.auto.on {
		t.Error("Start at login did not disable the entry")
	}
	for _, it := range f.tray.Menu().Items {
		if it.Action == ActionToggleAutostart && !it.Checkable {
			t.Error("Start at login has no check box")
		}
	}

	f.auto.fail = errors.New("permission denied")
	f.tap(t, "Start at login")
	if got := labels(f.tray.Menu())[1]; got != "(off) Could not change start at login: permission denied" {
		t.Errorf("problem line = %q", got)
	}

	// The windows and Quit leave the tray: they are handed on.
	for _, l := range []string{"Now…", "Settings…", "Browse jobs…", "Contribution history…", "Quit"} {
		f.tap(t, l)
	}
	if diff := cmp.Diff([]TrayAction{ActionNow, ActionSettings, ActionBrowse, ActionHistory, ActionQuit}, f.done); diff != "" {
		t.Errorf("actions handed on (-want +got):\n%s", diff)
	}
}

func TestTrayHelpOpensTheGuide(t *testing.T) {
	f := newTrayFixture(t, false)
	var opened []string
	f.tray.deps.Guide = "/usr/share/doc/idlepool/donor.md"
	f.tray.deps.OpenURL = func(u *url.URL) error {
		opened = append(opened, u.String())
		return nil
	}
	f.tap(t, "Help…")
	if diff := cmp.Diff([]string{"file:///usr/share/doc/idlepool/donor.md"}, opened); diff != "" {
		t.Errorf("URLs opened (-want +got):\n%s", diff)
	}
	if len(f.done) != 0 {
		t.Errorf("Help was handed on (%v): the tray opens the guide itself", f.done)
	}
	if got := labels(f.tray.Menu())[1]; got != "-" {
		t.Errorf("a problem line after opening the guide: %q", got)
	}

	// The opener fails: the problem line says so and where the guide is.
	f.tray.deps.OpenURL = func(*url.URL) error { return errors.New("exec: \"xdg-open\": executable file not found in $PATH") }
	f.tap(t, "Help…")
	if got := labels(f.tray.Menu())[1]; got != `(off) Could not open the donor's guide (/usr/share/doc/idlepool/donor.md): exec: "xdg-open": ex…` {
		t.Errorf("problem line = %q", got)
	}

	// No guide was installed: the item says where to read it.
	f.tray.deps.Guide = ""
	f.tap(t, "Help…")
	if got := labels(f.tray.Menu())[1]; got != "(off) The donor's guide is not installed here: read docs/donor.md in the idlepool source" {
		t.Errorf("problem line = %q", got)
	}
	// Another action clears it.
	f.tap(t, "Pause for 1 hour")
	if got := labels(f.tray.Menu())[1]; got != "-" {
		t.Errorf("the problem line stayed after pausing: %q", got)
	}
}

func TestFileURL(t *testing.T) {
	for _, tc := range []struct{ path, want string }{
		{"/usr/share/doc/idlepool/donor.md", "file:///usr/share/doc/idlepool/donor.md"},
		{"/home/ada/my docs/donor.md", "file:///home/ada/my%20docs/donor.md"},
		{"C:/Users/Ada/AppData/Local/Programs/idlepool/donor.md", "file:///C:/Users/Ada/AppData/Local/Programs/idlepool/donor.md"},
	} {
		if got := FileURL(tc.path).String(); got != tc.want {
			t.Errorf("FileURL(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

func TestTrayServe(t *testing.T) {
	f := newTrayFixture(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	clicks := make(chan TrayAction)
	done := make(chan error, 1)
	go func() { done <- f.tray.Serve(ctx, clicks) }()
	clicks <- ActionPauseHour
	clicks <- ActionNone // Serve has carried out the first click
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve = %v, want nil", err)
	}
	if got, want := f.pausedUntil(t), f.now.Add(time.Hour); !got.Equal(want) {
		t.Errorf("PausedUntil = %v after a click on Serve, want %v", got, want)
	}
}

func TestTrayReadsSettingsWhenTheyMayHaveChanged(t *testing.T) {
	// A pause set elsewhere (`idlepool settings set pause=1h`) while the
	// engine's state stays the same shows in the menu's items once
	// TraySettingsAge has passed; a change of the engine's state shows it
	// at once.
	f := newTrayFixture(t, false)
	hasResume := func() bool { return slices.Contains(labels(f.tray.Menu()), "Resume") }
	if _, err := f.store.UpdateSettings(context.Background(), func(s *idle.Settings) error {
		s.PausedUntil = f.now.Add(time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	f.now = f.now.Add(TrayRefresh)
	f.tray.Refresh()
	if hasResume() {
		t.Fatal("the settings were read again at a plain refresh")
	}
	f.now = f.now.Add(TraySettingsAge)
	f.tray.Refresh()
	if !hasResume() {
		t.Fatalf("after TraySettingsAge the pause set elsewhere is not shown: %v", labels(f.tray.Menu()))
	}

	g := newTrayFixture(t, false)
	if _, err := g.store.UpdateSettings(context.Background(), func(s *idle.Settings) error {
		s.PausedUntil = g.now.Add(time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	g.engine.set(agent.AgentStatus{Pools: lab, Decision: idle.Decision{State: idle.StatePaused, Reason: "paused by you until 15:00"}})
	g.tray.Refresh()
	if !slices.Contains(labels(g.tray.Menu()), "Resume") {
		t.Errorf("a change of the engine's state did not read the settings again: %v", labels(g.tray.Menu()))
	}
}

func TestTrayAboutSaysTheVersion(t *testing.T) {
	was := version.Version
	version.Version = "1.4.2"
	t.Cleanup(func() { version.Version = was })
	f := newTrayFixture(t, false)
	if got := labels(f.tray.Menu()); !slices.Contains(got, "(off) idlepool 1.4.2") {
		t.Errorf("no About line with the build's version in %q", got)
	}
}
