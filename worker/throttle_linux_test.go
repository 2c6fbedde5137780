//go:build linux

package worker

import (
	"errors"
	"testing"
	"time"
)

// TestCPUShareHalvesCPUTime measures what SetCPUShare does to a real
// CPU-bound worker process: windows of a second at full share and at
// half share alternate. In each the test samples the worker's state
// (/proc/PID/stat) every few milliseconds: at half share the duty cycle
// keeps it stopped for a quarter to three quarters of the samples, at
// full share for almost none. That is what the pool controls, whatever
// else the machine runs. Its CPU time per wall second (user plus system)
// is what the donor feels, but a busy machine decides it as much as the
// duty cycle does (a process stopped half the time gets more of a
// contended CPU while it runs): the test checks that halving only when
// the machine gave the worker most of a core at full share, and logs it
// always (at most 100 ticks a second, Linux's USER_HZ: three rounds hold
// at least 240 ticks at full share when it checks).
func TestCPUShareHalvesCPUTime(t *testing.T) {
	const ticksPerSecond = 100 // USER_HZ, the unit of /proc/PID/stat's times
	needHostile(t)
	p := newTestPool(t, 1)
	pid, _ := startLoop(t, p, time.Hour)
	_, before, _ := cpuTicks(pid)
	waitCPU(t, pid, 2*time.Minute, "busy", func(_ string, ticks int64) bool { return ticks > before+5 })

	type window struct {
		ticks            int64
		wall             time.Duration
		samples, stopped int
	}
	measure := func(share float64, w *window) {
		t.Helper()
		if err := p.SetCPUShare(share); err != nil {
			t.Fatalf("SetCPUShare(%g): %v", share, err)
		}
		time.Sleep(2 * CPUPeriod) // the new share in force
		_, t0, err := cpuTicks(pid)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for time.Since(start) < time.Second {
			state, _, err := cpuTicks(pid)
			if err != nil {
				t.Fatal(err)
			}
			w.samples++
			if state == "T" || state == "t" {
				w.stopped++
			}
			time.Sleep(3 * time.Millisecond) // a step that is no divisor of CPUPeriod
		}
		_, t1, err := cpuTicks(pid)
		if err != nil {
			t.Fatal(err)
		}
		w.ticks += t1 - t0
		w.wall += time.Since(start)
	}
	var full, half window
	for range 3 {
		measure(1, &full)
		measure(0.5, &half)
	}
	fullStopped := float64(full.stopped) / float64(full.samples)
	halfStopped := float64(half.stopped) / float64(half.samples)
	fullRate := float64(full.ticks) / full.wall.Seconds()
	halfRate := float64(half.ticks) / half.wall.Seconds()
	ratio := halfRate / fullRate
	t.Logf("stopped in %.2f of %d samples at full share and %.2f of %d at half share; CPU time per wall second: %.1f ticks at full share, %.1f at half share: ratio %.2f (%d and %d ticks over %s and %s)",
		fullStopped, full.samples, halfStopped, half.samples, fullRate, halfRate, ratio, full.ticks, half.ticks,
		full.wall.Round(time.Millisecond), half.wall.Round(time.Millisecond))
	if fullStopped > 0.05 {
		t.Errorf("at full share the worker was stopped in %.2f of the samples, want none (at most 0.05)", fullStopped)
	}
	if halfStopped < 0.25 || halfStopped > 0.75 {
		t.Errorf("at half share the worker was stopped in %.2f of the samples, want 0.25 to 0.75", halfStopped)
	}
	if fullRate < 0.8*ticksPerSecond {
		t.Logf("the machine gave the worker %.2f of a core at full share: too busy to check the CPU time's ratio", fullRate/ticksPerSecond)
		return
	}
	if ratio < 0.25 || ratio > 0.75 {
		t.Errorf("at half share the worker used %.2f of the CPU time it used at full share, want 0.25 to 0.75", ratio)
	}
}

// TestCPUShareYieldsToSuspend: the duty cycle never lets a suspended
// worker run (Suspend wins), and goes on after Resume.
func TestCPUShareYieldsToSuspend(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	if err := p.SetCPUShare(0.5); err != nil {
		t.Fatal(err)
	}
	pid, _ := startLoop(t, p, time.Hour)
	_, before, _ := cpuTicks(pid)
	waitCPU(t, pid, 2*time.Minute, "busy at half share", func(_ string, ticks int64) bool { return ticks > before+5 })
	if err := p.Suspend(); err != nil {
		t.Fatal(err)
	}
	waitCPU(t, pid, 10*time.Second, "stopped", func(state string, _ int64) bool { return state == "T" })
	_, t0, _ := cpuTicks(pid)
	for range 5 { // several periods of the duty cycle
		time.Sleep(CPUPeriod)
		if state, _, _ := cpuTicks(pid); state != "T" {
			t.Fatalf("suspended worker in state %s during the duty cycle", state)
		}
	}
	if _, t1, _ := cpuTicks(pid); t1 != t0 {
		t.Errorf("suspended worker used %d ticks under the duty cycle", t1-t0)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	waitCPU(t, pid, 2*time.Minute, "running again", func(_ string, ticks int64) bool { return ticks > t0+5 })
}

// TestSetCPUShareRange: a share out of range is refused, naming it.
func TestSetCPUShareRange(t *testing.T) {
	p := newTestPool(t, 1)
	for _, share := range []float64{0, 0.01, 1.5, -1} {
		if err := p.SetCPUShare(share); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("SetCPUShare(%g) = %v, want ErrInvalidRequest", share, err)
		}
	}
	if err := p.SetCPUShare(0.05); err != nil || p.CPUShare() != 0.05 {
		t.Errorf("SetCPUShare(0.05) = %v, CPUShare %g", err, p.CPUShare())
	}
	if _, err := NewPool(Config{Command: []string{"x"}, CPUShare: 2}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("NewPool with CPUShare 2: %v, want ErrInvalidRequest", err)
	}
	if _, err := NewPool(Config{Command: []string{"x"}, Priority: "high"}); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("NewPool with priority high: %v, want ErrInvalidRequest", err)
	}
}
