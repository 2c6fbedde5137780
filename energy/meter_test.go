package energy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeHost is a fake powercap, proc and PCI tree in a temporary
// directory, with a clock the test moves.
type fakeHost struct {
	t                   *testing.T
	powercap, proc, pci string
	now                 time.Time
	busyTicks           uint64
	pidTicks            map[int]uint64
}

func newFakeHost(t *testing.T, zones ...uint64) *fakeHost {
	t.Helper()
	dir := t.TempDir()
	h := &fakeHost{t: t, powercap: filepath.Join(dir, "powercap"), proc: filepath.Join(dir, "proc"), pci: filepath.Join(dir, "pci"),
		now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC), pidTicks: map[int]uint64{}}
	for i, maxUJ := range zones {
		z := filepath.Join(h.powercap, fmt.Sprintf("intel-rapl:%d", i))
		h.write(filepath.Join(z, "max_energy_range_uj"), maxUJ)
		h.write(filepath.Join(z, "energy_uj"), 0)
		h.write(filepath.Join(z, "name"), "package-"+fmt.Sprint(i))
		// A sub-zone (the cores) is part of the package: never added.
		h.write(filepath.Join(h.powercap, fmt.Sprintf("intel-rapl:%d:0", i), "energy_uj"), 999)
	}
	h.writeProc()
	return h
}

func (h *fakeHost) write(path string, v any) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(path, fmt.Appendf(nil, "%v\n", v), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

func (h *fakeHost) setEnergy(zone int, uj uint64) {
	h.write(filepath.Join(h.powercap, fmt.Sprintf("intel-rapl:%d", zone), "energy_uj"), uj)
}

func (h *fakeHost) energy(zone int) uint64 {
	b, err := os.ReadFile(filepath.Join(h.powercap, fmt.Sprintf("intel-rapl:%d", zone), "energy_uj"))
	if err != nil {
		h.t.Fatal(err)
	}
	var v uint64
	fmt.Sscan(string(b), &v)
	return v
}

// step moves the clock by d and the counters by joules of zone 0, busy
// seconds of all CPUs and, per PID, seconds of that process.
func (h *fakeHost) step(d time.Duration, joules float64, busy float64, pids map[int]float64) {
	h.now = h.now.Add(d)
	if joules != 0 {
		h.setEnergy(0, h.energy(0)+uint64(joules*1e6))
	}
	h.busyTicks += uint64(busy * userHZ)
	for pid, s := range pids {
		h.pidTicks[pid] += uint64(s * userHZ)
	}
	h.writeProc()
}

func (h *fakeHost) writeProc() {
	// user nice system idle iowait irq softirq steal guest guest_nice
	h.write(filepath.Join(h.proc, "stat"), fmt.Sprintf("cpu  %d 0 0 123456 77 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10", h.busyTicks))
	for pid, ticks := range h.pidTicks {
		u, s := ticks*3/4, ticks-ticks*3/4
		h.write(filepath.Join(h.proc, fmt.Sprint(pid), "stat"),
			fmt.Sprintf("%d (idlepool worker) S 1 1 1 0 -1 4194560 100 0 0 0 %d %d 0 0 39 19 5 0 100 1000 100", pid, u, s))
	}
}

func (h *fakeHost) pids() []int {
	var out []int
	for pid := range h.pidTicks {
		out = append(out, pid)
	}
	return out
}

func (h *fakeHost) meter(t *testing.T, gpus GPUReader) *Meter {
	t.Helper()
	var r *RAPL
	if _, err := os.Stat(h.powercap); err == nil {
		var err error
		if r, err = OpenRAPL(os.DirFS(h.powercap)); err != nil {
			t.Fatal(err)
		}
	}
	m := NewMeter(Config{RAPL: r, GPUs: gpus, PCIRoot: h.pci, Proc: h.proc, PIDs: h.pids, CPUs: 8, RatedW: 80,
		Now: func() time.Time { return h.now }})
	m.mu.Lock()
	m.sampleLocked() // what Serve does first: a reading to measure the baseline against
	m.mu.Unlock()
	return m
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*max(1, math.Abs(b)) }

func checkFigure(t *testing.T, what string, got Figure, joules float64, how How) {
	t.Helper()
	if !near(got.Joules, joules) || got.How != how {
		t.Errorf("%s = %.6f J %s, want %.6f J %s", what, got.Joules, got.How, joules, how)
	}
}

func TestCounterDelta(t *testing.T) {
	tests := []struct {
		name               string
		prev, cur, maxV, w uint64
	}{
		{"forward", 100, 250, 1000, 150},
		{"wrapped", 900, 50, 999, 150},
		{"wrapped at the top", 999, 0, 999, 1},
		{"no range known: a reset", 900, 50, 0, 50},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CounterDelta(tc.prev, tc.cur, tc.maxV); got != tc.w {
				t.Errorf("CounterDelta(%d, %d, %d) = %d, want %d", tc.prev, tc.cur, tc.maxV, got, tc.w)
			}
		})
	}
}

