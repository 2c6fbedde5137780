//go:build linux

package worker

import (
	"errors"
	"testing"
	"time"
)

// TestCPUShareHalvesCPUTime measures what SetCPUShare does to a real
// CPU-bound worker process: windows of a second at full share and at
// half share alternate, and the worker's CPU time per wall second (user
// plus system, from /proc/PID/stat) at half share is between a quarter
// and three quarters of what it is at full share. A busy machine gives
// the worker less of a CPU in both, which the ratio cancels out; rounds
// go on until the full windows hold at least a second and a half of CPU
// time (patience, not a verdict on the clock).
func TestCPUShareHalvesCPUTime(t *testing.T) {
	needHostile(t)
	p := newTestPool(t, 1)
	pid, _ := startLoop(t, p, time.Hour)
	_, before, _ := cpuTicks(pid)
	waitCPU(t, pid, 2*time.Minute, "busy", func(_ string, ticks int64) bool { return ticks > before+5 })

	measure := func(share float64) (ticks int64, wall time.Duration) {
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
		time.Sleep(time.Second)
		_, t1, err := cpuTicks(pid)
		if err != nil {
			t.Fatal(err)
		}
		return t1 - t0, time.Since(start)
	}
	var full, half int64
	var fullWall, halfWall time.Duration
	for round := 0; round < 3 || (full < 150 && round < 60); round++ {
		ticks, wall := measure(1)
		full, fullWall = full+ticks, fullWall+wall
		ticks, wall = measure(0.5)
		half, halfWall = half+ticks, halfWall+wall
	}
	if full < 50 {
		t.Skipf("the machine gave the worker only %d ticks of CPU in %s at full share: too little to measure", full, fullWall)
	}
	fullRate := float64(full) / fullWall.Seconds()
	halfRate := float64(half) / halfWall.Seconds()
	ratio := halfRate / fullRate
	t.Logf("CPU time per wall second: %.1f ticks at full share, %.1f at half share: ratio %.2f (%d and %d ticks over %s and %s)",
		fullRate, halfRate, ratio, full, half, fullWall.Round(time.Millisecond), halfWall.Round(time.Millisecond))
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
