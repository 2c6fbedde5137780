package worker

import (
	"time"

	"idlepool/energy"
)

// GPULister lists the machine's NVIDIA GPUs and reads their energy
// through NVML, which it loads from nvml.dll through purego (go-nvml is
// Linux-only) on the first List or ReadGPUs and keeps loaded until
// Close, as the Linux build does through go-nvml, with the same rules
// (listGPUs, readGPU): the same GPU values for the same device. A failed
// load is answered from memory for a minute before it is tried again; a
// failed device count shuts NVML down so that the next List initialises
// it afresh. Its methods are safe for concurrent use.
type GPULister struct {
	l pureLister
}

// NewGPULister returns a lister of the NVIDIA driver's nvml.dll. It
// loads nothing yet.
func NewGPULister() *GPULister { return &GPULister{l: pureLister{now: time.Now}} }

// List returns the usable GPUs in NVML's index order, with the processes
// on each split into ours (PIDs in ours; nil means none) and others'.
//
// With no usable GPU it returns a *NoGPUError (matching ErrNoGPU), e.g.
// "no usable GPU: no NVIDIA driver (NVML not found)", "no usable GPU: no
// NVIDIA GPU", or "no usable GPU: NVML: ..." for an NVML failure. When
// some GPUs are usable and others not (NVML refused a required reading:
// UUID, memory, temperature or compute processes), it returns the usable
// ones and an error naming the others. Readings of optional fields (name,
// utilisation, power, compute capability, graphics processes) that fail
// are noted in GPU.Problems. Under Windows' WDDM driver model NVML often
// cannot tell a process's memory: GPUProcess.UsedMemoryMiB is then -1.
func (l *GPULister) List(ours map[int]bool) ([]GPU, error) { return l.l.list(ours) }

// ReadGPUs reads the energy of the GPUs named by UUID through nvml.dll
// (energy.GPUReader), as the Linux build does through go-nvml: the
// energy counter where the GPU has one, else its power draw; with no
// driver the error is a *NoGPUError.
func (l *GPULister) ReadGPUs(uuids []string) ([]energy.GPUReading, error) {
	return l.l.readGPUs(uuids)
}

// SetPowerLimit sets the board power limit of GPU uuid (NVML's UUID) to
// watts through nvml.dll, clamped into the driver's constraints
// (nvmlDeviceGetPowerManagementLimitConstraints), and returns the limit
// now in force. The limit before the first change is kept for
// RestorePowerLimits. A driver that refuses (an administrator only, or
// no settable limit) is an error matching ErrPowerLimitRefused.
func (l *GPULister) SetPowerLimit(uuid string, watts float64) (PowerLimit, error) {
	return l.l.setPowerLimit(uuid, watts)
}

// ResetPowerLimit sets the board power limit of GPU uuid to watts,
// clamped into the driver's constraints, as the GPU's own limit: what
// RestorePowerLimits returns to afterwards, not a change it undoes. It
// puts back a limit recorded before a donor stopped without restoring
// it. A refusal matches ErrPowerLimitRefused.
func (l *GPULister) ResetPowerLimit(uuid string, watts float64) error {
	return l.l.resetPowerLimit(uuid, watts)
}

// RestorePowerLimits sets back every limit SetPowerLimit changed to what
// it was before; the GPUs it could not restore are named in the error.
func (l *GPULister) RestorePowerLimits() error { return l.l.restorePowerLimits() }

// Close restores the power limits SetPowerLimit changed and shuts NVML
// down if List, ReadGPUs or SetPowerLimit loaded it. The lister may be
// used again afterwards. It returns an error only when a limit cannot be
// restored or nvmlShutdown fails.
func (l *GPULister) Close() error { return l.l.close() }

var _ energy.GPUReader = (*GPULister)(nil)
