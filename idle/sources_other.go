//go:build !linux && !windows && !darwin

package idle

import (
	"context"
	"errors"
	"time"
)

// DefaultSources returns, on platforms without their own probes, sources
// that report errors.ErrUnsupported for input idle time, CPU load and power
// (so those readings are unknown, and unknown input is not idleness), and
// gopsutil's temperatures and process list where gopsutil supports them;
// o changes nothing.
func DefaultSources(o SourceOptions) Sources {
	return Sources{
		InputIdle: []InputIdleSource{unsupported{}},
		Load:      unsupported{},
		Power:     unsupported{},
		Thermal:   sensorThermal{},
		Processes: processList{},
	}
}

// unsupported is the stub of every source this platform lacks.
type unsupported struct{}

func (unsupported) IdleTime(context.Context) (time.Duration, string, error) {
	return 0, "", errors.ErrUnsupported
}

func (unsupported) CPUCounters(context.Context, []int) (CPUCounters, error) {
	return CPUCounters{}, errors.ErrUnsupported
}

func (unsupported) Power(context.Context) (Power, error) {
	return Power{}, errors.ErrUnsupported
}
