//go:build (!cgo || !linux) && !windows

package worker

import (
	"errors"
	"fmt"

	"idlepool/energy"
)

// GPULister lists the machine's NVIDIA GPUs through NVML. This build has
// no NVML (it needs cgo on Linux): List always reports "no usable GPU:
// built without NVML". Its methods are safe for concurrent use.
type GPULister struct{}

// NewGPULister returns a lister that finds no GPU.
func NewGPULister() *GPULister { return &GPULister{} }

// List returns a *NoGPUError, matching ErrNoGPU and wrapping
// errors.ErrUnsupported: this build has no NVML.
func (l *GPULister) List(ours map[int]bool) ([]GPU, error) {
	return nil, &NoGPUError{Reason: "built without NVML", Err: errors.ErrUnsupported}
}

// Close does nothing and returns nil.
func (l *GPULister) Close() error { return nil }

// ReadGPUs returns a *NoGPUError wrapping errors.ErrUnsupported: this
// build has no NVML, so no GPU's energy is read (energy.GPUReader).
func (l *GPULister) ReadGPUs(uuids []string) ([]energy.GPUReading, error) {
	return nil, &NoGPUError{Reason: "built without NVML", Err: errors.ErrUnsupported}
}

// SetPowerLimit returns an error matching ErrPowerLimitRefused and
// errors.ErrUnsupported: this build has no NVML.
func (l *GPULister) SetPowerLimit(uuid string, watts float64) (PowerLimit, error) {
	return PowerLimit{}, fmt.Errorf("%w: built without NVML: %w", ErrPowerLimitRefused, errors.ErrUnsupported)
}

// ResetPowerLimit returns an error matching ErrPowerLimitRefused and
// errors.ErrUnsupported: this build has no NVML.
func (l *GPULister) ResetPowerLimit(uuid string, watts float64) error {
	return fmt.Errorf("%w: built without NVML: %w", ErrPowerLimitRefused, errors.ErrUnsupported)
}

// RestorePowerLimits does nothing and returns nil: no limit was set.
func (l *GPULister) RestorePowerLimits() error { return nil }
