//go:build !darwin || cgo

package app

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fyne.io/fyne/v2/widget"
	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/idle"
)

// nowNow is the wall clock of the Now window's tests: 14:05 UTC, the
// store's time zone (openStore).
var nowNow = time.Date(2026, 12, 1, 14, 5, 0, 0, time.UTC)

// newTestNow is a Now view over a real store, the engine's status st and
// a real event log holding events, with its loads run by a uiLoop.
func newTestNow(t *testing.T, st agent.AgentStatus, events ...string) (*nowView, *uiLoop) {
	t.Helper()
	path := filepath.Join(t.TempDir(), agent.EventsFile)
	at := nowNow.Add(-time.Duration(len(events)) * time.Minute)
	l := agent.NewEventLog(path, 0, func() time.Time { at = at.Add(time.Minute); return at })
	for _, e := range events {
		if err := l.Addf("%s", e); err != nil {
			t.Fatal(err)
		}
	}
	eng := &fakeEngine{}
	eng.set(st)
	u := New(testApp(t), &Deps{Store: openStore(t), Engine: eng, Now: func() time.Time { return nowNow },
		Events: func(_ context.Context, n int) ([]agent.Event, error) { return agent.ReadEvents(path, n) }})
	v := u.newNowView()
	loop := newUILoop()
	v.do = loop.do
	v.load()
	loop.settle(&v.loading)
	return v, loop
}

func TestNowShowsTasksAndPools(t *testing.T) {
	// Two pools, one computing two tasks (one job with a time limit, one
	// whose name is unknown yet), the other one down.
	down := nowNow.Add(-3 * time.Minute)
	st := agent.AgentStatus{
		Decision: idle.Decision{State: idle.StateComputing, Cores: 2, Reason: "computing on 2 of 8 cores"},
		Pools: []agent.PoolState{{URL: "http://10.0.0.5:7420", Name: "lanparty", Slots: 2, Running: 2},
			{URL: "http://10.0.0.7:7420", Name: "home-lab", Slots: 1, UnreachableSince: down}},
		Running: []agent.RunningTask{
			{Pool: "http://10.0.0.5:7420", Job: strings.Repeat("ab12cd34", 8), JobName: "ising-sweep", Task: 4,
				Owner: "idk3m9x2qa7hxyzw0000000000000000aa", OwnerName: "Ada's lab",
				Started: nowNow.Add(-192 * time.Second), TimeLimitMS: 10 * 60 * 1000},
			{Pool: "http://10.0.0.5:7420", Job: "ff00ee11dd22cc33aa", Task: 17, Started: nowNow.Add(-45 * time.Second)},
		},
	}
	v, _ := newTestNow(t, st, "joined pool lanparty (http://10.0.0.5:7420)", "pool home-lab unreachable (retrying)")
	if got, want := v.line.Text, "Computing: 2 tasks for pool lanparty"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	if got, want := v.decision.Text, "Decision: computing on 2 of 8 cores"; got != want {
		t.Errorf("decision %q, want %q", got, want)
	}
	wantPools := "lanparty: connected · 2 workers, 2 tasks\nhome-lab: cannot reach the pool since 14:02, retrying · 1 worker, 0 tasks"
	if v.pools.Text != wantPools {
		t.Errorf("pools:\n%s\nwant:\n%s", v.pools.Text, wantPools)
	}
	if v.notices.Visible() {
		t.Errorf("notices shown: %q (the pool lines say the pool is down)", v.notices.Text)
	}
	wantRows := [][]string{
		{"lanparty", "ising-sweep (ab12cd)", "Ada's lab (idk3m9x2qa…)", "4", "3 min 12 s of 10 min limit", "computing"},
		{"lanparty", "ff00ee11dd22", "", "17", "45 s", "computing"},
	}
	if d := cmp.Diff(wantRows, v.rows); d != "" {
		t.Errorf("task rows (-want +got):\n%s", d)
	}
	if v.empty.Visible() {
		t.Errorf("%q shown with tasks", v.empty.Text)
	}
	wantEvents := "14:05:00  pool home-lab unreachable (retrying)\n14:04:00  joined pool lanparty (http://10.0.0.5:7420)"
	if v.events.Text != wantEvents {
		t.Errorf("events:\n%s\nwant:\n%s", v.events.Text, wantEvents)
	}
}

