package idle

import (
	"slices"
	"time"
)

// Reading is one probe's answer: a value, whether it is known, which source
// gave it, and why not when it is unknown. A probe that fails or hangs past
// its timeout yields Known == false with Err set; it never blocks a caller.
type Reading[T any] struct {
	Value  T
	Known  bool
	Source string // e.g. "logind", "x11-screensaver", "/dev/input", "GetLastInputInfo"
	Err    string // why the value is unknown; "" when Known
}

// Power is the machine's power state. Only a discharging internal battery
// is "on battery": a desktop without a battery, or one on a USB UPS, is on
// AC.
type Power struct {
	OnBattery  bool
	HasBattery bool
	Percent    float64 // 0..100 of the internal battery; 0 when none
}

// GPU is one GPU as NVML reports it. Units are in the names.
type GPU struct {
	Index             int
	UUID              string
	Name              string
	MemoryTotalMiB    int64
	MemoryFreeMiB     int64
	UtilisationShare  float64 // 0..1, over NVML's last sample period
	TemperatureC      float64
	PowerW            float64
	ComputeCapability string // "9.0"
	// OtherProcesses lists the PIDs of processes using this GPU that are
	// not idlepool's; OtherMemoryMiB is what they hold.
	OtherProcesses []int
	OtherMemoryMiB int64
	// OurProcesses lists the PIDs of idlepool's own processes (a running
	// task's worker) with a context on this GPU: only then is part of its
	// utilisation ours.
	OurProcesses []int
}

// Signals is everything the policy looks at, sampled at one moment.
type Signals struct {
	At time.Time // wall clock, for the schedule; durations use the monotonic clock

	// InputIdle is how long since the last keyboard or mouse input of the
	// local user (and of a remote session, SSH with a tty or RDP, when
	// SourceOptions.RemoteInput). Unknown when no source works: unknown is
	// not idle.
	InputIdle Reading[time.Duration]
	// OtherCPUShare is the share of all CPU capacity (0..1) used by
	// processes that are not idlepool's own.
	OtherCPUShare Reading[float64]
	Power         Reading[Power]
	// MaxTemperatureC is the hottest CPU or chassis sensor.
	MaxTemperatureC Reading[float64]
	// Running lists the owner's "pause while running" programs that are
	// running now (as named in the settings).
	Running Reading[[]string]
	// Games are the games seen without a list, one per sign that saw one
	// (SamplerConfig.GameSigns says which signs are asked). A sign that
	// cannot exist here (no window manager, GameMode not running, Steam
	// not installed) sees none. Unknown when a sign asked failed; Value
	// then still holds what the others saw.
	Games Reading[[]Game]
	// GPUs are the GPUs NVML found; unknown with a reason ("no NVIDIA
	// driver", "built without NVML") otherwise.
	GPUs Reading[[]GPU]
	// CPUs is the number of logical CPUs.
	CPUs int
	// EnergyUsed is the energy this device's tasks added today and this
	// calendar month, by the settings' zone. A donor reads it from its
	// local store only while a cap is set; unknown otherwise.
	EnergyUsed Reading[EnergyUsed]
}

// EnergyUsed is what an energy cap counts: the energy this device's
// tasks added, in kWh, since the start of the day and of the month.
type EnergyUsed struct {
	DayKWh, MonthKWh float64
}

// State names what an agent is doing, for the tray icon and status.
type State string

// States of a Decision.
const (
	StateComputing State = "computing" // allowed to run tasks
	StateWaiting   State = "waiting"   // conditions not met: user active, on battery, outside hours, too hot
	StatePaused    State = "paused"    // the owner paused it, or a listed program runs
)

// Hold is why a device does not compute, in the coarse words that others
// may read: what a capacity offer publishes instead of the reason in
// words. It never names a program or a time (DESIGN.md invariant 19: what
// a donor does at their machine is theirs). The values are a wire format:
// never rename one.
type Hold string

// Holds of a Decision. HoldNone is a device that computes (or would, and
// only has no task).
const (
	HoldNone Hold = ""
	// HoldOwner is paused or waiting for its owner: paused by them, a
	// program or game of theirs running or run lately, their input not
	// idle long enough (or its idle time unknown), other programs busy.
	HoldOwner Hold = "owner"
	// HoldHours is outside the hours the owner allows.
	HoldHours Hold = "hours"
	// HoldBattery is on battery, or below the owner's battery minimum.
	HoldBattery Hold = "battery"
	// HoldLimit is at a limit the owner set to protect the machine: its
	// temperature ceiling.
	HoldLimit Hold = "limit"
)

// Holds lists every Hold but HoldNone, in the order people read them.
var Holds = []Hold{HoldOwner, HoldHours, HoldBattery, HoldLimit}

