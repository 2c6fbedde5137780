package idle

import (
	"context"
	"time"
)

// InputIdleSource reports how long the machine's user has not touched a
// keyboard, mouse or remote terminal.
//
// IdleTime returns the time since the last input and a short name of where
// it came from ("logind", "x11-screensaver", "/dev/input", ...). It returns
// an error when it cannot tell (no display, no session bus, no device
// readable); errors.ErrUnsupported where the platform has no such source.
// It must return soon after ctx is done. Safe for concurrent use.
type InputIdleSource interface {
	IdleTime(ctx context.Context) (idle time.Duration, source string, err error)
}

// CPUCounters are cumulative CPU times since an arbitrary origin (boot on
// Linux), summed over all logical CPUs. Only differences between two
// readings of the same source mean anything.
type CPUCounters struct {
	Total time.Duration // busy + idle time of all CPUs
	Busy  time.Duration // of Total, time not idle nor waiting for I/O
	Own   time.Duration // of Busy, time used by idlepool's own processes and their descendants
}

// LoadSource reads cumulative CPU counters; the Sampler turns two readings
// into the share of CPU capacity that other processes used in between.
//
// CPUCounters counts as Own the processes in own and all their live
// descendants, and, where the platform keeps it, the time of descendants
// that have already exited and been waited for. It returns an error when the
// counters cannot be read; errors.ErrUnsupported where the platform has no
// implementation. Safe for concurrent use.
type LoadSource interface {
	CPUCounters(ctx context.Context, own []int) (CPUCounters, error)
}

// PowerSource reports AC or battery and the internal battery's level.
//
// Power returns an error when the state cannot be read;
// errors.ErrUnsupported where the platform has no implementation. A machine
// without an internal battery is on AC (Power{} with no error). Safe for
// concurrent use.
type PowerSource interface {
	Power(ctx context.Context) (Power, error)
}

// ThermalSource reports the hottest CPU or chassis temperature sensor.
//
// MaxTemperatureC returns degrees Celsius and the sensor's name. It returns
// an error wrapping ErrNoSource when the machine exposes no such sensor
// (virtual machines, containers); errors.ErrUnsupported where the platform
// has no implementation. Safe for concurrent use.
type ThermalSource interface {
	MaxTemperatureC(ctx context.Context) (celsius float64, sensor string, err error)
}

// ProcessSource lists the names of running programs.
//
// ProgramNames returns, for every process it can see, the base name of its
// executable and its short process name where they differ (duplicates
// allowed). Processes it cannot inspect are left out, not an error; it
// returns an error only when the process list itself cannot be read. Safe
// for concurrent use.
type ProcessSource interface {
	ProgramNames(ctx context.Context) ([]string, error)
}

// GPUSource lists the machine's GPUs (the real one uses NVML and lives in
// package worker).
//
// GPUs returns an error whose message is a reason for people ("no NVIDIA
// driver", "built without NVML") when no GPU can be used. Safe for
// concurrent use.
type GPUSource interface {
	GPUs(ctx context.Context) ([]GPU, error)
}

// SourceOptions are the owner's choices about what the platform's
// sources count (Settings.SourceOptions), for DefaultSources.
type SourceOptions struct {
	// RemoteInput counts input in remote logins as the owner's: an SSH
	// terminal, any pseudo-terminal (/dev/pts), a remote desktop session
	// (Settings.RemoteInput). Off, the default, only the local seat
	// counts: the desktop's idle time (X11, logind's idle hint of a local
	// graphical session), the local consoles (/dev/tty1...) and the input
	// devices, so that a machine someone reaches over SSH still counts as
	// idle. Linux only: GetLastInputInfo (Windows) and HIDIdleTime (macOS)
	// see the local session's input alone either way.
	RemoteInput bool
}

// Sources are the probes a Sampler asks. A nil source yields an unknown
// reading with ErrNoSource; DefaultSources fills in the platform's real
// ones, except GPU.
type Sources struct {
	// InputIdle are asked in parallel; the smallest idle time among those
	// that answer is the reading, so one source that sees input is enough
	// to make the user active.
	InputIdle []InputIdleSource
	Load      LoadSource
	Power     PowerSource
	Thermal   ThermalSource
	Processes ProcessSource
	GPU       GPUSource
	// Games are the platform's signs of a game running, by sign; a sign
	// without a source sees no game.
	Games map[GameSign]GameSource
}
