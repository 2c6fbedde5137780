//go:build linux

package idle

// DefaultSources returns Linux's sources: input idle time from logind,
// X11's MIT-SCREEN-SAVER (on $DISPLAY), the device nodes under /dev and
// the events of game controllers (/dev/input/js*, and the event nodes of
// controllers without one), combined by the Sampler (the smallest idle
// time among those that answer);
// CPU load from /proc; power from /sys/class/power_supply; temperatures
// from hwmon through gopsutil; programs from the process list; games
// from the active window's EWMH full-screen state (on $DISPLAY),
// GameMode's ClientCount on the session bus and Steam's registry.vdf.
// GPU is left nil for the caller to fill from package worker. Input in
// remote logins (logind's remote sessions and those on a pseudo-terminal,
// /dev/pts) counts only with o.RemoteInput.
func DefaultSources(o SourceOptions) Sources {
	return Sources{
		InputIdle: []InputIdleSource{logindIdle{remote: o.RemoteInput}, &x11Idle{}, devInputIdle{root: "/dev", remote: o.RemoteInput},
			&gamepadIdle{dev: "/dev/input", sys: "/sys/class/input"}},
		Load:      procLoad{root: "/proc"},
		Power:     sysfsPower{root: "/sys/class/power_supply"},
		Thermal:   sensorThermal{},
		Processes: processList{},
		Games: map[GameSign]GameSource{
			GameFullScreen: &fullScreenX11{},
			GameGameMode:   &gameModeDBus{},
			GameSteam:      &steamVDF{},
		},
	}
}
