package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"

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
//
// ResetPowerLimit sets a limit as the GPU's own (what a later restore
// returns to): the donor puts back with it, when it starts, the limits
// it recorded before setting its own, where a donor before it stopped
// without restoring them (killed, or the machine lost power), so that a
// crash never leaves a gamer's GPU held at the donation's ceiling.
type GPUPowerLimiter interface {
	SetPowerLimit(uuid string, watts float64) (worker.PowerLimit, error)
	ResetPowerLimit(uuid string, watts float64) error
	RestorePowerLimits() error
}

// GPULimitsFile is the file, in the data directory (home.Dirs.Data),
// where a donor records each GPU's power limit from before it set its
// own, by UUID, in watts (JSON: {"GPU-...": 300}), while its own is in
// force; it is removed once they are restored. A donor that starts and
// finds it puts those limits back first.
const GPULimitsFile = "gpu-power-limits.json"

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

// ResetPowerLimit is the lister's; with no lister the driver refuses.
func (n NVMLGPUs) ResetPowerLimit(uuid string, watts float64) error {
	if n.Lister == nil {
		return fmt.Errorf("%w: no NVML lister", worker.ErrPowerLimitRefused)
	}
	return n.Lister.ResetPowerLimit(uuid, watts)
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
		d.recordGPULimit(uuid, pl.PreviousW)
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
		return // the record stays: the next start tries again
	}
	d.forgetGPULimits()
	d.log.Info("The GPUs' power limits are back as they were")
}

// gpuLimitsPath is the donor's GPULimitsFile, or "" without a data
// directory.
func (d *Donor) gpuLimitsPath() string {
	if d.cfg.Home.Data == "" {
		return ""
	}
	return filepath.Join(d.cfg.Home.Data, GPULimitsFile)
}

// readGPULimits returns the limits recorded in the donor's
// GPULimitsFile (none when there is no file); a file that is not a
// record of positive watts by UUID is an error naming it.
func (d *Donor) readGPULimits() (map[string]float64, error) {
	path := d.gpuLimitsPath()
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec map[string]float64
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: not a record of GPU power limits: %w", path, err)
	}
	for uuid, w := range rec {
		if !(w > 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("%s: GPU %s: a power limit of %g W: must be a positive number of watts", path, uuid, w)
		}
	}
	return rec, nil
}

// recordGPULimit adds GPU uuid's limit before the donor's own (previousW)
// to the GPULimitsFile, unless a limit is recorded for it already (the
// first is the GPU's own). Called from Serve's goroutine.
func (d *Donor) recordGPULimit(uuid string, previousW float64) {
	path := d.gpuLimitsPath()
	if path == "" || !(previousW > 0) {
		return
	}
	rec, err := d.readGPULimits()
	if err != nil {
		d.log.Warn("Cannot read the record of the GPUs' power limits; writing it anew", "err", err)
		rec = nil
	}
	if _, ok := rec[uuid]; ok {
		return
	}
	if rec == nil {
		rec = map[string]float64{}
	}
	rec[uuid] = previousW
	b, err := json.Marshal(rec)
	if err == nil {
		err = writeFileAtomic(path, b)
	}
	if err != nil {
		d.log.Warn("Cannot record the GPU's power limit before ours: if this program is killed, the limit stays until the GPU's driver restarts",
			"gpu", uuid, "previousW", previousW, "err", err)
	}
}

// forgetGPULimits removes the GPULimitsFile once the limits are restored.
func (d *Donor) forgetGPULimits() {
	path := d.gpuLimitsPath()
	if path == "" {
		return
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.log.Warn("Cannot remove the record of the GPUs' power limits", "err", err)
	}
}

// recoverGPULimits puts back the limits a donor before this one recorded
// and did not restore (it was killed, or the machine lost power), when
// Serve starts; the record is removed once every one is back, and kept
// for the next start otherwise. Called from Serve's goroutine, before
// any limit of its own is set.
func (d *Donor) recoverGPULimits() {
	rec, err := d.readGPULimits()
	if err != nil {
		d.log.Warn("Cannot read the record of the GPUs' power limits; removing it", "err", err)
		d.forgetGPULimits()
		return
	}
	if len(rec) == 0 {
		return
	}
	lim, ok := d.cfg.GPUs.(GPUPowerLimiter)
	if !ok {
		return
	}
	var errs []error
	for _, uuid := range slices.Sorted(maps.Keys(rec)) {
		if err := lim.ResetPowerLimit(uuid, rec[uuid]); err != nil {
			errs = append(errs, err)
			continue
		}
		d.log.Info("A GPU's power limit left by a donor that stopped without restoring it is back", "gpu", uuid, "limitW", rec[uuid])
	}
	if err := errors.Join(errs...); err != nil {
		d.log.Warn("Cannot put back the GPUs' power limits from before the last stop; trying again at the next start", "err", err)
		return
	}
	d.forgetGPULimits()
}
