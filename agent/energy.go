package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"

	"idlepool/energy"
	"idlepool/pool"
	"idlepool/store"
	"idlepool/worker"
)

// EnergyRecorder is a Store that also keeps what each task's energy was
// (*store.Local does). An agent with a Config.Energy meter records every
// task that ran, also those it handed back: the donor paid for them.
type EnergyRecorder interface {
	AddEnergy(ctx context.Context, e store.TaskEnergy) error
}

var _ EnergyRecorder = (*store.Local)(nil)

// EnergyStatus is what the donation draws now and how its energy is
// known, for the tray's Now view and `idlepool status`.
type EnergyStatus struct {
	// PowerW is what this device's running tasks added over the last
	// sampling interval, in watts; 0 when none runs. How says how it is
	// known ("" when no task runs).
	PowerW float64    `json:"powerW"`
	How    energy.How `json:"how,omitempty"`
	// CPU is how the CPU's energy is known: measured from the packages'
	// counters, or estimated. Problem says why it is estimated where a
	// counter exists but cannot be read, and Hint how to fix it.
	CPU     energy.How `json:"cpu"`
	Problem string     `json:"problem,omitempty"`
	Hint    string     `json:"hint,omitempty"`
	// GPUHeld is set while the owner's GPU power ceiling (gpu_power)
	// holds the workers back; nil when it does not.
	GPUHeld *GPUHold `json:"gpuHeld,omitempty"`
}

// GPUHold is the GPU power ceiling at work: the GPU's driver holds its
// board under a power limit (DriverW), where it lets this user set one,
// or else the workers run a share of the time so that the board of the
// GPU that needs it most stays under the ceiling.
type GPUHold struct {
	// CeilingW is the owner's ceiling (Settings.GPUPowerW), in watts.
	CeilingW float64 `json:"ceilingW"`
	// Share is the share of time the workers run, worker.MinCPUShare
	// to 1 (1: the duty cycle holds nothing back).
	Share float64 `json:"share"`
	// FullW is what that board would draw with the workers running all
	// the time, in watts: its idle draw plus what the tasks add, scaled
	// from the share in force when it was read (the model of
	// energy.DutyShare); 0 when its idle draw is not known yet.
	FullW float64 `json:"fullW,omitempty"`
	// DriverW is the board power limit the driver holds (NVML's power
	// management limit, set for the ceiling and clamped into the
	// driver's constraints), in watts; 0 when the driver holds none. A
	// DriverW above CeilingW is the driver's lowest: the duty cycle does
	// the rest.
	DriverW float64 `json:"driverW,omitempty"`
	// Refused is why the driver did not take the ceiling as its power
	// limit (worker.ErrPowerLimitRefused: on Linux only root may set
	// it, on Windows only an administrator), while the duty cycle
	// holds the workers back; "" otherwise.
	Refused string `json:"refused,omitempty"`
}

// Words says the hold for people: "GPU limited to 150 W by its driver"
// where the driver holds the ceiling; else "GPU held at 150 W of ~250 W
// (tasks run 50% of the time)", without "of ~250 W" when FullW is
// unknown (the full draw is the model's figure from a sampled reading,
// hence "~"), with why the duty cycle holds it: the driver refused a
// limit, or its lowest limit is above the ceiling.
func (h GPUHold) Words() string {
	if h.DriverW > 0 && h.Share >= 1 {
		return "GPU limited to " + energy.FormatWatts(h.DriverW, energy.Measured) + " by its driver"
	}
	w := "GPU held at " + energy.FormatWatts(h.CeilingW, energy.Measured)
	if h.FullW > h.CeilingW {
		w += " of ~" + energy.FormatWatts(h.FullW, energy.Sampled)
	}
	w += fmt.Sprintf(" (tasks run %.0f%% of the time", 100*h.Share)
	switch {
	case h.DriverW > 0:
		w += "; its driver's lowest limit is " + energy.FormatWatts(h.DriverW, energy.Measured)
	case h.Refused != "":
		w += "; the driver refused a power limit"
	}
	return w + ")"
}

