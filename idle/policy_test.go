package idle

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// ignoreCause leaves a decision's Cause and Until out of a comparison of
// reasons; TestDecideCause checks them.
var ignoreCause = cmpopts.IgnoreFields(Decision{}, "Cause", "Until")

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skipf("no time zone data for Europe/Berlin: %v", err)
	}
	return loc
}

// idleDesktop is a desktop on AC, idle for 10 minutes, quiet and cool,
// without an NVIDIA driver.
func idleDesktop(at time.Time) Signals {
	return Signals{
		At:              at,
		InputIdle:       Reading[time.Duration]{Value: 10 * time.Minute, Known: true, Source: "x11-screensaver"},
		OtherCPUShare:   Reading[float64]{Value: 0.05, Known: true, Source: "gopsutil"},
		Power:           Reading[Power]{Value: Power{}, Known: true, Source: "/sys/class/power_supply"},
		MaxTemperatureC: Reading[float64]{Value: 50, Known: true, Source: "coretemp"},
		Running:         Reading[[]string]{Known: true, Source: "process list"},
		GPUs:            Reading[[]GPU]{Err: "no NVIDIA driver"},
		CPUs:            8,
	}
}

// step is one call of Decide in a sequence: the wall clock and monotonic
// readings, a change to the idle desktop's signals, and the decision
// expected.
type step struct {
	wall time.Time
	mono time.Duration
	sig  func(*Signals)
	want Decision
}

func computing(cores int, reason string, gpus ...string) Decision {
	return Decision{State: StateComputing, Cores: cores, GPUs: gpus, Reason: reason}
}

// waiting is a decision to wait for reason, with the hold that the
// reason's words say: outside the hours, on battery, the CPU too hot,
// else the owner (invariant 19: the hold is all that others read).
func waiting(reason string) Decision {
	hold := HoldOwner
	switch {
	case strings.HasPrefix(reason, "waiting: outside your hours"):
		hold = HoldHours
	case strings.HasPrefix(reason, "waiting: on battery"):
		hold = HoldBattery
	case strings.HasPrefix(reason, "waiting: CPU at"):
		hold = HoldLimit
	}
	return Decision{State: StateWaiting, Reason: reason, Hold: hold}
}

// paused is a decision to pause for reason: always for the owner.
func paused(reason string) Decision {
	return Decision{State: StatePaused, Reason: reason, Hold: HoldOwner}
}

func idleFor(d time.Duration) func(*Signals) {
	return func(s *Signals) { s.InputIdle.Value = d }
}

func withSettings(f func(*Settings)) Settings {
	s := Defaults()
	f(&s)
	return s
}

func twoGPUs(s *Signals) {
	s.GPUs = Reading[[]GPU]{Known: true, Source: "nvml", Value: []GPU{
		{Index: 0, UUID: "GPU-aaa", Name: "RTX 4090", MemoryTotalMiB: 24000, MemoryFreeMiB: 6960,
			UtilisationShare: 0.9, TemperatureC: 60, OtherProcesses: []int{4242}, OtherMemoryMiB: 17040, ComputeCapability: "8.9"},
		{Index: 1, UUID: "GPU-bbb", Name: "RTX 3060", MemoryTotalMiB: 12000, MemoryFreeMiB: 12000, TemperatureC: 40, ComputeCapability: "8.6"},
	}}
}

