package agent

import (
	"fmt"

	"idlepool/energy"
	"idlepool/worker"
)

// GPUPowerLimiter sets GPUs' board power limits in their driver, by
// NVML UUID, in watts. SetPowerLimit returns the limit in force (clamped
// into the driver's constraints), or an error matching
// worker.ErrPowerLimitRefused where the driver will not take one from
// this user; RestorePowerLimits sets back every limit it changed. A
// Donor whose DonorConfig.GPUs is one (NVMLGPUs) sets the owner's
// gpu_power ceiling as the limit and falls back to the workers' duty
// cycle where the driver refuses. Both are safe for concurrent use.
type GPUPowerLimiter interface {
	SetPowerLimit(uuid string, watts float64) (worker.PowerLimit, error)
	RestorePowerLimits() error
}

var (
	_ GPUPowerLimiter = (*worker.GPULister)(nil)
	_ GPUPowerLimiter = NVMLGPUs{}
)

// SetPowerLimit is the lister's; with no lister the driver refuses.
func (n NVMLGPUs) SetPowerLimit(uuid string, watts float64) (worker.PowerLimit, error) {
	if n.Lister == nil {
		return worker.PowerLimit{}, fmt.Errorf("%w: no NVML lister", worker.ErrPowerLimitRefused)
	}
	return n.Lister.SetPowerLimit(uuid, watts)
}

// RestorePowerLimits is the lister's.
func (n NVMLGPUs) RestorePowerLimits() error {
	if n.Lister == nil {
		return nil
	}
	return n.Lister.RestorePowerLimits()
}

// limitGPUs asks the driver of each GPU a task runs on (draws) to hold
// ceilingW as its board power limit, once per GPU and ceiling: the
// limits it sets are kept in d.gpuLimits, the refusals in d.gpuRefused
// (not asked again until the ceiling changes). It does nothing when the
// GPU source sets no limits. Called from Serve's goroutine.
func (d *Donor) limitGPUs(ceilingW float64, draws map[string]energy.GPUDraw) {
	lim, ok := d.cfg.GPUs.(GPUPowerLimiter)
	if !ok {
		return
	}
	if ceilingW != d.gpuLimitW {
		d.gpuRefused, d.gpuLimitW = nil, ceilingW
		clear(d.gpuLimits) // set again for the new ceiling; the lister keeps the first limit to restore
	}
	if d.gpuLimits == nil {
		d.gpuLimits = map[string]worker.PowerLimit{}
	}
	if d.gpuRefused == nil {
		d.gpuRefused = map[string]string{}
	}
	for uuid := range draws {
		if _, done := d.gpuLimits[uuid]; done {
			continue
		}
		if _, no := d.gpuRefused[uuid]; no {
			continue
		}
		pl, err := lim.SetPowerLimit(uuid, ceilingW)
		if err != nil {
			d.gpuRefused[uuid] = err.Error()
			d.log.Info("The GPU's driver takes no power limit from this user: the workers' duty cycle keeps it under the ceiling",
				"gpu", uuid, "ceilingW", ceilingW, "err", err)
			continue
		}
		d.gpuLimits[uuid] = pl
		d.log.Info("The GPU's driver holds its board power under the ceiling", "gpu", uuid, "ceilingW", ceilingW,
			"limitW", pl.LimitW, "previousW", pl.PreviousW)
	}
}

// restoreGPULimits sets back the GPUs' power limits that limitGPUs
// changed, when no GPU task runs, when the ceiling is lifted and when
// the donor stops. Called from Serve's goroutine.
func (d *Donor) restoreGPULimits() {
	if len(d.gpuLimits) == 0 {
		return
	}
	clear(d.gpuLimits)
	lim, ok := d.cfg.GPUs.(GPUPowerLimiter)
	if !ok {
		return
	}
	if err := lim.RestorePowerLimits(); err != nil {
		d.log.Warn("Cannot restore the GPUs' power limits", "err", err)
		return
	}
	d.log.Info("The GPUs' power limits are back as they were")
}
