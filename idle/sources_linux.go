//go:build linux

package idle

// DefaultSources returns Linux's sources: input idle time from logind,
// X11's MIT-SCREEN-SAVER (on $DISPLAY), the device nodes under /dev and
// the events of game controllers (/dev/input/js*, and the event nodes of
// controllers without one), combined by the Sampler (the smallest idle
// time among those that answer);
// CPU load from /proc; power from /sys/class/power_supply; temperatures
// from hwmon through gopsutil; programs from the process list. GPU is left
// nil for the caller to fill from package worker.
func DefaultSources() Sources {
	return Sources{
		InputIdle: []InputIdleSource{logindIdle{}, &x11Idle{}, devInputIdle{root: "/dev"},
			&gamepadIdle{dev: "/dev/input", sys: "/sys/class/input"}},
		Load:      procLoad{root: "/proc"},
		Power:     sysfsPower{root: "/sys/class/power_supply"},
		Thermal:   sensorThermal{},
		Processes: processList{},
	}
}