// denyFS refuses to open one file, as the kernel refuses a donor who is
// not root the powercap counters since Linux 5.10.
type denyFS struct {
	fs.FS
	deny string
}

func (d denyFS) Open(name string) (fs.File, error) {
	if strings.HasSuffix(name, d.deny) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	return d.FS.Open(name)
}

func TestOpenRAPL(t *testing.T) {
	h := newFakeHost(t, 262143328850, 262143328850)
	r, err := OpenRAPL(os.DirFS(h.powercap))
	if err != nil {
		t.Fatal(err)
	}
	if r.Zones() != 2 {
		t.Errorf("zones = %d, want 2 (the sub-zones are parts of a package)", r.Zones())
	}

	_, err = OpenRAPL(denyFS{os.DirFS(h.powercap), "energy_uj"})
	var ue *UnreadableError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnreadable) {
		t.Fatalf("unreadable counter: err = %v, want an *UnreadableError", err)
	}
	if !strings.Contains(ue.Error(), "/sys/class/powercap/intel-rapl:0/energy_uj") || !strings.Contains(ue.Hint(), "usermod -aG idlepool") {
		t.Errorf("unreadable counter says %q, hint %q: want the path and how to fix it", ue.Error(), ue.Hint())
	}

	if _, err := OpenRAPL(os.DirFS(t.TempDir())); !errors.Is(err, ErrNoCounter) {
		t.Errorf("no zone: err = %v, want ErrNoCounter", err)
	}
	if _, err := OpenRAPL(os.DirFS(filepath.Join(t.TempDir(), "none"))); !errors.Is(err, ErrNoCounter) {
		t.Errorf("no powercap: err = %v, want ErrNoCounter", err)
	}
}

// Two tasks at once, beside another program's load: the package's energy
// above the idle baseline splits by CPU time.
func TestMeterTwoTasksAndOtherLoad(t *testing.T) {
	h := newFakeHost(t, 1<<40)
	h.pidTicks[11], h.pidTicks[12] = 0, 0
	h.writeProc()
	m := h.meter(t, nil)

	// Nothing of ours runs: 10 W, with another program busy 1 s.
	h.step(10*time.Second, 100, 1, nil)
	a := m.Start(nil)
	b := m.Start(nil)
	// Both tasks: 100 J of baseline and 300 J above it; the CPUs were
	// busy 10 s, 4 s each of ours and 2 s of another program.
	h.step(10*time.Second, 400, 10, map[int]float64{11: 4, 12: 4})
	ua := a.Stop(11)
	if w, how := m.Power(); !near(w, 24) || how != Measured {
		t.Errorf("power while B runs = %g W %s, want 24 W measured (240 J of ours over 10 s)", w, how)
	}
	// B alone: 150 J above the baseline, all its own.
	h.step(10*time.Second, 250, 5, map[int]float64{12: 5})
	ub := b.Stop(12)

	checkFigure(t, "task A", ua.CPU, 120, Measured)
	checkFigure(t, "task B", ub.CPU, 120+150, Measured)
	if ua.End.Sub(ua.Start) != 10*time.Second || ub.End.Sub(ub.Start) != 20*time.Second {
		t.Errorf("spans %s and %s, want 10s and 20s", ua.End.Sub(ua.Start), ub.End.Sub(ub.Start))
	}
	if w, how := m.Power(); w != 0 || how != "" {
		t.Errorf("power with no task = %g %q, want 0", w, how)
	}
}

