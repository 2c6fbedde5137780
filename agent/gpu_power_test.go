package agent_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/energy"
	"idlepool/worker"
)

// throttledGPU is an executor that records the duty cycle's share the
// donor sets, and a GPU whose board draws 50 W at rest plus 200 W times
// that share (a task's kernels run only while its worker runs), as NVML
// would read it.
type throttledGPU struct {
	fakeExec
	mu    sync.Mutex
	share float64
	set   []float64
}

func (g *throttledGPU) SetCPUShare(s float64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.share = s
	g.set = append(g.set, s)
	return nil
}

func (g *throttledGPU) SetPriority(worker.Priority) error { return nil }

func (g *throttledGPU) current() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.share
}

func (g *throttledGPU) ReadGPUs(uuids []string) ([]energy.GPUReading, error) {
	var out []energy.GPUReading
	for _, u := range uuids {
		out = append(out, energy.GPUReading{UUID: u, PowerW: 50 + 200*g.current(), HasPower: true})
	}
	return out, nil
}

// TestGPUPowerCeiling: a GPU task draws 250 W at full speed; with
// gpu_power=150 the donor runs the workers half the time, which brings
// the board to 150 W, and holds it there; once the task ends the workers
// run freely again. Without the ceiling they are never held.
func TestGPUPowerCeiling(t *testing.T) {
	dev := newDevice(t, mustKey(t))
	ctx := context.Background()
	s, err := dev.local.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.GPUPowerW = 150
	if err := dev.local.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	gpu := &throttledGPU{share: 0}
	meter := energy.NewMeter(energy.Config{GPUs: gpu, Period: 20 * time.Millisecond})
	// The task starts before the donor serves: its first reading is the
	// board at rest (50 W, nothing of ours running yet), which the meter
	// keeps as the GPU's idle draw; then the workers run.
	task := meter.Start([]string{"GPU-x"})
	gpu.SetCPUShare(1)
	d, err := agent.NewDonor(agent.DonorConfig{Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Workers: 1,
		Executor: gpu, Store: dev.local, Always: true, Logger: quietLogger(t), Energy: meter,
		PoolReload: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	defer func() { cancel(); <-done }()

	wait := func(what string, cond func(float64) bool) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute) // patience, not a verdict
		for !cond(gpu.current()) {
			if time.Now().After(deadline) {
				gpu.mu.Lock()
				t.Fatalf("%s: shares set %v", what, gpu.set)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	wait("the workers held to half the time", func(s float64) bool { return math.Abs(s-0.5) < 1e-9 })
	time.Sleep(200 * time.Millisecond) // several more steps: it holds
	if s := gpu.current(); math.Abs(s-0.5) > 1e-9 {
		t.Errorf("share after more steps = %g, want 0.5 held (150 W)", s)
	}
	// The status says the hold: the ceiling, the share, and the board's
	// draw at full speed (50 W idle + 100 W added at half the time).
	want := &agent.GPUHold{CeilingW: 150, Share: 0.5, FullW: 250}
	waitHeld := func(what string, want *agent.GPUHold) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute) // patience, not a verdict
		for {
			e := d.Status().Energy
			if e == nil {
				t.Fatal("Status has no energy")
			}
			diff := cmp.Diff(want, e.GPUHeld)
			if diff == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Status().Energy.GPUHeld (-want +got):\n%s", what, diff)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitHeld("the hold in the status", want)
	if got, want := want.Words(), "GPU held at 150 W of ~250 W (tasks run 50% of the time)"; got != want {
		t.Errorf("Words() = %q, want %q", got, want)
	}
	task.Stop(0)
	wait("the workers free once the GPU task ended", func(s float64) bool { return s == 1 })
	waitHeld("no hold once the GPU task ended", nil)
}

func TestGPUHoldWords(t *testing.T) {
	tests := []struct {
		hold agent.GPUHold
		want string
	}{
		{agent.GPUHold{CeilingW: 150, Share: 0.6, FullW: 251.3}, "GPU held at 150 W of ~250 W (tasks run 60% of the time)"},
		{agent.GPUHold{CeilingW: 120, Share: 0.25}, "GPU held at 120 W (tasks run 25% of the time)"},
	}
	for _, tc := range tests {
		if got := tc.hold.Words(); got != tc.want {
			t.Errorf("%+v.Words() = %q, want %q", tc.hold, got, tc.want)
		}
	}
}