func TestNowSuspendedAndDown(t *testing.T) {
	// A game runs: the task is suspended, and why; then the only pool
	// goes down with no task held, as the tray line says too.
	st := agent.AgentStatus{
		Decision:  idle.Decision{State: idle.StatePaused, Reason: "paused: steam is running"},
		Suspended: true, SuspendedSince: nowNow.Add(-time.Minute),
		Pools: []agent.PoolState{{URL: "http://10.0.0.5:7420", Name: "lanparty", Slots: 1, Running: 1}},
		Running: []agent.RunningTask{{Pool: "http://10.0.0.5:7420", Job: "ab12", JobName: "pi", Task: 0,
			Started: nowNow.Add(-2 * time.Hour), TimeLimitMS: 3 * 60 * 60 * 1000, Suspended: true}},
	}
	v, loop := newTestNow(t, st)
	if got, want := v.decision.Text, "Decision: paused: steam is running; tasks suspended since 14:04"; got != want {
		t.Errorf("decision %q, want %q", got, want)
	}
	if d := cmp.Diff([][]string{{"lanparty", "pi", "", "0", "2 h of 3 h limit", "suspended: steam is running"}}, v.rows); d != "" {
		t.Errorf("rows (-want +got):\n%s", d)
	}
	if !strings.HasPrefix(v.events.Text, "Nothing has happened yet.") {
		t.Errorf("no events: %q", v.events.Text)
	}

	eng := v.u.deps.Engine.(*fakeEngine)
	eng.set(agent.AgentStatus{
		Decision: idle.Decision{State: idle.StateComputing, Cores: 2, Reason: "computing on 2 of 8 cores"},
		Pools:    []agent.PoolState{{URL: "http://10.0.0.5:7420", Name: "lanparty", Slots: 1, UnreachableSince: nowNow.Add(-3 * time.Minute)}},
	})
	v.load()
	loop.settle(&v.loading)
	if got, want := v.line.Text, "Idle: lanparty: cannot reach the pool since 14:02, retrying"; got != want {
		t.Errorf("line with the pool down %q, want %q", got, want)
	}
	if !v.empty.Visible() || v.empty.Text != "No task runs on this machine now." || len(v.rows) != 0 || v.table.Visible() {
		t.Errorf("no task: %q visible %v, rows %v, table visible %v", v.empty.Text, v.empty.Visible(), v.rows, v.table.Visible())
	}
	if got, want := v.decision.Text, "Decision: computing on 2 of 8 cores"; got != want || !v.decision.Visible() {
		t.Errorf("decision %q (visible %v), want %q", got, v.decision.Visible(), want)
	}

	// The owner's pause: the line says it, the decision would repeat it.
	eng.set(agent.AgentStatus{Decision: idle.Decision{State: idle.StatePaused, Reason: "paused by you until 15:00"},
		Suspended: true, SuspendedSince: nowNow, Pools: []agent.PoolState{{URL: "http://10.0.0.5:7420", Name: "lanparty", Slots: 1}}})
	v.load()
	loop.settle(&v.loading)
	if v.line.Text != "Paused by you until 15:00" || v.decision.Visible() {
		t.Errorf("owner's pause: line %q, decision %q shown %v", v.line.Text, v.decision.Text, v.decision.Visible())
	}
}

func TestShowNowWindow(t *testing.T) {
	eng := &fakeEngine{}
	ticks := make(chan time.Time)
	u := New(testApp(t), &Deps{Store: openStore(t), Engine: eng, Now: func() time.Time { return nowNow },
		Ticks: func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} }})
	w, v := u.showNow()
	if v == nil || w.Title() != "Now" {
		t.Fatalf("window %q, view %v", w.Title(), v)
	}
	v.loading.Wait()
	if w2 := u.ShowNow(); w2 != w {
		t.Error("a second ShowNow made another window")
	}
	w.Close()
	v.ticking.Wait() // the auto refresh has ended
	if _, open := u.windows["now"]; open {
		t.Error("the closed window is still known")
	}
}

func TestDurationWords(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0 s", 45 * time.Second: "45 s", 192 * time.Second: "3 min 12 s", 10 * time.Minute: "10 min",
		65 * time.Minute: "1 h 05 min", 3 * time.Hour: "3 h", 3*time.Hour + 30*time.Second: "3 h",
	} {
		if got := durationWords(d); got != want {
			t.Errorf("durationWords(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestNowAfterComputeNow: right after the owner asked to compute now,
// before the engine decided again, the Now window says that it starts
// computing and shows no trace of why it waited before: neither in the
// line nor as the decision.
func TestNowAfterComputeNow(t *testing.T) {
	st := agent.AgentStatus{
		Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: you were active 3 s ago; starting after 5 min idle"},
		Pools:    []agent.PoolState{{URL: "http://10.0.0.5:7420", Name: "lanparty", Slots: 2}},
	}
	v, loop := newTestNow(t, st)
	if _, err := v.u.deps.Store.UpdateSettings(context.Background(), func(s *idle.Settings) error {
		s.TimeZone = "UTC"
		s.SetComputeUntil(nowNow.Add(time.Hour))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	v.load()
	loop.settle(&v.loading)
	if got, want := v.line.Text, "Computing now, as you asked, until "+nowNow.Add(time.Hour).UTC().Format("15:04")+": starting…"; got != want {
		t.Errorf("line %q, want %q", got, want)
	}
	for _, l := range []*widget.Label{v.line, v.decision} {
		if l.Visible() && strings.Contains(l.Text, "you were active") {
			t.Errorf("the window still shows the reason it waited before: %q", l.Text)
		}
	}
}