// A package counter that wraps past max_energy_range_uj between samples.
func TestMeterCounterWraps(t *testing.T) {
	const maxUJ = 262143328850 // a real package's range
	h := newFakeHost(t, maxUJ)
	h.setEnergy(0, maxUJ-50_000_000) // 50 J below the top
	h.pidTicks[7] = 0
	h.writeProc()
	m := h.meter(t, nil)
	task := m.Start(nil)
	h.now = h.now.Add(10 * time.Second)
	h.setEnergy(0, 30_000_000-1) // wrapped: 50 J to the top, 30 J after
	h.busyTicks += 10 * userHZ
	h.pidTicks[7] += 10 * userHZ
	h.writeProc()
	checkFigure(t, "wrapped task", task.Stop(7).CPU, 80, Measured)
}

// A counter that becomes unreadable while a task runs: the rest of the
// task is estimated, and so is the task as a whole.
func TestMeterCounterUnreadableMidTask(t *testing.T) {
	h := newFakeHost(t, 1<<40)
	h.pidTicks[7] = 0
	h.writeProc()
	m := h.meter(t, nil)
	task := m.Start(nil)
	h.step(10*time.Second, 100, 2, map[int]float64{7: 2}) // 100 J, all ours
	m.mu.Lock()
	m.sampleLocked()
	m.mu.Unlock()
	if how, err := m.CPUHow(); how != Measured || err != nil {
		t.Fatalf("CPUHow = %s, %v; want measured", how, err)
	}
	zone := filepath.Join(h.powercap, "intel-rapl:0", "energy_uj")
	if err := os.Remove(zone); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(zone, 0o755); err != nil { // reads fail from now on
		t.Fatal(err)
	}
	h.now = h.now.Add(10 * time.Second)
	h.pidTicks[7] += 4 * userHZ
	h.busyTicks += 4 * userHZ
	h.writeProc()
	u := task.Stop(7)
	// 100 J measured, then 4 CPU seconds at 80 W / 8 CPUs.
	checkFigure(t, "task", u.CPU, 100+4*10, Estimated)
	if how, err := m.CPUHow(); how != Estimated || err == nil {
		t.Errorf("CPUHow = %s, %v; want estimated with the reason", how, err)
	}
}

// With no counter at all, a task is its CPU time at the rated power per
// core; with no CPU times either (not Linux), its span on one core.
func TestMeterEstimates(t *testing.T) {
	h := newFakeHost(t) // no powercap zone
	if err := os.RemoveAll(h.powercap); err != nil {
		t.Fatal(err)
	}
	h.pidTicks[7] = 0
	h.writeProc()
	m := h.meter(t, nil)
	task := m.Start(nil)
	h.step(30*time.Second, 0, 5, map[int]float64{7: 3})
	checkFigure(t, "task from CPU time", task.Stop(7).CPU, 3*10, Estimated)

	m.cfg.Proc = ""
	task = m.Start(nil)
	h.now = h.now.Add(30 * time.Second)
	checkFigure(t, "task from its span", task.Stop(7).CPU, 30*10, Estimated)
}

// fakeGPUs is a GPUReader whose readings the test sets; calls counts the
// reads.
type fakeGPUs struct {
	readings map[string]GPUReading
	calls    atomic.Int64
}

func (f *fakeGPUs) ReadGPUs(uuids []string) ([]GPUReading, error) {
	f.calls.Add(1)
	var out []GPUReading
	for _, u := range uuids {
		if r, ok := f.readings[u]; ok {
			out = append(out, r)
		}
	}
	return out, nil
}