// NewEnergyMeter returns the meter of this machine: the CPU packages'
// powercap counters when they are readable (Linux), or the Energy Meter
// counters when the machine exposes them (Windows), the GPUs through gpus (a
// *worker.GPULister; nil: none), the CPU times of workers' processes
// (Linux and Windows), and ratedW (0: energy.DefaultRatedW) for estimates. Counters
// that exist but cannot be read are said in the meter's CPUHow, with a
// hint. It reads nothing until a task starts, but once an hour at rest
// for the idle baseline (Meter.Serve), which baselines (the local store;
// nil: none) keeps across restarts.
func NewEnergyMeter(gpus energy.GPUReader, workers *worker.Pool, ratedW float64, baselines energy.BaselineStore) *energy.Meter {
	cfg := energy.Config{GPUs: gpus, RatedW: ratedW, Baselines: baselines}
	switch runtime.GOOS {
	case "linux":
		cfg.Proc, cfg.PCIRoot = energy.ProcRoot, energy.PCIRoot
		r, err := energy.OpenRAPL(os.DirFS(energy.PowercapRoot))
		switch {
		case err == nil:
			cfg.RAPL = r
		case !errors.Is(err, energy.ErrNoCounter):
			cfg.CPUProblem = err
		}
	case "windows":
		// The Energy Meter counters where the processor's driver
		// publishes them; where it does not, the reason is said (a
		// *energy.NotExposedError) and the CPU's energy is estimated.
		cfg.Times = energy.SystemCPUTimes()
		if e, err := energy.OpenSystemEMI(); err == nil {
			cfg.RAPL = e
		} else {
			cfg.CPUProblem = err
		}
	}
	if workers != nil {
		cfg.PIDs = workers.PIDs
	}
	return energy.NewMeter(cfg)
}

// energyStatus is the status of m; nil when m is nil.
func energyStatus(m *energy.Meter) *EnergyStatus {
	if m == nil {
		return nil
	}
	st := &EnergyStatus{}
	st.PowerW, st.How = m.Power()
	var err error
	st.CPU, err = m.CPUHow()
	if err != nil {
		st.Problem = err.Error()
		if ue, ok := errors.AsType[*energy.UnreadableError](err); ok {
			st.Hint = ue.Hint()
		}
	}
	return st
}

// recordEnergy keeps what task l used; a failure is logged (the energy is
// the donor's information, never part of a result or a receipt).
func (a *Agent) recordEnergy(ctx context.Context, l pool.Lease, u energy.Usage, log *slog.Logger) {
	rec, ok := a.cfg.Store.(EnergyRecorder)
	if !ok {
		return
	}
	err := rec.AddEnergy(context.WithoutCancel(ctx), store.TaskEnergy{Lease: l.ID, Pool: a.c.URL(), Job: l.Job, Task: l.Task, Usage: u})
	if err != nil {
		log.Warn("Cannot record the task's energy", "err", err)
		return
	}
	if a.cfg.energyAdded != nil {
		a.cfg.energyAdded()
	}
}

// Words says the status for people: what the tasks draw now and how the
// CPU's energy is known, e.g. "the tasks add 42.1 W now; the CPU's
// energy is measured" or "no task runs; the CPU's energy is estimated
// from CPU time: cannot read … (hint)", with the GPU power ceiling's
// hold after the draw while it holds the tasks back (GPUHold.Words).
func (s EnergyStatus) Words() string {
	now := "no task runs"
	if s.How != "" {
		now = "the tasks add " + energy.FormatWatts(s.PowerW, s.How) + " now"
		if m := s.How.Mark(); m != "" && s.How != energy.Estimated {
			now += " (" + m + ")"
		}
	}
	if s.GPUHeld != nil {
		now += "; " + s.GPUHeld.Words()
	}
	cpu := "the CPU's energy is measured"
	if s.CPU != energy.Measured {
		cpu = "the CPU's energy is estimated from CPU time"
		if s.Problem != "" {
			cpu += ": " + s.Problem
		}
		if s.Hint != "" {
			cpu += " (" + s.Hint + ")"
		}
	}
	return now + "; " + cpu
}
