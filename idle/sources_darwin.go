//go:build darwin

package idle

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"
)

// DefaultSources returns macOS's sources: input idle time from IOHIDSystem's
// HIDIdleTime (through ioreg), CPU load and programs from gopsutil, power
// from pmset. Temperatures are unknown: reading the SMC needs IOKit through
// cgo, which idlepool's builds for macOS do not use. GPU is left nil.
// HIDIdleTime is the local hardware's input only, so o changes nothing.
func DefaultSources(o SourceOptions) Sources {
	return Sources{
		InputIdle: []InputIdleSource{ioregIdle{}},
		Load:      psLoad{},
		Power:     pmsetPower{},
		Thermal:   noThermal{},
		Processes: processList{},
	}
}

// ioregIdle is an InputIdleSource over `ioreg -c IOHIDSystem -d 4`, whose
// IOHIDSystem entry carries HIDIdleTime: nanoseconds since the last HID
// event (keyboard, mouse, trackpad) of any user. Running ioreg costs a
// process start (some milliseconds) and needs no cgo, unlike IOKit's
// IORegistryEntryCreateCFProperty.
type ioregIdle struct{}

var _ InputIdleSource = ioregIdle{}

// IdleTime implements InputIdleSource.
func (ioregIdle) IdleTime(ctx context.Context) (time.Duration, string, error) {
	out, err := exec.CommandContext(ctx, "/usr/sbin/ioreg", "-c", "IOHIDSystem", "-d", "4").Output()
	if err != nil {
		return 0, "", fmt.Errorf("ioreg: %w", err)
	}
	d, err := parseIoregIdle(string(out))
	return d, "HIDIdleTime", err
}

// pmsetPower is a PowerSource over `pmset -g batt`, parsed by parsePmset.
type pmsetPower struct{}

var _ PowerSource = pmsetPower{}

// Power implements PowerSource.
func (pmsetPower) Power(ctx context.Context) (Power, error) {
	out, err := exec.CommandContext(ctx, "/usr/bin/pmset", "-g", "batt").Output()
	if err != nil {
		return Power{}, fmt.Errorf("pmset: %w", err)
	}
	return parsePmset(string(out))
}

// noThermal is the macOS ThermalSource: always errors.ErrUnsupported.
type noThermal struct{}

var _ ThermalSource = noThermal{}

// MaxTemperatureC implements ThermalSource.
func (noThermal) MaxTemperatureC(context.Context) (float64, string, error) {
	return 0, "", fmt.Errorf("temperature: needs IOKit: %w", errors.ErrUnsupported)
}
