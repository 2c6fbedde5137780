package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/idle"
	"idlepool/store"
)

// TestPredictPause: each kind of pause is predicted at an injected clock:
// the owner's pause and the hours to their known end, a game and the
// battery for their typical length less what has passed (and as long
// again once they outlived it), the owner at the machine by the pattern
// learnt for the hour the pause began, never before the idle wait ends.
func TestPredictPause(t *testing.T) {
	now := time.Date(2026, 3, 10, 20, 10, 0, 0, time.UTC) // a Tuesday, 20:10
	evenings := NewOwnerPattern([]store.HourPauses{{Hour: 20, Count: 5, Mean: 40 * time.Minute}, {Hour: 9, Count: 5, Mean: 2 * time.Minute}})
	wait := func(c idle.Cause, until time.Time) idle.Decision {
		return idle.Decision{State: idle.StateWaiting, Reason: "waiting", Cause: c, Until: until}
	}
	tests := []struct {
		name      string
		d         idle.Decision
		pausedFor time.Duration
		pattern   *OwnerPattern
		want      PausePrediction
		ok        bool
	}{
		{"computing", idle.Decision{State: idle.StateComputing, Cores: 2}, 0, nil, PausePrediction{}, false},
		{"a policy that names no cause", wait(idle.CauseNone, time.Time{}), 0, nil, PausePrediction{}, false},
		{"a game just started", wait(idle.CauseGame, time.Time{}), time.Second, nil,
			PausePrediction{Left: GamePause - time.Second, Words: "a game started"}, true},
		{"a game played longer than expected", wait(idle.CauseGame, time.Time{}), 90 * time.Minute, nil,
			PausePrediction{Left: 90 * time.Minute, Words: "a game started"}, true},
		{"a listed program", wait(idle.CauseProgram, time.Time{}), 0, nil,
			PausePrediction{Left: GamePause, Words: "a program you pause for started"}, true},
		{"outside the hours: until the window", wait(idle.CauseHours, now.Add(110*time.Minute)), time.Minute, nil,
			PausePrediction{Left: 110 * time.Minute, Words: "outside your hours until 22:00"}, true},
		{"outside the hours with no window ahead", wait(idle.CauseHours, time.Time{}), 0, nil,
			PausePrediction{Left: EndlessPause, Words: "outside your hours"}, true},
		{"the owner's pause", idle.Decision{State: idle.StatePaused, Cause: idle.CausePaused, Until: now.Add(50 * time.Minute)}, 0, nil,
			PausePrediction{Left: 50 * time.Minute, Words: "paused by you until 21:00"}, true},
		{"on battery", wait(idle.CauseBattery, time.Time{}), 10 * time.Minute, nil,
			PausePrediction{Left: BatteryPause - 10*time.Minute, Words: "on battery"}, true},
		{"too hot", wait(idle.CauseHot, time.Time{}), 0, nil,
			PausePrediction{Left: HotPause, Words: "the CPU is too hot"}, true},
		{"other programs busy", wait(idle.CauseLoad, time.Time{}), time.Minute, evenings,
			PausePrediction{Left: LoadPause - time.Minute, Words: "other programs are busy"}, true},
		{"the owner active, nothing learnt", wait(idle.CauseActive, now.Add(4*time.Minute)), time.Minute, nil,
			PausePrediction{Left: DefaultActivePause - time.Minute, Words: "you are using this computer"}, true},
		{"the owner active in the evening", wait(idle.CauseActive, now.Add(4*time.Minute)), time.Minute, evenings,
			PausePrediction{Left: 39 * time.Minute, Words: "you are using this computer"}, true},
		{"the owner active briefly at this hour: the idle wait is longer", wait(idle.CauseActive, now.Add(4*time.Minute)),
			time.Minute, NewOwnerPattern([]store.HourPauses{{Hour: 20, Count: 5, Mean: 2 * time.Minute}}),
			PausePrediction{Left: 4 * time.Minute, Words: "you are using this computer"}, true},
		{"the hour of the pause's start counts", wait(idle.CauseActive, time.Time{}), 15 * time.Minute,
			NewOwnerPattern([]store.HourPauses{{Hour: 19, Count: 3, Mean: 30 * time.Minute}, {Hour: 20, Count: 3, Mean: 3 * time.Minute}}),
			PausePrediction{Left: 15 * time.Minute, Words: "you are using this computer"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := PredictPause(tc.d, now, tc.pausedFor, tc.pattern)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v (%+v)", ok, tc.ok, got)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("prediction (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHandBackNow: the rule hands a task back when the pause is expected
// to last longer than the work it would throw away plus the cost of a
// hand-back, or longer than the lease lets it stay suspended.
func TestHandBackNow(t *testing.T) {
	const hold = 270 * time.Second // a 5-minute lease timeout (pauseLimit)
	tests := []struct {
		name                 string
		left, pausedFor, ran time.Duration
		want                 bool
	}{
		{"a game: an hour left of a task 10 s in", time.Hour, 0, 10 * time.Second, true},
		{"a short pause of a fresh task", 20 * time.Second, 0, time.Second, false},
		{"just over the fresh task's bound", 32 * time.Second, 0, time.Second, true},
		{"a long task is kept through a pause shorter than its work", 2 * time.Minute, 0, 3 * time.Minute, false},
		{"but not past what the lease allows", 280 * time.Second, 0, 5 * time.Minute, true},
		{"the lease's allowance shrinks as the pause goes on", 100 * time.Second, 3 * time.Minute, 10 * time.Minute, true},
		{"kept while the allowance lasts", 80 * time.Second, 3 * time.Minute, 10 * time.Minute, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := handBackNow(tc.left, tc.pausedFor, tc.ran, hold); got != tc.want {
				t.Errorf("handBackNow(left %s, paused %s, ran %s, hold %s) = %v, want %v", tc.left, tc.pausedFor, tc.ran, hold, got, tc.want)
			}
		})
	}
	if got := pauseLimit(5 * time.Minute); got != hold {
		t.Errorf("pauseLimit(5m) = %s, want %s", got, hold)
	}
}

// TestOwnerPattern: the mean of an hour is trusted after patternMin
// pauses, the whole day's before any hour's; a new pause weighs at least
// patternWeight, so the mean follows a changed habit.
func TestOwnerPattern(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 3, 10, h, 30, 0, 0, time.UTC) }
	var none *OwnerPattern
	if _, ok := none.Expected(at(20)); ok {
		t.Error("a nil pattern expects something")
	}
	p := NewOwnerPattern(nil)
	p.Note(at(20), 10*time.Minute)
	p.Note(at(20), 20*time.Minute)
	if m, ok := p.Expected(at(20)); ok {
		t.Errorf("expected %s after 2 pauses, want nothing yet", m)
	}
	p.Note(at(9), 30*time.Minute)
	if m, ok := p.Expected(at(3)); !ok || m != 20*time.Minute {
		t.Errorf("the day's mean after 3 pauses: %s, %v; want 20m", m, ok)
	}
	h, ok := p.Note(at(20), 30*time.Minute)
	if !ok || h != (store.HourPauses{Hour: 20, Count: 3, Mean: 20 * time.Minute}) {
		t.Errorf("Note returned %+v, %v", h, ok)
	}
	if m, ok := p.Expected(at(20)); !ok || m != 20*time.Minute {
		t.Errorf("the hour's mean: %s, %v; want 20m", m, ok)
	}
	for range 20 { // the owner's evenings got short
		p.Note(at(20), time.Minute)
	}
	if m, _ := p.Expected(at(20)); m > 2*time.Minute {
		t.Errorf("after 20 short pauses the hour expects %s", m)
	}
	if _, ok := p.Note(at(20), 0); ok {
		t.Error("a pause of no length was noted")
	}
}

// TestDonorLearnsOwnerPauses: the donor's policy times each pause for the
// owner at the machine by the decisions' wall clock (injected), adds it
// to the hour it began once the device computes again, and keeps it in
// the local store, from which a new donor reads it; a pause at start, or
// one that turns into another reason, is not learnt.
func TestDonorLearnsOwnerPauses(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "local.db")
	local, err := store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	p := newDonorPolicy(local, noGPUs{}, slog.New(slog.DiscardHandler))
	computing := idle.Decision{State: idle.StateComputing, Cores: 1}
	active := idle.Decision{State: idle.StateWaiting, Cause: idle.CauseActive}
	hours := idle.Decision{State: idle.StateWaiting, Cause: idle.CauseHours}
	t0 := time.Date(2026, 3, 10, 20, 5, 0, 0, time.Local)
	steps := []struct {
		prev, d idle.Decision
		at      time.Duration
	}{
		{idle.Decision{}, active, 0},          // at start: its beginning is unknown
		{active, computing, 5 * time.Minute},  // not learnt
		{computing, active, 10 * time.Minute}, // a pause begins at 20:15
		{active, active, 12 * time.Minute},    // goes on
		{active, computing, 17 * time.Minute}, // 7 minutes
		{computing, active, 30 * time.Minute}, // another
		{active, hours, 32 * time.Minute},     // turns into the hours: dropped
		{hours, computing, 40 * time.Minute},  // not learnt
		{computing, active, 60 * time.Minute}, // 21:05
		{active, computing, 63 * time.Minute}, // 3 minutes, in hour 21
	}
	for _, s := range steps {
		p.learn(s.prev, s.d, t0.Add(s.at))
	}
	got, err := local.OwnerPauses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.HourPauses{{Hour: 20, Count: 1, Mean: 7 * time.Minute}, {Hour: 21, Count: 1, Mean: 3 * time.Minute}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kept in the store (-want +got):\n%s", diff)
	}
	p2 := newDonorPolicy(local, noGPUs{}, slog.New(slog.DiscardHandler))
	p2.readPattern(ctx)
	p2.pattern.Note(t0, 7*time.Minute)
	p2.pattern.Note(t0, 7*time.Minute)
	if m, ok := p2.pattern.Expected(t0); !ok || m != 7*time.Minute {
		t.Errorf("a new donor expects %s, %v at 20:05; want what it read and learnt, 7m", m, ok)
	}
}