func TestDecide(t *testing.T) {
	loc := berlin(t)
	tue2300 := time.Date(2026, 3, 10, 23, 0, 0, 0, loc) // a Tuesday
	gpusOn := func(s *Settings) {
		s.GPUs = map[string]GPUSettings{"GPU-aaa": {Use: true}, "GPU-bbb": {Use: true}}
	}
	nightsOnly := func(s *Settings) {
		s.TimeZone = "Europe/Berlin"
		s.Schedule = Schedule{{Days: EveryDay &^ (1<<time.Saturday | 1<<time.Sunday), Start: 22 * 60, End: 7 * 60}}
	}
	tests := []struct {
		name     string
		settings Settings
		steps    []step
	}{
		{"desktop without a battery computes on all cores but one", Defaults(), []step{
			{tue2300, 0, nil, computing(7, "computing on 7 of 8 cores")},
		}},
		{"desktop on a USB UPS is on AC", Defaults(), []step{
			{tue2300, 0, func(s *Signals) { s.Power.Source = "upower (ups)" }, computing(7, "computing on 7 of 8 cores")},
		}},
		{"laptop charging on AC computes", Defaults(), []step{
			{tue2300, 0, func(s *Signals) { s.Power.Value = Power{HasBattery: true, Percent: 80} }, computing(7, "computing on 7 of 8 cores")},
		}},
		{"discharging laptop waits", Defaults(), []step{
			{tue2300, 0, func(s *Signals) { s.Power.Value = Power{OnBattery: true, HasBattery: true, Percent: 43} },
				waiting("waiting: on battery (43%)")},
		}},
		{"on battery allowed above the minimum, not below", withSettings(func(s *Settings) { s.PauseOnBattery, s.MinBatteryPercent = false, 30 }), []step{
			{tue2300, 0, func(s *Signals) { s.Power.Value = Power{OnBattery: true, HasBattery: true, Percent: 43} },
				computing(7, "computing on 7 of 8 cores")},
			{tue2300.Add(time.Hour), time.Hour, func(s *Signals) { s.Power.Value = Power{OnBattery: true, HasBattery: true, Percent: 29} },
				waiting("waiting: on battery at 29%, below your minimum of 30%")},
		}},
		{"remote session with recent input is use", Defaults(), []step{
			{tue2300, 0, func(s *Signals) {
				s.InputIdle = Reading[time.Duration]{Value: 2 * time.Second, Known: true, Source: "ssh tty"}
			},
				waiting("waiting: you were active 2 s ago; starting after 5 min idle")},
		}},
		{"a listed game running pauses", withSettings(func(s *Settings) { s.PauseFor = []string{"game.exe", "steam"} }), []step{
			{tue2300, 0, func(s *Signals) { s.Running.Value = []string{"game.exe"} }, paused("paused: game.exe is running")},
			{tue2300, time.Second, func(s *Signals) { s.Running.Value = []string{"steam", "game.exe", "game.exe"} },
				paused("paused: game.exe and steam are running")},
			{tue2300, 2 * time.Second, nil, computing(7, "computing on 7 of 8 cores")},
		}},
		{"a program no longer listed does not pause", withSettings(func(s *Settings) { s.PauseFor = []string{"steam"} }), []step{
			{tue2300, 0, func(s *Signals) { s.Running.Value = []string{"game.exe"} }, computing(7, "computing on 7 of 8 cores")},
		}},
		{"GPU used by another process above the threshold is skipped", withSettings(gpusOn), []step{
			{tue2300, 0, twoGPUs, computing(7, "computing on 7 of 8 cores and GPU 1; GPU 0 skipped: another process uses 90% of it", "GPU-bbb")},
			{tue2300, time.Second, func(s *Signals) { twoGPUs(s); s.GPUs.Value[0].UtilisationShare = 0 },
				computing(7, "computing on 7 of 8 cores and GPU 1; GPU 0 skipped: another process uses 71% of it", "GPU-bbb")},
		}},
		{"our own GPU load is not another process's", withSettings(gpusOn), []step{
			{tue2300, 0, func(s *Signals) { twoGPUs(s); s.GPUs.Value = s.GPUs.Value[1:] },
				computing(7, "computing on 7 of 8 cores and GPU 1; GPU GPU-aaa not found", "GPU-bbb")},
			{tue2300, time.Second, func(s *Signals) {
				twoGPUs(s)
				s.GPUs.Value = s.GPUs.Value[1:]
				s.GPUs.Value[0].UtilisationShare = 1 // ours
				s.GPUs.Value[0].OurProcesses = []int{100}
				s.GPUs.Value[0].OtherProcesses = []int{7}
				s.GPUs.Value[0].OtherMemoryMiB = 600 // 5%
			}, computing(7, "computing on 7 of 8 cores and GPU 1; GPU GPU-aaa not found", "GPU-bbb")},
		}},
		{"a GPU allowed before is not ours while no task of ours uses it", withSettings(gpusOn), []step{
			{tue2300, 0, func(s *Signals) { twoGPUs(s); s.GPUs.Value = s.GPUs.Value[1:] },
				computing(7, "computing on 7 of 8 cores and GPU 1; GPU GPU-aaa not found", "GPU-bbb")},
			// A game starts on the GPU allowed a second ago: most of its
			// time, little of its memory, and no process of ours there.
			{tue2300, time.Second, func(s *Signals) {
				twoGPUs(s)
				s.GPUs.Value = s.GPUs.Value[1:]
				s.GPUs.Value[0].UtilisationShare = 0.85
				s.GPUs.Value[0].OtherProcesses = []int{7}
				s.GPUs.Value[0].OtherMemoryMiB = 600 // 5%
			}, computing(7, "computing on 7 of 8 cores; GPU 1 skipped: another process uses 85% of it; GPU GPU-aaa not found")},
		}},
		{"hot GPU skipped until it cools by the margin", withSettings(func(s *Settings) {
			s.GPUs = map[string]GPUSettings{"GPU-bbb": {Use: true, MaxTemperatureC: 80}}
		}), []step{
			{tue2300, 0, func(s *Signals) { twoGPUs(s); s.GPUs.Value[1].TemperatureC = 84 },
				computing(7, "computing on 7 of 8 cores; GPU 1 skipped: 84 °C, ceiling 80 °C")},
			{tue2300, time.Second, func(s *Signals) { twoGPUs(s); s.GPUs.Value[1].TemperatureC = 78 },
				computing(7, "computing on 7 of 8 cores; GPU 1 skipped: 78 °C, ceiling 80 °C")},
			{tue2300, 2 * time.Second, func(s *Signals) { twoGPUs(s); s.GPUs.Value[1].TemperatureC = 75 },
				computing(7, "computing on 7 of 8 cores and GPU 1", "GPU-bbb")},
		}},
		{"GPU enabled but no NVIDIA driver: CPU only", withSettings(gpusOn), []step{
			{tue2300, 0, nil, computing(7, "computing on 7 of 8 cores; no usable GPU (no NVIDIA driver): CPU only")},
		}},
		{"GPUs present but none enabled: CPU only, nothing said", Defaults(), []step{
			{tue2300, 0, twoGPUs, computing(7, "computing on 7 of 8 cores")},
		}},
		{"schedule window crossing midnight", withSettings(nightsOnly), []step{
			{time.Date(2026, 3, 10, 21, 59, 0, 0, loc), 0, nil, waiting("waiting: outside your hours (next window Tue 22:00)")},
			{time.Date(2026, 3, 10, 22, 0, 0, 0, loc), time.Minute, nil, computing(7, "computing on 7 of 8 cores")},
			{time.Date(2026, 3, 11, 6, 59, 59, 0, loc), 9 * time.Hour, nil, computing(7, "computing on 7 of 8 cores")},
			{time.Date(2026, 3, 11, 7, 0, 0, 0, loc), 10 * time.Hour, nil, waiting("waiting: outside your hours (next window Wed 22:00)")},
			{time.Date(2026, 3, 14, 6, 0, 0, 0, loc), 80 * time.Hour, nil, computing(7, "computing on 7 of 8 cores")}, // Friday night
			{time.Date(2026, 3, 14, 23, 0, 0, 0, loc), 90 * time.Hour, nil, waiting("waiting: outside your hours (next window Mon 22:00)")},
		}},
		{"schedule across the spring-forward night", withSettings(func(s *Settings) {
			s.TimeZone = "Europe/Berlin"
			s.Schedule = Schedule{{Days: 1 << time.Sunday, Start: 2 * 60, End: 3 * 60}, {Days: 1 << time.Sunday, Start: 2*60 + 30, End: 5 * 60}}
		}), []step{
			// 02:00–03:00 does not exist on 29 March 2026; 02:30–05:00 opens when the clock jumps to 03:00.
			{time.Date(2026, 3, 29, 1, 59, 0, 0, loc), 0, nil, waiting("waiting: outside your hours (next window Sun 03:00)")},
			{time.Date(2026, 3, 29, 1, 59, 0, 0, loc).Add(time.Minute), time.Minute, nil, computing(7, "computing on 7 of 8 cores")},
			{time.Date(2026, 3, 29, 5, 0, 0, 0, loc), 3 * time.Hour, nil, waiting("waiting: outside your hours (next window 5 Apr 02:00)")},
		}},
		{"hung probes: unknown idle is not idle", Defaults(), []step{
			{tue2300, 0, func(s *Signals) { s.InputIdle = Reading[time.Duration]{Err: "logind: timed out after 500ms"} },
				waiting("waiting: idle time unknown (logind: timed out after 500ms)")},
			{tue2300, time.Second, func(s *Signals) { s.InputIdle = Reading[time.Duration]{} },
				waiting("waiting: idle time unknown (no input source works)")},
			{tue2300, 2 * time.Second, func(s *Signals) {
				s.InputIdle = Reading[time.Duration]{Err: "logind: no session bus; x11: no display; /dev/input: permission denied"}
			}, waiting("waiting: idle time unknown (no input source works)")},
		}},
		{"hung probes: unknown load, temperature, power and programs are said", withSettings(func(s *Settings) { s.PauseFor = []string{"game.exe"} }), []step{
			{tue2300, 0, func(s *Signals) {
				s.OtherCPUShare = Reading[float64]{Err: "timed out"}
				s.MaxTemperatureC = Reading[float64]{Err: "no sensors"}
				s.Power = Reading[Power]{Err: "timed out"}
				s.Running = Reading[[]string]{Err: "timed out"}
			}, computing(7, "computing on 7 of 8 cores; power state unknown: assuming AC; process list unknown: cannot check your pause-for programs; CPU temperature unknown: ceiling not applied; CPU load of other programs unknown")},
		}},
		{"hung probes: the last known power and programs hold", withSettings(func(s *Settings) { s.PauseFor = []string{"game.exe"} }), []step{
			{tue2300, 0, func(s *Signals) { s.Power.Value = Power{OnBattery: true, HasBattery: true, Percent: 43} }, waiting("waiting: on battery (43%)")},
			{tue2300, time.Second, func(s *Signals) { s.Power = Reading[Power]{Err: "timed out"} }, waiting("waiting: on battery (43%, last known)")},
			{tue2300, 2 * time.Second, func(s *Signals) { s.Running.Value = []string{"game.exe"} }, paused("paused: game.exe is running")},
			{tue2300, 3 * time.Second, func(s *Signals) { s.Running = Reading[[]string]{Err: "timed out"} },
				paused("paused: game.exe is running (last seen; the process list is unknown now)")},
		}},
		{"idle_for 0 ignores input, even unknown", withSettings(func(s *Settings) { s.IdleFor = 0 }), []step{
			{tue2300, 0, func(s *Signals) { s.InputIdle = Reading[time.Duration]{Err: "no input source works"} },
				computing(7, "computing on 7 of 8 cores; input idle time not required (idle_for 0)")},
		}},
		{"resuming after activity needs the full idle time again", Defaults(), []step{
			{tue2300, 0, nil, computing(7, "computing on 7 of 8 cores")},
			{tue2300.Add(time.Second), time.Second, idleFor(0), waiting("waiting: you were active 0 s ago; starting after 5 min idle")},
			{tue2300.Add(4 * time.Minute), 4 * time.Minute, idleFor(4*time.Minute - time.Second), waiting("waiting: you were active 3 min 59 s ago; starting after 5 min idle")},
			// A source that reports a longer idle time than seen does not cut the wait short.
			{tue2300.Add(5 * time.Minute), 5 * time.Minute, idleFor(time.Hour), waiting("waiting: you were active 4 min 59 s ago; starting after 5 min idle")},
			{tue2300.Add(5*time.Minute + time.Second), 5*time.Minute + time.Second, idleFor(5 * time.Minute), computing(7, "computing on 7 of 8 cores")},
		}},
		{"wall clock moved +30 days and back: the idle countdown holds", Defaults(), []step{
			{tue2300, 0, idleFor(0), waiting("waiting: you were active 0 s ago; starting after 5 min idle")},
			{tue2300.Add(30 * 24 * time.Hour), time.Minute, idleFor(30 * 24 * time.Hour), waiting("waiting: you were active 1 min ago; starting after 5 min idle")},
			{tue2300.Add(2 * time.Minute), 2 * time.Minute, idleFor(2 * time.Minute), waiting("waiting: you were active 2 min ago; starting after 5 min idle")},
			{tue2300.Add(5 * time.Minute), 5 * time.Minute, idleFor(5 * time.Minute), computing(7, "computing on 7 of 8 cores")},
		}},
		{"wall clock moved +30 days and back: the owner's pause holds", withSettings(func(s *Settings) { s.PausedUntil, s.TimeZone = tue2300.Add(time.Hour), "Europe/Berlin" }), []step{
			{tue2300, 0, nil, paused("paused by you until Wed 00:00")},
			{tue2300.Add(30 * 24 * time.Hour), time.Second, nil, paused("paused by you until 00:59")},
			{tue2300.Add(-30 * 24 * time.Hour), 2 * time.Second, nil, paused("paused by you until 23:59")},
			{tue2300.Add(-30 * 24 * time.Hour), 59*time.Minute + 59*time.Second, nil, paused("paused by you until 23:00")},
			{tue2300.Add(-30 * 24 * time.Hour), time.Hour, nil, computing(7, "computing on 7 of 8 cores")},
		}},
		{"owner's pause for an hour", withSettings(func(s *Settings) {
			s.PausedUntil, s.TimeZone = time.Date(2026, 3, 10, 14, 5, 0, 0, loc), "Europe/Berlin"
		}), []step{
			{time.Date(2026, 3, 10, 13, 5, 0, 0, loc), 0, nil, paused("paused by you until 14:05")},
			// The sample's wall clock read 50 ms before the monotonic one
			// (the sample took that long): the end still reads 14:05.
			{time.Date(2026, 3, 10, 13, 6, 0, 0, loc), time.Minute + 50*time.Millisecond, nil, paused("paused by you until 14:05")},
			{time.Date(2026, 3, 10, 14, 5, 0, 0, loc), time.Hour, nil, computing(7, "computing on 7 of 8 cores")},
		}},
		{"owner's pause until a far date shows its date, and its year when not this one", withSettings(func(s *Settings) {
			s.PausedUntil, s.TimeZone = time.Date(2027, 4, 15, 0, 0, 0, 0, loc), "Europe/Berlin"
		}), []step{
			{tue2300, 0, nil, paused("paused by you until 15 Apr 2027 00:00")},
		}},
		{"owner's pause until a date later this year shows its date", withSettings(func(s *Settings) {
			s.PausedUntil, s.TimeZone = time.Date(2026, 3, 30, 12, 0, 0, 0, loc), "Europe/Berlin"
		}), []step{
			{tue2300, 0, nil, paused("paused by you until 30 Mar 12:00")},
		}},
		{"a pause already over on the wall clock is no pause", withSettings(func(s *Settings) { s.PausedUntil = tue2300.Add(-time.Minute) }), []step{
			{tue2300, 0, nil, computing(7, "computing on 7 of 8 cores")},
		}},
		{"owner's pause comes before everything", withSettings(func(s *Settings) {
			s.PausedUntil, s.TimeZone = tue2300.Add(time.Hour), "Europe/Berlin"
			s.PauseFor = []string{"game.exe"}
		}), []step{
			{tue2300, 0, func(s *Signals) { s.Running.Value = []string{"game.exe"}; s.Power.Value.OnBattery = true }, paused("paused by you until Wed 00:00")},
		}},
		{"CPU above its ceiling waits until cooled by the margin", Defaults(), []step{
			{tue2300, 0, func(s *Signals) { s.MaxTemperatureC.Value = 91 }, waiting("waiting: CPU at 91 °C, ceiling 85 °C")},
			{tue2300, time.Second, func(s *Signals) { s.MaxTemperatureC.Value = 83 }, waiting("waiting: CPU at 83 °C, cooling to 80 °C (ceiling 85 °C)")},
			{tue2300, 2 * time.Second, func(s *Signals) { s.MaxTemperatureC.Value = 80 }, computing(7, "computing on 7 of 8 cores")},
			{tue2300, 3 * time.Second, func(s *Signals) { s.MaxTemperatureC.Value = 84 }, computing(7, "computing on 7 of 8 cores")},
		}},
		{"sustained load of other programs steps aside after the hold, resumes after the hold", Defaults(), []step{
			{tue2300, 0, nil, computing(7, "computing on 7 of 8 cores")},
			{tue2300, 1 * time.Second, func(s *Signals) { s.OtherCPUShare.Value = 0.9 }, computing(7, "computing on 7 of 8 cores")},
			{tue2300, 3 * time.Second, func(s *Signals) { s.OtherCPUShare.Value = 0.9 }, computing(7, "computing on 7 of 8 cores")},
			{tue2300, 4 * time.Second, func(s *Signals) { s.OtherCPUShare.Value = 0.9 }, waiting("waiting: other programs use 90% of the CPU, more than your 50%")},
			{tue2300, 5 * time.Second, func(s *Signals) { s.OtherCPUShare.Value = 0.2 }, waiting("waiting: other programs' CPU use fell to 20%; resuming after 3 s below 50%")},
			{tue2300, 8 * time.Second, func(s *Signals) { s.OtherCPUShare.Value = 0.2 }, computing(7, "computing on 7 of 8 cores")},
		}},
		{"load already high at start waits at once", Defaults(), []step{
			{tue2300, 0, func(s *Signals) { s.OtherCPUShare.Value = 0.75 }, waiting("waiting: other programs use 75% of the CPU, more than your 50%")},
		}},
		{"cores as a count", withSettings(func(s *Settings) { s.Cores = 6 }), []step{
			{tue2300, 0, nil, computing(6, "computing on 6 of 8 cores")},
		}},
		{"cores as a count above the machine's", withSettings(func(s *Settings) { s.Cores = 16 }), []step{
			{tue2300, 0, nil, computing(8, "computing on 8 of 8 cores")},
		}},
		{"cores as a share", withSettings(func(s *Settings) { s.CoresShare = 0.5 }), []step{
			{tue2300, 0, nil, computing(4, "computing on 4 of 8 cores")},
		}},
		{"a small share is still one core", withSettings(func(s *Settings) { s.CoresShare = 0.1 }), []step{
			{tue2300, 0, nil, computing(1, "computing on 1 of 8 cores")},
		}},
		{"one CPU: the default still computes on it", Defaults(), []step{
			{tue2300, 0, func(s *Signals) { s.CPUs = 1 }, computing(1, "computing on 1 of 1 cores")},
		}},
		{"outside hours comes before on battery", withSettings(nightsOnly), []step{
			{time.Date(2026, 3, 10, 12, 0, 0, 0, loc), 0, func(s *Signals) { s.Power.Value = Power{OnBattery: true, HasBattery: true, Percent: 43} },
				waiting("waiting: outside your hours (next window Tue 22:00)")},
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
					t.Errorf("step %d (%s, mono %s): decision (-want +got):\n%s", i, s.wall.Format(time.DateTime+" MST"), s.mono, diff)
				}
			}
		})
	}
}

