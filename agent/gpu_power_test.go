package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/energy"
	"idlepool/idle"
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

// limitedGPU is throttledGPU behind a driver that may take a board power
// limit, as NVML does: clamped into its constraints (loW..hiW), the
// limit before the first change kept to restore; refuse makes it answer
// as a driver that takes none from this user. The board draws 50 W at
// rest plus 200 W times the workers' share, never above the limit.
type limitedGPU struct {
	throttledGPU
	loW, hiW float64
	refuse   error
	limitW   float64 // in force
	prevW    float64 // before the first change; 0 when none is set
	restores int
}

func (g *limitedGPU) GPUs(context.Context) ([]idle.GPU, error) {
	return nil, errors.New("not listed here")
}

func (g *limitedGPU) SetPowerLimit(uuid string, watts float64) (worker.PowerLimit, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuse != nil {
		return worker.PowerLimit{}, g.refuse
	}
	if g.prevW == 0 {
		g.prevW = g.limitW
	}
	g.limitW = min(max(watts, g.loW), g.hiW)
	return worker.PowerLimit{UUID: uuid, LimitW: g.limitW, MinW: g.loW, MaxW: g.hiW, PreviousW: g.prevW}, nil
}

func (g *limitedGPU) ResetPowerLimit(uuid string, watts float64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refuse != nil {
		return g.refuse
	}
	g.limitW, g.prevW = min(max(watts, g.loW), g.hiW), 0
	return nil
}

func (g *limitedGPU) RestorePowerLimits() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.prevW != 0 {
		g.limitW, g.prevW = g.prevW, 0
	}
	g.restores++
	return nil
}

func (g *limitedGPU) limit() (float64, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limitW, g.restores
}

func (g *limitedGPU) ReadGPUs(uuids []string) ([]energy.GPUReading, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []energy.GPUReading
	for _, u := range uuids {
		out = append(out, energy.GPUReading{UUID: u, PowerW: min(50+200*g.share, g.limitW), HasPower: true})
	}
	return out, nil
}