func TestMeterGPUs(t *testing.T) {
	h := newFakeHost(t, 1<<40)
	h.pidTicks[7] = 0
	h.writeProc()
	// An awake NVIDIA GPU and its audio function, which is never asleep.
	h.write(filepath.Join(h.pci, "0000:01:00.0", "vendor"), "0x10de")
	h.write(filepath.Join(h.pci, "0000:01:00.0", "class"), "0x030000")
	h.write(filepath.Join(h.pci, "0000:01:00.0", "power", "runtime_status"), "active")
	g := &fakeGPUs{readings: map[string]GPUReading{
		"GPU-counter": {UUID: "GPU-counter", EnergyMJ: 5_000_000, HasEnergy: true, PowerW: 20, HasPower: true},
		"GPU-power":   {UUID: "GPU-power", PowerW: 15, HasPower: true},
	}}
	m := h.meter(t, g)
	task := m.Start([]string{"GPU-counter", "GPU-power"})
	h.step(10*time.Second, 0, 1, map[int]float64{7: 1})
	g.readings["GPU-counter"] = GPUReading{UUID: "GPU-counter", EnergyMJ: 5_000_000 + 2_200_000, HasEnergy: true, PowerW: 250, HasPower: true}
	g.readings["GPU-power"] = GPUReading{UUID: "GPU-power", PowerW: 115, HasPower: true}
	u := task.Stop(7)
	if len(u.GPUs) != 2 {
		t.Fatalf("GPUs = %+v, want two", u.GPUs)
	}
	// 2200 J counted, less 20 W idle for 10 s; (15+115)/2 W for 10 s, less
	// 15 W idle.
	checkFigure(t, "GPU with a counter", u.GPUs[0].Figure, 2200-200, Measured)
	checkFigure(t, "GPU with power readings", u.GPUs[1].Figure, 650-150, Sampled)
	if u.How() != Sampled {
		t.Errorf("task How = %s, want sampled (its least exact part)", u.How())
	}
	if !near(u.Joules(), u.CPU.Joules+2000+500) {
		t.Errorf("Joules = %g, want the sum of its parts", u.Joules())
	}
}

// A laptop's GPU asleep in runtime suspend is never asked: NVML would
// wake it.
func TestMeterLeavesSleepingGPUAlone(t *testing.T) {
	h := newFakeHost(t, 1<<40)
	h.write(filepath.Join(h.pci, "0000:01:00.0", "vendor"), "0x10de")
	h.write(filepath.Join(h.pci, "0000:01:00.0", "class"), "0x030200")
	h.write(filepath.Join(h.pci, "0000:01:00.0", "power", "runtime_status"), "suspended")
	h.write(filepath.Join(h.pci, "0000:00:02.0", "vendor"), "0x8086") // the integrated GPU, awake
	h.write(filepath.Join(h.pci, "0000:00:02.0", "class"), "0x030000")
	h.write(filepath.Join(h.pci, "0000:00:02.0", "power", "runtime_status"), "active")
	g := &fakeGPUs{readings: map[string]GPUReading{"GPU-laptop": {UUID: "GPU-laptop", PowerW: 5, HasPower: true}}}
	m := h.meter(t, g)
	task := m.Start(nil) // a CPU task: no GPU is ever read
	h.step(10*time.Second, 10, 0, nil)
	task.Stop(0)
	task = m.Start([]string{"GPU-laptop"}) // asleep: not read either
	h.step(10*time.Second, 10, 0, nil)
	u := task.Stop(0)
	if g.calls.Load() != 0 {
		t.Errorf("the sleeping GPU was read %d times", g.calls.Load())
	}
	if len(u.GPUs) != 0 {
		t.Errorf("GPUs = %+v, want none measured", u.GPUs)
	}
	h.write(filepath.Join(h.pci, "0000:01:00.0", "power", "runtime_status"), "active")
	task = m.Start([]string{"GPU-laptop"})
	task.Stop(0)
	if g.calls.Load() == 0 {
		t.Error("the GPU awake was not read")
	}
}

