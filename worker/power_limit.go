package worker

import "errors"

// ErrPowerLimitRefused is matched by a GPULister.SetPowerLimit error when
// the driver will not set the GPU's board power limit for this user:
// NVML answers NVML_ERROR_NO_PERMISSION (on Linux it needs root, on
// Windows an administrator) or NVML_ERROR_NOT_SUPPORTED (a GPU without
// a settable limit), or the build has no NVML. The caller then keeps
// the board under its ceiling another way (the workers' duty cycle).
var ErrPowerLimitRefused = errors.New("worker: the driver refuses to set the GPU's power limit")

// PowerLimit is a GPU's board power limit as its driver holds it after
// GPULister.SetPowerLimit, in watts: NVML's power management limit
// (nvmlDeviceGetPowerManagementLimit), which the board's firmware keeps
// its draw under, within the driver's constraints
// (nvmlDeviceGetPowerManagementLimitConstraints).
type PowerLimit struct {
	UUID   string  `json:"uuid"`
	LimitW float64 `json:"limitW"` // what the driver holds now
	// MinW and MaxW are the driver's constraints: a ceiling outside
	// them was clamped into them.
	MinW float64 `json:"minW"`
	MaxW float64 `json:"maxW"`
	// PreviousW is the limit before the first SetPowerLimit, which
	// RestorePowerLimits sets back.
	PreviousW float64 `json:"previousW"`
}