// TestDecideCause: each reason for not computing carries its kind, and
// when it ends where that is known: the owner's pause and the next
// window exactly, the idle wait at the earliest.
func TestDecideCause(t *testing.T) {
	loc := berlin(t)
	tue1200 := time.Date(2026, 3, 10, 12, 0, 0, 0, loc) // a Tuesday
	nightsOnly := func(s *Settings) {
		s.TimeZone = "Europe/Berlin"
		s.Schedule = Schedule{{Days: EveryDay, Start: 22 * 60, End: 7 * 60}}
	}
	tests := []struct {
		name     string
		settings Settings
		sig      func(*Signals)
		cause    Cause
		until    time.Time
	}{
		{"computing", Defaults(), nil, CauseNone, time.Time{}},
		{"the owner's pause", withSettings(func(s *Settings) { s.PausedUntil = tue1200.Add(90 * time.Minute) }), nil,
			CausePaused, tue1200.Add(90 * time.Minute)},
		{"a listed program", withSettings(func(s *Settings) { s.PauseFor = []string{"blender"} }),
			func(s *Signals) { s.Running.Value = []string{"blender"} }, CauseProgram, time.Time{}},
		{"a game", withSettings(func(s *Settings) { s.PauseForSteam = true }),
			func(s *Signals) {
				s.Games = Reading[[]Game]{Known: true, Value: []Game{{Sign: GameSteam, What: "a Steam game"}}}
			}, CauseGame, time.Time{}},
		{"outside the hours", withSettings(nightsOnly), nil, CauseHours, time.Date(2026, 3, 10, 22, 0, 0, 0, loc)},
		{"on battery", Defaults(), func(s *Signals) { s.Power.Value = Power{OnBattery: true, HasBattery: true, Percent: 43} },
			CauseBattery, time.Time{}},
		{"too hot", withSettings(func(s *Settings) { s.MaxTemperatureC = 80 }), func(s *Signals) { s.MaxTemperatureC.Value = 90 },
			CauseHot, time.Time{}},
		{"the owner active", Defaults(), idleFor(time.Minute), CauseActive, tue1200.Add(DefaultIdleFor - time.Minute)},
		{"other programs busy", withSettings(func(s *Settings) { s.MaxOtherCPUShare = 0.1 }),
			func(s *Signals) { s.OtherCPUShare.Value = 0.9 }, CauseLoad, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sig := idleDesktop(tue1200)
			if tc.sig != nil {
				tc.sig(&sig)
			}
			d, _ := Decide(tc.settings, sig, tue1200, 0, PolicyState{})
			if d.Cause != tc.cause || !d.Until.Equal(tc.until) {
				t.Errorf("decision %q: cause %q until %v, want %q until %v", d.Reason, d.Cause, d.Until, tc.cause, tc.until)
			}
		})
	}
}