// TestGPUPowerCeilingByDriver: with gpu_power=150, where the driver takes
// the ceiling as the board's power limit the workers run freely and the
// status says the driver holds it; where it refuses, the duty cycle
// holds them to half the time and the status says the driver refused;
// where its lowest limit (200 W) is above the ceiling, the limit is
// clamped to it and the duty cycle does the rest. The driver's limit is
// restored once no GPU task runs, and when the donor stops.
func TestGPUPowerCeilingByDriver(t *testing.T) {
	refused := fmt.Errorf("%w: GPU GPU-x: set its power limit to 150 W: Insufficient Permissions", worker.ErrPowerLimitRefused)
	for _, tc := range []struct {
		name     string
		loW      float64
		refuse   error
		share    float64 // the workers' share held
		hold     *agent.GPUHold
		words    string
		limitedW float64 // the driver's limit while the task runs
	}{
		{"the driver takes it", 100, nil, 1, &agent.GPUHold{CeilingW: 150, Share: 1, DriverW: 150},
			"GPU limited to 150 W by its driver", 150},
		{"the driver refuses", 100, refused, 0.5, &agent.GPUHold{CeilingW: 150, Share: 0.5, FullW: 250, Refused: refused.Error()},
			"GPU held at 150 W of ~250 W (tasks run 50% of the time; the driver refused a power limit)", 300},
		{"clamped to the driver's lowest", 200, nil, 0.5, &agent.GPUHold{CeilingW: 150, Share: 0.5, FullW: 250, DriverW: 200},
			"GPU held at 150 W of ~250 W (tasks run 50% of the time; its driver's lowest limit is 200 W)", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
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
			gpu := &limitedGPU{loW: tc.loW, hiW: 300, limitW: 300, refuse: tc.refuse}
			meter := energy.NewMeter(energy.Config{GPUs: gpu, Period: 20 * time.Millisecond})
			task := meter.Start([]string{"GPU-x"}) // the board at rest: 50 W
			gpu.SetCPUShare(1)
			d, err := agent.NewDonor(agent.DonorConfig{Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Workers: 1,
				Executor: gpu, Store: dev.local, Always: true, Logger: quietLogger(t), Energy: meter, GPUs: gpu,
				PoolReload: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- d.Serve(ctx) }()
			stopped := false
			defer func() {
				if !stopped {
					cancel()
					<-done
				}
			}()
			waitFor := func(what string, cond func() bool, say func() string) {
				t.Helper()
				deadline := time.Now().Add(2 * time.Minute) // patience, not a verdict
				for !cond() {
					if time.Now().After(deadline) {
						t.Fatalf("%s: %s", what, say())
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			heldDiff := func() string { return cmp.Diff(tc.hold, d.Status().Energy.GPUHeld) }
			waitFor("the hold in the status", func() bool { return heldDiff() == "" },
				func() string { return "Status().Energy.GPUHeld (-want +got):\n" + heldDiff() })
			time.Sleep(100 * time.Millisecond) // several more steps: it holds
			if s := gpu.current(); math.Abs(s-tc.share) > 1e-9 {
				t.Errorf("workers' share = %g, want %g", s, tc.share)
			}
			if l, _ := gpu.limit(); l != tc.limitedW {
				t.Errorf("driver's limit while the task runs = %g W, want %g W", l, tc.limitedW)
			}
			if got := tc.hold.Words(); got != tc.words {
				t.Errorf("Words() = %q, want %q", got, tc.words)
			}
			record := filepath.Join(dev.dirs.Data, agent.GPULimitsFile)
			b, err := os.ReadFile(record)
			switch {
			case tc.refuse != nil && err == nil:
				t.Errorf("a limit the driver refused is recorded: %s", b)
			case tc.refuse == nil && string(b) != `{"GPU-x":300}`:
				t.Errorf("the record of the limit before ours = %q (%v), want {\"GPU-x\":300}", b, err)
			}

			task.Stop(0)
			waitFor("the limit restored once the GPU task ended", func() bool { l, _ := gpu.limit(); return l == 300 && gpu.current() == 1 },
				func() string {
					l, n := gpu.limit()
					return fmt.Sprintf("limit %g W after %d restores, share %g", l, n, gpu.current())
				})
			waitFor("the record removed once the limit is restored", func() bool { _, err := os.Stat(record); return errors.Is(err, fs.ErrNotExist) },
				func() string { b, err := os.ReadFile(record); return fmt.Sprintf("%s (%v)", b, err) })
			if tc.refuse == nil {
				// Another GPU task: the limit is set again; the donor
				// stopping restores it.
				task = meter.Start([]string{"GPU-x"})
				waitFor("the limit set again", func() bool { l, _ := gpu.limit(); return l == tc.limitedW },
					func() string { l, _ := gpu.limit(); return fmt.Sprintf("limit %g W", l) })
				cancel()
				<-done
				stopped = true
				if l, _ := gpu.limit(); l != 300 {
					t.Errorf("limit after the donor stopped = %g W, want 300 W back", l)
				}
				task.Stop(0)
			}
		})
	}
}

// TestGPUPowerLimitRecoveredAfterAKill: a donor killed while its ceiling
// was the GPU's power limit left 150 W set and its record of the GPU's
// own 300 W; the next donor puts 300 W back when it starts, with no
// ceiling and no task, and removes the record. A record that is not
// JSON is removed with a warning, the limit left as it is.
func TestGPUPowerLimitRecoveredAfterAKill(t *testing.T) {
	for _, tc := range []struct {
		name   string
		record string
		wantW  float64
	}{
		{"the record put back", `{"GPU-x":300}`, 300},
		{"a broken record removed", `{"GPU-x":`, 150},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := newDevice(t, mustKey(t))
			record := filepath.Join(dev.dirs.Data, agent.GPULimitsFile)
			if err := os.WriteFile(record, []byte(tc.record), 0o644); err != nil {
				t.Fatal(err)
			}
			gpu := &limitedGPU{loW: 100, hiW: 300, limitW: 150}
			var logs bytes.Buffer
			d, err := agent.NewDonor(agent.DonorConfig{Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Workers: 1,
				Executor: gpu, Store: dev.local, Always: true, Logger: slog.New(slog.NewTextHandler(&logs, nil)), GPUs: gpu,
				PoolReload: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- d.Serve(ctx) }()
			stop := sync.OnceFunc(func() { cancel(); <-done })
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("the donor's log:\n%s", logs.String())
				}
			})
			eventually(t, 2*time.Minute, "the record removed", func() bool { // patience, not a verdict
				_, err := os.Stat(record)
				return errors.Is(err, fs.ErrNotExist)
			})
			stop() // the log is read below
			if l, _ := gpu.limit(); l != tc.wantW {
				t.Errorf("the GPU's limit = %g W, want %g W; log:\n%s", l, tc.wantW, logs.String())
			}
			if tc.wantW == 150 && !strings.Contains(logs.String(), "not a record of GPU power limits") {
				t.Errorf("the log does not say the record is broken:\n%s", logs.String())
			}
		})
	}
}