// Known reports whether h is one of the Holds or HoldNone; a reason in
// words (an offer of an agent before holds) is not.
func (h Hold) Known() bool { return h == HoldNone || slices.Contains(Holds, h) }

// Text is h for people who are not the owner: "for its owner", "outside
// its hours", "on battery", "at a limit"; "" for HoldNone and "for its
// owner" for an unknown value.
func (h Hold) Text() string {
	switch h {
	case HoldNone:
		return ""
	case HoldHours:
		return "outside its hours"
	case HoldBattery:
		return "on battery"
	case HoldLimit:
		return "at a limit"
	}
	return "for its owner"
}

// Decision is what the policy says an agent should do now, with the reason
// in words for people, e.g. "waiting: on battery (43%)", "paused: game.exe
// is running", "computing on 6 of 8 cores; GPU 0 skipped: another process
// uses 71% of it". The reason stays on this machine (the tray, the local
// status); Hold is what others may read.
type Decision struct {
	State  State
	Cores  int      // task slots allowed; 0 unless computing
	GPUs   []string // UUIDs of the GPUs allowed; empty unless computing
	Reason string
	// Hold is the coarse reason for not computing, HoldNone while
	// computing.
	Hold Hold `json:",omitempty"`
	// Finishing is set while the owner asked to finish the tasks in hand
	// and then pause (Settings.FinishThenPause): running tasks go on
	// (while the decision is to compute), but no new task is taken; once
	// none is in hand, whoever holds the tasks says it is paused.
	Finishing bool `json:",omitempty"`
	// ComputeNow is set while the owner's compute now
	// (Settings.ComputeUntil) is in force in this decision: computing
	// as asked, or waiting for what compute now does not override (the
	// battery, the temperature, a listed program). A reader that sees
	// compute now in the settings but not here has a decision made
	// before the owner asked, not yet made again.
	ComputeNow bool `json:",omitempty"`
	// Cause is the kind of reason for not computing, finer than Hold,
	// for this machine alone: the agent predicts from it how long the
	// pause lasts (early hand-back). Like Reason it is never published;
	// CauseNone while computing, and in decisions not made by Decide.
	Cause Cause `json:",omitempty"`
	// Until is when the reason ends at the earliest (wall clock): exactly
	// for the owner's pause and the hours (the next window), the end of
	// the idle wait for the owner's input or a game run lately; zero when
	// unknown (a program running, the battery, the temperature, no window
	// ahead in the hours).
	Until time.Time `json:",omitzero"`
	// GPUsAllowed lists, while the decision is not to compute, the GPUs
	// (UUIDs) that the settings and the GPUs' readings would allow
	// (switched on, below the temperature ceiling, not used by another
	// process): a task suspended on a GPU not listed must let go of it.
	// Empty while computing, where GPUs says it.
	GPUsAllowed []string `json:",omitempty"`
}

// Cause is the kind of reason a Decision does not compute, finer than
// Hold and for this machine alone (it never leaves it). The values are
// stable: the local status carries them.
type Cause string

// Causes of a Decision.
const (
	CauseNone Cause = ""
	// CausePaused is the owner's pause (Settings.PausedUntil; Until is
	// its end, zero for a pause until resumed).
	CausePaused Cause = "paused"
	// CauseGame is a game seen by a game sign (full screen, GameMode,
	// Steam); CauseProgram a program of Settings.PauseFor running, with
	// no game seen.
	CauseGame    Cause = "game"
	CauseProgram Cause = "program"
	// CauseHours is outside the hours (Until: the next window).
	CauseHours Cause = "hours"
	// CauseBattery is on battery, or below the battery minimum.
	CauseBattery Cause = "battery"
	// CauseHot is the CPU above its ceiling, or cooling below it.
	CauseHot Cause = "hot"
	// CauseActive is the owner using the machine: input not idle long
	// enough (or its idle time unknown), a game run lately.
	CauseActive Cause = "active"
	// CauseLoad is other programs' CPU load above the owner's limit, or
	// just fallen below it.
	CauseLoad Cause = "load"
	// CauseQuiet is the owner's quiet hours (Until: their end).
	CauseQuiet Cause = "quiet"
	// CausePrice is the tariff's price above the owner's bound (Until:
	// the next hour at or below it).
	CausePrice Cause = "price"
	// CauseEnergy is the owner's daily or monthly energy cap reached
	// (Until: the next midnight or first of the month).
	CauseEnergy Cause = "energy"
)

// Run reports whether tasks may run.
func (d Decision) Run() bool { return d.State == StateComputing && d.Cores > 0 }

// MayLease reports whether new tasks may be taken: Run, and not
// Finishing.
func (d Decision) MayLease() bool { return d.Run() && !d.Finishing }