// TestDecideLoadSpikes: a CPU spike of up to 2 seconds every 30 s,
// sampled every second (so a 2-second spike is seen by three samples),
// causes no pause and no resume.
func TestDecideLoadSpikes(t *testing.T) {
	loc := berlin(t)
	start := time.Date(2026, 3, 10, 23, 0, 0, 0, loc)
	for _, spike := range []time.Duration{time.Second, 2 * time.Second} {
		t.Run(fmt.Sprintf("spike of %s", spike), func(t *testing.T) {
			var st PolicyState
			for sec := range 300 {
				mono := time.Duration(sec) * time.Second
				sig := idleDesktop(start.Add(mono))
				if off := mono % (30 * time.Second); off >= 10*time.Second && off <= 10*time.Second+spike {
					sig.OtherCPUShare.Value = 1
				}
				var d Decision
				d, st = Decide(Defaults(), sig, start.Add(mono), mono, st)
				if !d.Run() {
					t.Fatalf("at %s: %s", mono, d.Reason)
				}
			}
		})
	}
}

func TestPolicyStateFreshOnEarlierMono(t *testing.T) {
	at := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	sig := idleDesktop(at)
	sig.InputIdle.Value = 0
	_, st := Decide(Defaults(), sig, at, time.Hour, PolicyState{})
	// Another process's clock: the remembered activity means nothing.
	d, _ := Decide(Defaults(), idleDesktop(at), at, time.Minute, st)
	if !d.Run() {
		t.Errorf("after a restart with a new monotonic clock: %s", d.Reason)
	}
}