// At rest Serve reads nothing but a baseline pair an hour; while a task
// runs it samples every Period.
func TestMeterServeSamplesOnlyWhileTasksRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t, 1<<40)
		g := &fakeGPUs{readings: map[string]GPUReading{"GPU-x": {UUID: "GPU-x", PowerW: 5, HasPower: true}}}
		m := NewMeter(Config{GPUs: g, Proc: h.proc, Period: 10 * time.Second})
		ctx, cancel := contextWithCancel(t)
		done := make(chan error)
		go func() { done <- m.Serve(ctx) }()
		time.Sleep(3 * time.Hour)
		synctest.Wait()
		if g.calls.Load() != 0 {
			t.Errorf("GPU read %d times with no task", g.calls.Load())
		}
		task := m.Start([]string{"GPU-x"})
		before := g.calls.Load()
		time.Sleep(100 * time.Second)
		synctest.Wait()
		if n := g.calls.Load() - before; n < 9 || n > 11 {
			t.Errorf("%d reads in 100 s of a task, want about 10", n)
		}
		task.Stop(0)
		after := g.calls.Load()
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if g.calls.Load() != after {
			t.Errorf("GPU read %d times after the task ended", g.calls.Load()-after)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}
	})
}

// A solo run meters all its workers together.
func TestMeterStopAll(t *testing.T) {
	h := newFakeHost(t, 1<<40)
	h.pidTicks[11], h.pidTicks[12] = 0, 0
	h.writeProc()
	m := h.meter(t, nil)
	h.step(10*time.Second, 50, 0, nil) // 5 W at rest
	run := m.Start(nil)
	h.step(10*time.Second, 50+200, 8, map[int]float64{11: 3, 12: 3})
	h.step(10*time.Second, 50+100, 4, map[int]float64{11: 2, 12: 2})
	// 150 of 200 J above the baseline, then all 100.
	checkFigure(t, "run", run.StopAll().CPU, 150+100, Measured)
	if u := run.StopAll(); u.CPU.Joules != 0 {
		t.Errorf("second StopAll = %+v, want zero", u)
	}
}

// memBaselines is a BaselineStore in memory that behaves like the local
// store's: it keeps what was saved last.
type memBaselines struct {
	mu    sync.Mutex
	b     Baseline
	saves int
}

func (s *memBaselines) LoadBaseline(context.Context) (Baseline, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b, nil
}

func (s *memBaselines) get() (Baseline, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b, s.saves
}

func (s *memBaselines) SaveBaseline(_ context.Context, b Baseline) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b, s.saves = b, s.saves+1
	return nil
}

// Serve stores the baseline once it measured it at rest, and again only
// when it changes; a stored baseline older than BaselineMaxAge is not
// trusted by the next meter.
func TestMeterServeStoresTheBaseline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newFakeHost(t, 1<<40)
		r, err := OpenRAPL(os.DirFS(h.powercap))
		if err != nil {
			t.Fatal(err)
		}
		s := &memBaselines{}
		m := NewMeter(Config{RAPL: r, Proc: h.proc, Period: 10 * time.Second, Baselines: s})
		ctx, cancel := contextWithCancel(t)
		done := make(chan error)
		go func() { done <- m.Serve(ctx) }()
		synctest.Wait()
		h.setEnergy(0, 120e6) // 120 J over the baseline's 10 s: 12 W
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if b, n := s.get(); !b.CPUKnown || math.Abs(b.CPUW-12) > 1e-9 || n != 1 {
			t.Errorf("stored baseline %+v after %d saves, want 12 W once", b, n)
		}
		// An hour later the next baseline reads 20 W (another program's
		// load): the lower one stays, and nothing new is stored.
		time.Sleep(time.Hour)
		synctest.Wait()
		h.setEnergy(0, h.energy(0)+200e6)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if b, n := s.get(); math.Abs(b.CPUW-12) > 1e-9 || n != 1 {
			t.Errorf("stored baseline %+v after %d saves, want 12 W still, saved once", b, n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve = %v", err)
		}

		now := time.Now()
		old := &memBaselines{b: Baseline{CPUW: 3, CPUKnown: true, At: now.Add(-BaselineMaxAge - time.Hour)}}
		if b := NewMeter(Config{RAPL: r, Baselines: old}).Baseline(); b.CPUKnown {
			t.Errorf("a baseline older than BaselineMaxAge was trusted: %+v", b)
		}
		fresh := &memBaselines{b: Baseline{CPUW: 3, CPUKnown: true, GPUW: map[string]float64{"GPU-x": 8}, At: now.Add(-time.Hour)}}
		if b := NewMeter(Config{RAPL: r, Baselines: fresh}).Baseline(); !b.CPUKnown || b.CPUW != 3 || b.GPUW["GPU-x"] != 8 {
			t.Errorf("a fresh stored baseline gave %+v, want 3 W and GPU-x 8 W", b)
		}
	})
}

