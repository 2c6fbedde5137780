package idle

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDecideComputeNow: compute now overrides the hours, the idle wait
// and other programs' load until it runs out on the monotonic clock,
// while the battery, the temperature and (unless allowed) a listed
// program still hold it back.
func TestDecideComputeNow(t *testing.T) {
	loc := berlin(t)
	noon := time.Date(2026, 3, 10, 12, 0, 0, 0, loc) // a Tuesday, outside the nights
	nights := func(s *Settings) {
		s.TimeZone = "Europe/Berlin"
		s.Schedule = Schedule{{Days: EveryDay, Start: 22 * 60, End: 7 * 60}}
		s.PauseFor = []string{"game.exe"}
	}
	forced := withSettings(func(s *Settings) { nights(s); s.SetComputeUntil(noon.Add(3 * time.Hour)) })
	withGames := withSettings(func(s *Settings) {
		nights(s)
		s.SetComputeUntil(noon.Add(time.Hour))
		s.ComputeDuringPrograms = true
	})
	game := func(s *Signals) { s.Running.Value = []string{"game.exe"} }
	// now marks a decision made under compute now.
	now := func(d Decision) Decision { d.ComputeNow = true; return d }
	tests := []struct {
		name     string
		settings Settings
		steps    []step
	}{
		{"without compute now the hours hold it back", withSettings(nights), []step{
			{noon, 0, nil, waiting("waiting: outside your hours (next window Tue 22:00)")},
		}},
		{"outside the hours, the owner active, others busy: computes", forced, []step{
			{noon, 0, func(s *Signals) { s.InputIdle.Value = time.Second; s.OtherCPUShare.Value = 0.9 },
				now(computing(7, "computing now, as you asked, until 15:00, on 7 of 8 cores"))},
		}},
		{"the battery still holds it back", forced, []step{
			{noon, 0, func(s *Signals) { s.Power.Value = Power{OnBattery: true, HasBattery: true, Percent: 43} },
				now(waiting("waiting: on battery (43%); compute now until 15:00 waits for this"))},
		}},
		{"the temperature still holds it back", forced, []step{
			{noon, 0, func(s *Signals) { s.MaxTemperatureC.Value = 90 },
				now(waiting("waiting: CPU at 90 °C, ceiling 85 °C; compute now until 15:00 waits for this"))},
		}},
		{"a listed program still pauses it", forced, []step{
			{noon, 0, game, now(paused("paused: game.exe is running; compute now until 15:00 waits for this"))},
		}},
		{"unless the owner allowed it", withGames, []step{
			{noon, 0, game, now(computing(7, "computing now, as you asked, until 13:00, on 7 of 8 cores; while game.exe runs, as you allowed"))},
		}},
		{"it runs out by the monotonic clock, whatever the wall clock says", forced, []step{
			{noon, 0, nil, now(computing(7, "computing now, as you asked, until 15:00, on 7 of 8 cores"))},
			// The wall clock jumped back a day: the monotonic hours still pass.
			{noon.Add(-24 * time.Hour).Add(3 * time.Hour), 3 * time.Hour, nil, waiting("waiting: outside your hours (next window Mon 22:00)")},
		}},
		{"the owner's pause wins over compute now", withSettings(func(s *Settings) {
			nights(s)
			s.ComputeUntil = noon.Add(3 * time.Hour)
			s.PausedUntil = noon.Add(time.Hour)
		}), []step{
			{noon, 0, nil, paused("paused by you until 13:00")},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st PolicyState
			for i, s := range tc.steps {
				sig := idleDesktop(s.wall)
				if s.sig != nil {
					s.sig(&sig)
				}
				var got Decision
				got, st = Decide(tc.settings, sig, s.wall, s.mono, st)
				if diff := cmp.Diff(s.want, got, ignoreCause); diff != "" {
					t.Errorf("step %d: decision (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestComputeOver(t *testing.T) {
	at := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	s := withSettings(func(s *Settings) { s.SetComputeUntil(at.Add(time.Hour)) })
	_, st := Decide(s, idleDesktop(at), at, 0, PolicyState{})
	if st.ComputeOver {
		t.Error("ComputeOver while computing now")
	}
	_, st = Decide(s, idleDesktop(at), at, time.Hour, st)
	if !st.ComputeOver || !st.ComputeFrom.Equal(at.Add(time.Hour)) {
		t.Errorf("after the hour: ComputeOver %t, ComputeFrom %s", st.ComputeOver, st.ComputeFrom)
	}
}

// TestDecideFinishThenPause: finishing computes as usual but takes no new
// tasks (MayLease false); a wait says that a pause follows.
func TestDecideFinishThenPause(t *testing.T) {
	at := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	s := withSettings(func(s *Settings) { s.SetFinishThenPause() })
	d, _ := Decide(s, idleDesktop(at), at, 0, PolicyState{})
	want := Decision{State: StateComputing, Cores: 7, Finishing: true,
		Reason: "finishing the tasks in hand on 7 of 8 cores, then pausing, as you asked"}
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("decision (-want +got):\n%s", diff)
	}
	if !d.Run() || d.MayLease() {
		t.Errorf("Run %t, MayLease %t; want the running tasks to go on and no new ones", d.Run(), d.MayLease())
	}
	sig := idleDesktop(at)
	sig.Power.Value = Power{OnBattery: true, HasBattery: true, Percent: 43}
	d, _ = Decide(s, sig, at, time.Second, PolicyState{})
	if d.Reason != "waiting: on battery (43%); then pausing, as you asked" || !d.Finishing {
		t.Errorf("on battery: %q, Finishing %t", d.Reason, d.Finishing)
	}
}

// TestOverridesExclusive: the last of pause, compute now and finish then
// pause that the owner asked for is the one in force.
func TestOverridesExclusive(t *testing.T) {
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	s := Defaults()
	s.SetPause(now.Add(time.Hour))
	s.SetComputeUntil(now.Add(2 * time.Hour))
	if !s.PausedUntil.IsZero() || !s.ComputeUntil.Equal(now.Add(2*time.Hour)) {
		t.Errorf("compute now after a pause: paused %s, compute %s", s.PausedUntil, s.ComputeUntil)
	}
	s.SetFinishThenPause()
	if !s.FinishThenPause || !s.ComputeUntil.IsZero() {
		t.Errorf("finish after compute now: %+v", s)
	}
	s.SetPause(time.Time{}) // Resume
	if s.FinishThenPause || !s.PausedUntil.IsZero() {
		t.Errorf("resume: %+v", s)
	}
	s.SetComputeUntil(now.Add(time.Hour))
	if !s.ComputingNow(now) || s.ComputingNow(now.Add(time.Hour)) {
		t.Errorf("ComputingNow until %s: %t at %s, %t an hour later", s.ComputeUntil, s.ComputingNow(now), now, s.ComputingNow(now.Add(time.Hour)))
	}
}

func TestSetComputeAndFinish(t *testing.T) {
	loc := time.UTC
	now := time.Date(2026, 3, 10, 13, 5, 0, 0, loc) // a Tuesday
	nights := Defaults()
	nights.Schedule = Schedule{{Days: EveryDay, Start: 22 * 60, End: 7 * 60}}
	tests := []struct {
		name  string
		start Settings
		kv    string
		want  func(*Settings)
		err   string
	}{
		{"for 3 hours", nights, "compute=3h", func(s *Settings) { s.ComputeUntil = now.Add(3 * time.Hour) }, ""},
		{"until the hours start", nights, "compute=hours", func(s *Settings) {
			s.ComputeUntil = time.Date(2026, 3, 10, 22, 0, 0, 0, loc)
		}, ""},
		{"until the hours start, with no hours", Defaults(), "compute=hours", nil, "compute=hours: your hours are any time"},
		{"off", withSettings(func(s *Settings) { s.ComputeUntil = now.Add(time.Hour) }), "compute=off", func(s *Settings) { s.ComputeUntil = time.Time{} }, ""},
		{"not a duration", nights, "compute=soon", nil, `compute=soon: want a duration (3h), "hours"`},
		{"past", nights, "compute=2026-03-10T12:00:00Z", nil, "is not in the future"},
		{"too long", nights, "compute=200h", nil, "at most a week"},
		{"ends a pause", withSettings(func(s *Settings) { s.PausedUntil = now.Add(time.Hour) }), "compute=1h", func(s *Settings) {
			s.PausedUntil, s.ComputeUntil = time.Time{}, now.Add(time.Hour)
		}, ""},
		{"during programs", Defaults(), "compute_during_programs=yes", func(s *Settings) { s.ComputeDuringPrograms = true }, ""},
		{"finish then pause", withSettings(func(s *Settings) { s.ComputeUntil = now.Add(time.Hour) }), "pause=finish", func(s *Settings) {
			s.ComputeUntil, s.FinishThenPause = time.Time{}, true
		}, ""},
		{"off ends finish then pause", withSettings(func(s *Settings) { s.FinishThenPause = true }), "pause=off", func(s *Settings) { s.FinishThenPause = false }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start
			k, v, _ := strings.Cut(tc.kv, "=")
			err := s.Set(k, v, now)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Set(%s) = %v, want an error containing %q", tc.kv, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Set(%s): %v", tc.kv, err)
			}
			want := tc.start
			tc.want(&want)
			if diff := cmp.Diff(want, s); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
	s := nights
	if err := s.Set("compute", "hours", time.Date(2026, 3, 10, 23, 0, 0, 0, loc)); err == nil || !strings.Contains(err.Error(), "have started already") {
		t.Errorf("compute=hours inside the hours: %v", err)
	}
}

func TestValidateForCores(t *testing.T) {
	s := Defaults()
	s.Cores = 12
	if err := s.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	err := s.ValidateFor(8)
	if err == nil || !strings.Contains(err.Error(), "this computer has 8 logical CPUs; 12 is more than it has") {
		t.Errorf("ValidateFor(8) = %v", err)
	}
	s.Cores = 8
	if err := s.ValidateFor(8); err != nil {
		t.Errorf("8 of 8: %v", err)
	}
}

func TestSettingsJSONOverrides(t *testing.T) {
	at := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	s := Defaults()
	s.SetComputeUntil(at)
	s.ComputeDuringPrograms = true
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	got := Defaults()
	if err := got.UnmarshalJSON(b); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	s = Defaults()
	s.SetFinishThenPause()
	b, _ = s.MarshalJSON()
	if !strings.Contains(string(b), `"finish_then_pause":true`) {
		t.Errorf("JSON %s lacks finish_then_pause", b)
	}
}