func TestPauseOver(t *testing.T) {
	at := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	s := withSettings(func(s *Settings) { s.PausedUntil = at.Add(time.Minute) })
	_, st := Decide(s, idleDesktop(at), at, 0, PolicyState{})
	if st.PauseOver {
		t.Error("PauseOver during the pause")
	}
	_, st = Decide(s, idleDesktop(at), at, time.Minute, st)
	if !st.PauseOver {
		t.Error("PauseOver false after the pause")
	}
}

func TestClockText(t *testing.T) {
	now := time.Date(2026, 12, 31, 23, 0, 0, 0, time.UTC) // a Thursday
	for _, tc := range []struct {
		t    time.Time
		want string
	}{
		{now.Add(30 * time.Minute), "23:30"},
		{now.Add(2 * time.Hour), "Fri 01:00"},
		{now.Add(5 * 24 * time.Hour), "Tue 23:00"},
		{now.Add(9 * 24 * time.Hour), "9 Jan 2027 23:00"},
		{now.Add(-24 * time.Hour), "30 Dec 23:00"},
		{time.Date(2126, 12, 31, 23, 0, 0, 0, time.UTC), "31 Dec 2126 23:00"},
	} {
		if got := ClockText(tc.t, now); got != tc.want {
			t.Errorf("ClockText(%s) = %q, want %q", tc.t, got, tc.want)
		}
	}
}

