//go:build linux || windows

package worker

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
)

// nvmlPowerLimit is the part of NVML that reads and sets a GPU's board
// power limit, in milliwatts: go-nvml's binding (goNVML) and purego's
// (pureNVML) implement it, and powerLimits works through it. Errors
// unwrap to the nvmlCode NVML returned. NVML is initialised before any
// call.
type nvmlPowerLimit interface {
	// device returns the GPU with uuid (nvmlDeviceGetHandleByUUID).
	device(uuid string) (nvmlDevice, error)
	// powerLimitMW is the limit in force
	// (nvmlDeviceGetPowerManagementLimit).
	powerLimitMW(d nvmlDevice) (uint32, error)
	// powerLimitConstraintsMW are the lowest and highest limits the
	// driver takes (nvmlDeviceGetPowerManagementLimitConstraints).
	powerLimitConstraintsMW(d nvmlDevice) (lo, hi uint32, err error)
	// setPowerLimitMW sets the limit (nvmlDeviceSetPowerManagementLimit;
	// root or an administrator only, on most drivers).
	setPowerLimitMW(d nvmlDevice, mW uint32) error
}

// NVML's codes that say a limit cannot be set by this user.
const (
	nvmlNotSupported     nvmlCode = 3  // NVML_ERROR_NOT_SUPPORTED
	nvmlFunctionNotFound nvmlCode = 13 // NVML_ERROR_FUNCTION_NOT_FOUND
)

// powerLimits sets GPUs' power limits and remembers each one's limit
// before the first it set, to restore it. Its owner serialises calls.
type powerLimits struct {
	saved map[string]uint32 // by UUID, in mW
}

// set sets the limit of GPU uuid to watts, clamped into the driver's
// constraints. A refusal matches ErrPowerLimitRefused.
func (p *powerLimits) set(lib nvmlPowerLimit, uuid string, watts float64) (PowerLimit, error) {
	if !(watts > 0) || math.IsInf(watts, 0) {
		return PowerLimit{}, fmt.Errorf("worker: GPU %s: a power limit of %g W: must be a positive number of watts", uuid, watts)
	}
	dev, err := lib.device(uuid)
	if err != nil {
		return PowerLimit{}, limitError(uuid, "find it", err)
	}
	lo, hi, err := lib.powerLimitConstraintsMW(dev)
	if err != nil {
		return PowerLimit{}, limitError(uuid, "read its power limit's constraints", err)
	}
	cur, err := lib.powerLimitMW(dev)
	if err != nil {
		return PowerLimit{}, limitError(uuid, "read its power limit", err)
	}
	want := uint32(min(max(math.Round(watts*1000), float64(lo)), float64(hi)))
	prev, saved := p.saved[uuid]
	if !saved {
		prev = cur
	}
	if want != cur {
		if err := lib.setPowerLimitMW(dev, want); err != nil {
			return PowerLimit{}, limitError(uuid, fmt.Sprintf("set its power limit to %g W", float64(want)/1000), err)
		}
		if !saved {
			if p.saved == nil {
				p.saved = map[string]uint32{}
			}
			p.saved[uuid] = cur
		}
	}
	return PowerLimit{UUID: uuid, LimitW: float64(want) / 1000, MinW: float64(lo) / 1000, MaxW: float64(hi) / 1000,
		PreviousW: float64(prev) / 1000}, nil
}

// reset sets the limit of GPU uuid to watts, clamped into the driver's
// constraints, and forgets the limit saved for it: the limit a donor
// that stopped without restoring left is put back this way, and is then
// the one a later restore returns to. A refusal matches
// ErrPowerLimitRefused.
func (p *powerLimits) reset(lib nvmlPowerLimit, uuid string, watts float64) error {
	delete(p.saved, uuid)
	_, err := p.set(lib, uuid, watts)
	delete(p.saved, uuid)
	return err
}

// restore sets back each GPU's limit from before the first set, and
// forgets it; the GPUs it could not restore are named in the error.
func (p *powerLimits) restore(lib nvmlPowerLimit) error {
	var errs []error
	for _, uuid := range slices.Sorted(maps.Keys(p.saved)) {
		mW := p.saved[uuid]
		delete(p.saved, uuid)
		dev, err := lib.device(uuid)
		if err == nil {
			err = lib.setPowerLimitMW(dev, mW)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("worker: GPU %s: restore its power limit of %g W: %w", uuid, float64(mW)/1000, err))
		}
	}
	return errors.Join(errs...)
}

// limitError wraps NVML's answer; NO_PERMISSION, NOT_SUPPORTED and a
// library without the call match ErrPowerLimitRefused.
func limitError(uuid, what string, err error) error {
	if errors.Is(err, nvmlNoPermission) || errors.Is(err, nvmlNotSupported) || errors.Is(err, nvmlFunctionNotFound) {
		return fmt.Errorf("%w: GPU %s: %s: %w", ErrPowerLimitRefused, uuid, what, err)
	}
	return fmt.Errorf("worker: GPU %s: %s: %w", uuid, what, err)
}