func TestDutyShare(t *testing.T) {
	for _, tc := range []struct {
		name                             string
		share, ceiling, draw, idle, want float64
	}{
		{"over the ceiling: one step to it", 1, 150, 250, 50, 0.5},
		{"under it: grows back", 0.5, 150, 100, 50, 1},
		{"under it, partly", 0.25, 150, 100, 50, 0.5},
		{"a ceiling at rest's draw", 1, 40, 250, 50, 0.05},
		{"nothing measured above idle", 0.6, 150, 50, 50, 0.6},
		{"no ceiling", 0.3, 0, 250, 50, 1},
		{"never below the least share", 1, 51, 1000, 50, 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := DutyShare(tc.share, tc.ceiling, tc.draw, tc.idle, 0.05); !near(got, tc.want) {
				t.Errorf("DutyShare(%g, %g W, %g W, idle %g W) = %g, want %g", tc.share, tc.ceiling, tc.draw, tc.idle, got, tc.want)
			}
		})
	}
}

// A task that starts before the meter's first reading (before Serve's
// first sample): that reading is the GPU at rest all the same, and
// GPUPower gives it as the idle draw.
func TestMeterGPUIdleOnFirstReading(t *testing.T) {
	h := newFakeHost(t)
	g := &fakeGPUs{readings: map[string]GPUReading{"GPU-x": {UUID: "GPU-x", PowerW: 30, HasPower: true}}}
	m := NewMeter(Config{GPUs: g, PCIRoot: h.pci, CPUs: 8, RatedW: 80, Now: func() time.Time { return h.now }})
	task := m.Start([]string{"GPU-x"})
	defer task.Stop(0)
	g.readings["GPU-x"] = GPUReading{UUID: "GPU-x", PowerW: 240, HasPower: true}
	h.step(10*time.Second, 0, 0, nil)
	m.mu.Lock()
	m.sampleLocked()
	m.mu.Unlock()
	if got := m.GPUPower(); got["GPU-x"] != (GPUDraw{PowerW: 240, IdleW: 30, At: h.now}) {
		t.Errorf("GPUPower = %+v, want GPU-x at 240 W, 30 W at rest", got)
	}
}

// GPUPower gives the board power of the GPUs of running tasks, and their
// idle draw, from the last reading; nothing when no task runs.
func TestMeterGPUPower(t *testing.T) {
	h := newFakeHost(t)
	g := &fakeGPUs{readings: map[string]GPUReading{"GPU-x": {UUID: "GPU-x", PowerW: 30, HasPower: true}}}
	m := h.meter(t, g)
	task := m.Start([]string{"GPU-x"})
	g.readings["GPU-x"] = GPUReading{UUID: "GPU-x", PowerW: 240, HasPower: true}
	h.step(10*time.Second, 0, 0, nil)
	m.mu.Lock()
	m.sampleLocked()
	m.mu.Unlock()
	if got := m.GPUPower(); got["GPU-x"] != (GPUDraw{PowerW: 240, IdleW: 30, At: h.now}) {
		t.Errorf("GPUPower = %+v, want GPU-x at 240 W, 30 W at rest", got)
	}
	task.Stop(0)
	if got := m.GPUPower(); len(got) != 0 {
		t.Errorf("GPUPower with no task = %+v, want none", got)
	}
}