func TestDurationText(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second:                      "0 s",
		40*time.Second + time.Millisecond: "40 s",
		3 * time.Minute:                   "3 min",
		3*time.Minute + 12*time.Second:    "3 min 12 s",
		time.Hour:                         "1 h",
		65*time.Minute + 59*time.Second:   "1 h 5 min",
	} {
		if got := DurationText(d); got != want {
			t.Errorf("DurationText(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestPolicy(t *testing.T) {
	p := NewPolicy(Defaults())
	at := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	sig := idleDesktop(at)
	if d := p.Decide(sig, at); !d.Run() {
		t.Fatalf("idle desktop: %s", d.Reason)
	}
	sig.InputIdle.Value = 0
	if d := p.Decide(sig, at); d.Run() {
		t.Fatalf("after input: %s", d.Reason)
	}
	// The wall clock jumps a month; the remembered input still counts.
	sig.InputIdle.Value = 30 * 24 * time.Hour
	if d := p.Decide(sig, at.AddDate(0, 1, 0)); d.Run() {
		t.Fatalf("after a wall-clock jump: %s", d.Reason)
	}
	p.SetSettings(withSettings(func(s *Settings) { s.IdleFor = 0 }))
	if d := p.Decide(sig, at); !d.Run() {
		t.Fatalf("idle_for 0: %s", d.Reason)
	}
	if !p.State().Seen {
		t.Error("State not kept")
	}
}

// DecideAlways computes on every slot whatever the settings' hours,
// pause and cores say, and on the enabled GPUs under the per-GPU rules:
// GPU 0 is used by another process, GPU 1 is free until it passes its
// ceiling, and stays skipped until it is TemperatureMarginC under it.
func TestDecideAlways(t *testing.T) {
	now := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	s := withSettings(func(s *Settings) {
		s.Cores = 1
		s.Schedule, _ = ParseSchedule("mon 09:00-10:00")
		s.PausedUntil = now.Add(time.Hour)
	})
	var sig Signals // no input, load, power or temperature known
	for _, tc := range []struct {
		slots int
		want  string
	}{{4, "computing on 4 slots (no idle policy)"}, {1, "computing on 1 slot (no idle policy)"}, {0, "computing on 1 slot (no idle policy)"}} {
		d, _ := DecideAlways(s, sig, tc.slots, PolicyState{})
		if d.State != StateComputing || d.Cores != max(tc.slots, 1) || d.Reason != tc.want || len(d.GPUs) != 0 {
			t.Errorf("%d slots, no GPU enabled: %+v, want computing on all with reason %q", tc.slots, d, tc.want)
		}
	}

	s.GPUs = map[string]GPUSettings{"GPU-aaa": {Use: true}, "GPU-bbb": {Use: true, MaxTemperatureC: 80}, "GPU-ccc": {Use: true}}
	if d, _ := DecideAlways(s, sig, 2, PolicyState{}); d.State != StateComputing || len(d.GPUs) != 0 ||
		d.Reason != "computing on 2 slots (no idle policy); no usable GPU (GPUs unknown): CPU only" {
		t.Errorf("GPUs unknown: %+v", d)
	}
	twoGPUs(&sig)
	d, st := DecideAlways(s, sig, 2, PolicyState{})
	if !slices.Equal(d.GPUs, []string{"GPU-bbb"}) ||
		d.Reason != "computing on 2 slots and GPU 1 (no idle policy); GPU 0 skipped: another process uses 90% of it; GPU GPU-ccc not found" {
		t.Errorf("two GPUs: %+v", d)
	}
	sig.GPUs.Value[1].TemperatureC = 85
	if d, st = DecideAlways(s, sig, 2, st); len(d.GPUs) != 0 || !strings.Contains(d.Reason, "GPU 1 skipped: 85 °C, ceiling 80 °C") {
		t.Errorf("GPU 1 past its ceiling: %+v", d)
	}
	sig.GPUs.Value[1].TemperatureC = 80 - TemperatureMarginC + 1
	if d, st = DecideAlways(s, sig, 2, st); len(d.GPUs) != 0 {
		t.Errorf("GPU 1 under its ceiling by less than the margin: %+v, want still skipped", d)
	}
	sig.GPUs.Value[1].TemperatureC = 80 - TemperatureMarginC
	if d, _ = DecideAlways(s, sig, 2, st); !slices.Equal(d.GPUs, []string{"GPU-bbb"}) {
		t.Errorf("GPU 1 cooled by the margin: %+v, want it used again", d)
	}
}
