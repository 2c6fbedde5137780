package agent

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
	_ "time/tzdata"

	"idlepool/energy"
	"idlepool/idle"
	"idlepool/store"
	"idlepool/worker"
)

// The donor's energy caps count what the local store recorded since the
// start of the day and the month in the owner's zone: a cap pauses once
// reached, says so, and lifts the next day.
func TestDonorPolicyEnergyCaps(t *testing.T) {
	ctx := context.Background()
	local, err := store.OpenLocal(filepath.Join(t.TempDir(), "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	s := idle.Defaults()
	s.TimeZone, s.EnergyDayKWh, s.EnergyMonthKWh, s.IdleFor = "Europe/Berlin", 1, 2.9, 0
	if err := local.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	p := newDonorPolicy(local, nil, slog.New(slog.DiscardHandler))
	p.settings = s
	add := func(lease string, end time.Time, kWh float64) {
		t.Helper()
		err := local.AddEnergy(ctx, store.TaskEnergy{Lease: lease, Pool: "http://p", Usage: energy.Usage{
			Start: end.Add(-time.Hour), End: end, CPU: energy.Figure{Joules: kWh * energy.JoulesPerKWh, How: energy.Measured}}})
		if err != nil {
			t.Fatal(err)
		}
		p.energyAdded()
	}
	// 23:30 in Berlin on 9 June is 21:30 UTC: yesterday's, not today's.
	add("l1", time.Date(2026, 6, 9, 23, 30, 0, 0, loc), 0.9)
	add("l2", time.Date(2026, 6, 10, 8, 0, 0, 0, loc), 0.6)
	now := time.Date(2026, 6, 10, 12, 0, 0, 0, loc)
	decide := func(now time.Time) idle.Decision {
		sig := idle.Signals{At: now, CPUs: 4, OtherCPUShare: idle.Reading[float64]{Known: true},
			Power: idle.Reading[idle.Power]{Known: true}, EnergyUsed: p.readEnergyUsed(ctx, now)}
		d, _ := idle.Decide(s, sig, now, time.Hour, idle.PolicyState{})
		return d
	}
	got := p.readEnergyUsed(ctx, now)
	if !got.Known || !near(got.Value.DayKWh, 0.6) || !near(got.Value.MonthKWh, 1.5) {
		t.Errorf("energy used = %+v, want 0.6 kWh today and 1.5 this month", got)
	}
	if d := decide(now); d.State != idle.StateComputing {
		t.Errorf("under the caps: %s %q", d.State, d.Reason)
	}
	add("l3", time.Date(2026, 6, 10, 11, 0, 0, 0, loc), 0.5)
	if d := decide(now); d.State != idle.StatePaused || !strings.Contains(d.Reason, "paused: today's 1 kWh are used") {
		t.Errorf("day cap reached: %s %q", d.State, d.Reason)
	}
	p.energyAdded() // a new day: read again
	tomorrow := time.Date(2026, 6, 11, 0, 5, 0, 0, loc)
	if d := decide(tomorrow); d.State != idle.StateComputing {
		t.Errorf("the next day: %s %q, want computing again", d.State, d.Reason)
	}
	add("l4", time.Date(2026, 6, 11, 0, 10, 0, 0, loc), 0.95)
	if d := decide(tomorrow.Add(10 * time.Minute)); d.State != idle.StatePaused || !strings.Contains(d.Reason, "this month's 2.9 kWh are used") {
		t.Errorf("month cap reached: %s %q", d.State, d.Reason)
	}
}

func near(a, b float64) bool { return a > b-1e-9 && a < b+1e-9 }

func TestEnergyStatusWords(t *testing.T) {
	r, err := energy.OpenRAPL(denyAll{})
	if r != nil || err == nil {
		t.Fatalf("OpenRAPL of a closed tree = %v, %v", r, err)
	}
	m := energy.NewMeter(energy.Config{CPUProblem: err})
	got := energyStatus(m).Words()
	for _, want := range []string{"no task runs", "estimated from CPU time", "permission denied", "usermod -aG idlepool"} {
		if !strings.Contains(got, want) {
			t.Errorf("Words = %q, lacks %q", got, want)
		}
	}
	if got := (EnergyStatus{PowerW: 42.14, How: energy.Measured, CPU: energy.Measured}).Words(); got != "the tasks add 42.1 W now; the CPU's energy is measured" {
		t.Errorf("Words = %q", got)
	}
	held := EnergyStatus{PowerW: 100, How: energy.Sampled, CPU: energy.Measured, GPUHeld: &GPUHold{CeilingW: 150, Share: 0.5, FullW: 250}}
	if got, want := held.Words(), "the tasks add 100 W now (sampled); GPU held at 150 W of ~250 W (tasks run 50% of the time); the CPU's energy is measured"; got != want {
		t.Errorf("Words = %q, want %q", got, want)
	}
}

// denyAll is a powercap tree with one package whose files the kernel
// refuses to a donor who is not root.
type denyAll struct{}

func (denyAll) Open(name string) (fs.File, error) {
	if name == "." {
		return fstest.MapFS{"intel-rapl:0/energy_uj": {}}.Open(".")
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
}

// A task suspended by an energy limit is predicted to wait until the
// limit ends, so that it is handed back when that is too long.
func TestPredictPauseEnergyLimits(t *testing.T) {
	now := time.Date(2026, 6, 10, 19, 0, 0, 0, time.UTC)
	for cause, words := range map[idle.Cause]string{idle.CauseEnergy: "your energy cap is reached until",
		idle.CausePrice: "electricity above your price until", idle.CauseQuiet: "your quiet hours until"} {
		d := idle.Decision{State: idle.StatePaused, Cause: cause, Until: now.Add(5 * time.Hour)}
		p, ok := PredictPause(d, now, time.Minute, NewOwnerPattern(nil))
		if !ok || p.Left != 5*time.Hour || !strings.Contains(p.Words, words) {
			t.Errorf("%s: %+v, %v; want 5h left, %q", cause, p, ok, words)
		}
	}
}

// steadyGPU is a board whose power reading the test sets.
type steadyGPU struct{ powerW float64 }

func (g *steadyGPU) ReadGPUs(uuids []string) ([]energy.GPUReading, error) {
	out := make([]energy.GPUReading, len(uuids))
	for i, u := range uuids {
		out[i] = energy.GPUReading{UUID: u, PowerW: g.powerW, HasPower: true}
	}
	return out, nil
}

// steadyMeter is a meter on its own clock of a GPU task on a steadyGPU,
// its first reading the board at rest (50 W), and read, which sets the
// board's draw in watts, moves the clock 10 s and takes a reading.
func steadyMeter(t *testing.T) (*energy.Meter, func(w float64)) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	gpu := &steadyGPU{powerW: 50}
	meter := energy.NewMeter(energy.Config{GPUs: gpu, Period: time.Hour, Now: func() time.Time { return now }})
	task := meter.Start([]string{"GPU-x"})
	t.Cleanup(func() { task.Stop(0) })
	return meter, func(w float64) {
		gpu.powerW = w
		now = now.Add(10 * time.Second)
		meter.Start(nil).Stop(0)
	}
}

// The GPU power ceiling's duty cycle steps once per reading of the
// meter: a second step on the reading the first was taken on would count
// the old share's draw as the new share's, and halve the share again
// (250 W at rest 50 W and a 150 W ceiling: 0.5, then 0.25). When the
// donor syncs more often than the meter reads (an agent ending, the
// owner's change), that held the GPU far under its ceiling.
func TestGPUDutyStepsOncePerReading(t *testing.T) {
	meter, read := steadyMeter(t)
	ex := &hookThrottler{}
	d := &Donor{cfg: DonorConfig{Energy: meter, GPUs: noGPUs{}, Executor: ex}, log: slog.New(slog.DiscardHandler)}
	s := idle.Defaults()
	s.GPUPowerW = 150
	step := func(want float64, why string) {
		t.Helper()
		d.throttle(s)
		if got := ex.share; !near(got, want) {
			t.Errorf("%s: share %g, want %g", why, got, want)
		}
	}
	read(250)
	step(0.5, "250 W at full speed")
	step(0.5, "no reading since")
	step(0.5, "no reading since, again")
	if d.gpuHeld == nil || d.gpuHeld.Share != 0.5 || d.gpuHeld.FullW != 250 {
		t.Errorf("the hold between readings = %+v, want a share of 0.5 of ~250 W", d.gpuHeld)
	}
	read(150)
	step(0.5, "150 W at half speed: at the ceiling")
	read(100)
	step(1, "100 W at half speed: room for all of it")
	if d.gpuHeld != nil {
		t.Errorf("held at full speed: %+v", *d.gpuHeld)
	}
}

// hookThrottler is a Throttler whose SetCPUShare first calls onSet, as a
// reading the meter takes while the new share is being applied.
type hookThrottler struct {
	share float64
	onSet func()
}

func (h *hookThrottler) Run(context.Context, worker.Request) (worker.Result, error) {
	return worker.Result{}, errors.New("runs nothing")
}

func (h *hookThrottler) SetCPUShare(s float64) error {
	if h.onSet != nil {
		h.onSet()
	}
	h.share = s
	return nil
}

func (h *hookThrottler) SetPriority(worker.Priority) error { return nil }

// A reading the meter takes while a step is being applied still shows
// the old share's draw: the next step waits for a reading taken after
// the step was applied (on the meter's clock), not merely one newer
// than the reading it was computed from.
func TestGPUDutyWaitsForAReadingAfterTheStep(t *testing.T) {
	meter, read := steadyMeter(t)
	ex := &hookThrottler{}
	d := &Donor{cfg: DonorConfig{Energy: meter, GPUs: noGPUs{}, Executor: ex}, log: slog.New(slog.DiscardHandler)}
	s := idle.Defaults()
	s.GPUPowerW = 150
	read(250)
	ex.onSet = func() { read(250) } // taken as the step to 0.5 is applied: the old draw
	d.throttle(s)
	ex.onSet = nil
	if !near(ex.share, 0.5) {
		t.Fatalf("first step: share %g, want 0.5", ex.share)
	}
	d.throttle(s)
	if !near(ex.share, 0.5) {
		t.Errorf("on the reading taken while the step was applied: share %g, want 0.5 held", ex.share)
	}
	read(150)
	d.throttle(s)
	if !near(ex.share, 0.5) {
		t.Errorf("150 W at half speed: share %g, want 0.5", ex.share)
	}
}
