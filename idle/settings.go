package idle

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"idlepool/energy"
)

// Settings are the owner's rules for when and how much this machine
// computes. The zero value is not useful: start from Defaults. Validate
// checks a Settings once, naming the field at fault. Settings are plain
// values, safe to copy; the GPUs map is shared by copies.
//
// As JSON (the local store and `idlepool settings --json`), durations are
// Go duration strings ("5m0s"), the schedule is a list of windows
// {"days": "Mon-Fri", "start": "22:00", "end": "07:00"}, and a field
// missing from a stored document keeps its default.
type Settings struct {
	// Schedule is the weekly allowed hours in TimeZone's wall-clock time;
	// empty: any time. See Window for daylight-saving changes.
	Schedule Schedule `json:"schedule"`
	// TimeZone is the IANA name of the schedule's zone ("Europe/Berlin");
	// "" is the machine's local zone (time.Local).
	TimeZone string `json:"time_zone,omitempty"`

	// Cores is how many logical CPUs to compute on. At most one of Cores
	// and CoresShare is set; when neither is, all but one (at least one).
	// A count above the machine's CPUs means all of them.
	Cores int `json:"cores,omitempty"`
	// CoresShare (0..1] is the share of the logical CPUs to compute on,
	// rounded down, at least one.
	CoresShare float64 `json:"cores_share,omitempty"`
	// CPUTimeShare (MinCPUTimeShare..1) is how hard to work: the share of
	// time each task may compute on its core, enforced by a duty cycle
	// on the worker processes (worker.Pool.SetCPUShare: 0.5 computes 50
	// ms of every 100). 0, the default, and 1 do not limit.
	CPUTimeShare float64 `json:"cpu_time_share,omitempty"`
	// NoIdlePriority runs tasks at a low priority instead of the OS's
	// idle one (idle_priority=false: worker.PriorityLow, so that they
	// progress while other programs keep the CPU busy). False, the
	// default, runs them only on CPU time nothing else wants
	// (worker.PriorityIdle).
	NoIdlePriority bool `json:"no_idle_priority,omitempty"`
	// MemoryShare (0..1] is the share of physical memory tasks may use
	// together; it is what the capacity offer publishes. Default 0.5.
	MemoryShare float64 `json:"memory_share"`

	// IdleFor is how long the owner's input must have been idle before
	// computing starts, and again after each time they were active.
	// Default 5 minutes. Zero ignores input entirely (a headless server
	// with no input source).
	IdleFor time.Duration `json:"-"`
	// RemoteInput counts input in remote logins (an SSH terminal, any
	// pseudo-terminal, a remote desktop session) as the owner being at
	// the machine (SourceOptions.RemoteInput). Default false: only the
	// local seat counts, so a machine reached over SSH still computes.
	RemoteInput bool `json:"remote_input,omitempty"`
	// MaxOtherCPUShare (0..1] is the share of all CPU capacity that other
	// programs may use before computing steps aside (after LoadHold above
	// it); 1 never steps aside for load. Default 0.5.
	MaxOtherCPUShare float64 `json:"max_other_cpu_share"`

	// PauseOnBattery waits while a discharging internal battery powers
	// the machine. Default true.
	PauseOnBattery bool `json:"pause_on_battery"`
	// MinBatteryPercent (0..100) waits, when on battery and
	// PauseOnBattery is false, while the battery is below it; 0: no
	// minimum.
	MinBatteryPercent float64 `json:"min_battery_percent,omitempty"`

	// PauseFor lists programs (process names, e.g. "game.exe",
	// "steam") that pause computing while any of them runs.
	PauseFor []string `json:"pause_for,omitempty"`

	// PauseForFullScreen, PauseForGameMode and PauseForSteam pause
	// computing while a game runs, as told without a list by each sign
	// (see GameSign): the active window full-screen, GameMode's
	// registered clients, Steam's running game. Each defaults to true; a
	// stored document without the field keeps the default.
	PauseForFullScreen bool `json:"pause_for_fullscreen"`
	PauseForGameMode   bool `json:"pause_for_gamemode"`
	PauseForSteam      bool `json:"pause_for_steam"`

	// MaxTemperatureC is the CPU temperature ceiling in °C: above it
	// computing waits until the CPU has cooled TemperatureMarginC below
	// it. 0: no ceiling. Default 85. Always stored, so that an owner's
	// 0 is not read back as the default.
	MaxTemperatureC float64 `json:"max_temperature_c"`

	// GPUs holds the owner's choice per GPU, by NVML UUID. A GPU not in
	// the map is not used.
	GPUs map[string]GPUSettings `json:"gpus,omitempty"`

	// CacheMiB caps, in MiB, the disk the donor's cache takes: the jobs'
	// programs and inputs (each stored once, by digest) and the workers'
	// compiled code. 0 means DefaultCacheMiB.
	CacheMiB int64 `json:"cache_mib,omitempty"`
	// ShareDiskMiB caps, in MiB, the disk the chunks this device keeps
	// to serve other devices of its pools take (package castore): the
	// least recently used chunks no task needs go first. 0 means
	// DefaultShareDiskMiB.
	ShareDiskMiB int64 `json:"share_disk_mib,omitempty"`
	// NoSharePeers keeps this device from serving the chunks it holds to
	// other devices of its pools (share_peers=false): it fetches jobs'
	// files from the coordinator only and uploads nothing. False, the
	// default, shares within ShareDiskMiB.
	NoSharePeers bool `json:"no_share_peers,omitempty"`
	// ShareUploadKiBps caps, in KiB per second, the chunk bytes this
	// device sends to other devices, over all its pools together
	// (share_upload=2MiB/s). 0 means DefaultShareUploadKiBps;
	// ShareUploadUnlimited means no cap (share_upload=unlimited).
	ShareUploadKiBps int64 `json:"share_upload_kibps,omitempty"`

	// NoUpdates turns the self-update off (updates=false): idlepool
	// then neither checks for nor downloads new releases. False, the
	// default, checks at most once a day.
	NoUpdates bool `json:"no_updates,omitempty"`
	// UpdateURL is the release location the self-update reads (a
	// release directory that make release wrote, served over HTTP(S));
	// "" means the one the installed package names, or none.
	UpdateURL string `json:"update_url,omitempty"`
	// UpdateKiBps caps, in KiB per second, the download of a release
	// (update_download=512KiB/s). 0 means DefaultUpdateKiBps;
	// ShareUploadUnlimited means no cap.
	UpdateKiBps int64 `json:"update_kibps,omitempty"`

	// Tariff is what a kWh costs the donor, by hour of TimeZone's day
	// (energy.Tariff; "0.32 EUR", "EUR 0.35 23-7=0.15"); unset: no cost
	// is shown and MaxPricePerKWh cannot be set.
	Tariff energy.Tariff `json:"tariff,omitzero"`
	// CO2GramsPerKWh is the carbon intensity of the donor's electricity;
	// 0: energy.DefaultCO2GramsPerKWh (the world average).
	CO2GramsPerKWh float64 `json:"co2_g_per_kwh,omitempty"`
	// CPURatedW is the processor's rated power in watts, for the
	// estimates of a machine without readable energy counters; 0:
	// energy.DefaultRatedW.
	CPURatedW float64 `json:"cpu_rated_w,omitempty"`
	// EnergyDayKWh and EnergyMonthKWh cap the energy tasks may add per
	// day and per calendar month of TimeZone, in kWh; 0: no cap. Once
	// reached, computing pauses until the next day or month.
	EnergyDayKWh   float64 `json:"energy_day_kwh,omitempty"`
	EnergyMonthKWh float64 `json:"energy_month_kwh,omitempty"`
	// MaxPricePerKWh waits while Tariff's price of the hour is above it,
	// in Tariff's currency; 0: no bound.
	MaxPricePerKWh float64 `json:"max_price_per_kwh,omitempty"`
	// GPUPowerW is a ceiling on the board power of each GPU computing
	// tasks, in watts; 0: none. The GPU's driver holds it as the
	// board's power limit where it lets this user set one; where it
	// refuses (most need root or an administrator), the workers' duty
	// cycle keeps the GPU's average draw under it.
	GPUPowerW float64 `json:"gpu_power_w,omitempty"`
	// QuietHours are weekly windows in which never to compute (fan
	// noise at night), in TimeZone's wall-clock time; empty: none.
	QuietHours Schedule `json:"quiet_hours,omitempty"`

	// PausedUntil is set when the owner paused computing ("pause for an
	// hour", "until tomorrow"); zero when not paused. It is a wall-clock
	// time so that it survives a restart, but Decide turns it into a
	// monotonic deadline the first time it sees it: moving the wall clock
	// afterwards neither ends nor stretches the pause.
	PausedUntil time.Time `json:"paused_until,omitzero"`

	// ComputeUntil is set when the owner asked to compute now ("compute
	// now for an hour", "until my hours start"): until then the hours,
	// the idle wait and other programs' load do not hold computing back;
	// the battery, the temperature ceilings and, unless
	// ComputeDuringPrograms, the listed programs still do. Like
	// PausedUntil it is a wall-clock time turned into a monotonic
	// deadline by Decide; zero when not set. See SetComputeUntil.
	ComputeUntil time.Time `json:"compute_until,omitzero"`
	// ComputeDuringPrograms lets ComputeUntil compute also while a
	// program of PauseFor runs.
	ComputeDuringPrograms bool `json:"compute_during_programs,omitempty"`
	// FinishThenPause is set when the owner asked to finish the tasks in
	// hand and then pause: no new task is taken, the running ones finish
	// and report, and then computing stays paused until the owner
	// resumes (Resume). See SetFinishThenPause.
	FinishThenPause bool `json:"finish_then_pause,omitempty"`
}

// GPUSettings is the owner's choice for one GPU.
type GPUSettings struct {
	// Use allows computing on this GPU. Default false.
	Use bool `json:"use"`
	// MemoryShare (0..1] is the share of its memory tasks may use.
	// Default 0.5 (0 in a stored document means the default).
	MemoryShare float64 `json:"memory_share,omitempty"`
	// MaxTemperatureC is its temperature ceiling in °C; 0: none.
	MaxTemperatureC float64 `json:"max_temperature_c,omitempty"`
	// MaxOtherShare (0..1) skips the GPU while other processes use more
	// than this share of it (of its memory, or of its time when we are
	// not using it); 0 means DefaultGPUMaxOtherShare, 1 never skips.
	MaxOtherShare float64 `json:"max_other_share,omitempty"`
}

// Defaults for Settings and GPUSettings fields.
const (
	DefaultIdleFor          = 5 * time.Minute
	DefaultMemoryShare      = 0.5
	DefaultMaxOtherCPUShare = 0.5
	DefaultMaxTemperatureC  = 85
	DefaultGPUMemoryShare   = 0.5
	DefaultGPUMaxOtherShare = 0.1
	DefaultCacheMiB         = 4096 // 4 GiB
	DefaultShareDiskMiB     = 2048 // 2 GiB

	// DefaultShareUploadKiBps is the cap on what a device sends to the
	// other devices of its pools when the owner set none: 1 MiB/s, about
	// 8.4 Mbit/s. A home's upload is commonly 10 to 50 Mbit/s (cable,
	// VDSL; more on fibre, about 1 on old ADSL): the cap leaves at least
	// half of a 20 Mbit/s line to the household (a video call sends 2 to
	// 4 Mbit/s), while a peer still gets a 256 KiB chunk in a quarter of a
	// second and a 100 MiB input in under two minutes. Serving without
	// pause it sends at most 3.5 GiB an hour: an owner on a metered or a
	// slow line sets it lower (share_upload) or turns sharing off
	// (share_peers=false); one on fibre may raise it.
	DefaultShareUploadKiBps = 1024

	// DefaultUpdateKiBps is the cap on a release's download when the
	// owner set none: a 40 MB release comes down in under a minute and
	// never fills a home line.
	DefaultUpdateKiBps = 1024

	// ShareUploadUnlimited is the ShareUploadKiBps of an owner who lifted
	// the cap (share_upload=unlimited).
	ShareUploadUnlimited = -1

	// MinCPUTimeShare is the smallest CPUTimeShare: 5 ms of every 100
	// (worker.MinCPUShare).
	MinCPUTimeShare = 0.05
)

// CPUTime is the share of time each task may compute: CPUTimeShare, or 1
// (no limit) when it is 0.
func (s Settings) CPUTime() float64 {
	if s.CPUTimeShare > 0 {
		return s.CPUTimeShare
	}
	return 1
}

// CacheBytes is the cache's cap in bytes: CacheMiB, or DefaultCacheMiB
// when unset.
func (s Settings) CacheBytes() int64 {
	if s.CacheMiB > 0 {
		return s.CacheMiB << 20
	}
	return DefaultCacheMiB << 20
}

// ShareDiskBytes is the cap of the chunks kept for other devices, in
// bytes: ShareDiskMiB, or DefaultShareDiskMiB when unset.
func (s Settings) ShareDiskBytes() int64 {
	if s.ShareDiskMiB > 0 {
		return s.ShareDiskMiB << 20
	}
	return DefaultShareDiskMiB << 20
}

// ShareUploadBytesPerSecond is the cap of the chunk bytes sent to other
// devices, in bytes per second: ShareUploadKiBps, DefaultShareUploadKiBps
// when unset, and 0 for none (ShareUploadUnlimited), as
// p2p.NewUploadLimit takes it.
func (s Settings) ShareUploadBytesPerSecond() int64 {
	switch {
	case s.ShareUploadKiBps == ShareUploadUnlimited:
		return 0
	case s.ShareUploadKiBps > 0:
		return s.ShareUploadKiBps << 10
	}
	return DefaultShareUploadKiBps << 10
}

// UpdateBytesPerSecond is the cap of a release's download in bytes per
// second: UpdateKiBps, DefaultUpdateKiBps when unset, and 0 for none.
func (s Settings) UpdateBytesPerSecond() int {
	switch {
	case s.UpdateKiBps == ShareUploadUnlimited:
		return 0
	case s.UpdateKiBps > 0:
		return int(s.UpdateKiBps << 10)
	}
	return DefaultUpdateKiBps << 10
}

// Bounds of ParseUploadRate, in KiB/s: below 64 KiB/s one 256 KiB chunk
// takes seconds, and a peer asking for several gives up on them.
const (
	MinShareUploadKiBps = 64
	maxShareUploadKiBps = 1 << 30 // 1 TiB/s
)

// ParseUploadRate parses an upload cap such as "2MiB/s", "500 KB/s" or
// "8MiB" (per second either way) into KiB per second; "" and "default"
// mean the default (0: DefaultShareUploadKiBps), "unlimited", "none" and
// "0" no cap (ShareUploadUnlimited). Errors name the value and what is
// wrong with it: not a rate, an unknown unit, below MinShareUploadKiBps
// or above 1 TiB/s.
func ParseUploadRate(v string) (kibps int64, err error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "", "default":
		return 0, nil
	case "none", "unlimited", "no limit", "0":
		return ShareUploadUnlimited, nil
	}
	num := strings.TrimSpace(strings.TrimSuffix(v, "/s"))
	i := strings.IndexFunc(num, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("%q is not a rate: write a number and a unit, e.g. 2MiB/s or 500KB/s, or \"unlimited\"", v)
	}
	n, err := strconv.ParseFloat(num[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate: write a number and a unit, e.g. 2MiB/s or 500KB/s", v)
	}
	units := map[string]float64{
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
	}
	unit, ok := units[strings.ToLower(strings.TrimSpace(num[i:]))]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (use KiB/s, MiB/s, GiB/s, or KB/s, MB/s, GB/s)", v, strings.TrimSpace(num[i:]))
	}
	f := n * unit / (1 << 10)
	switch {
	case f < MinShareUploadKiBps:
		return 0, fmt.Errorf("%q is below %d KiB/s: a slower upload serves no chunk in time (turn sharing off with share_peers=false instead)", v, MinShareUploadKiBps)
	case f > maxShareUploadKiBps:
		return 0, fmt.Errorf("%q is above 1 TiB/s", v)
	}
	return int64(math.Floor(f)), nil
}

// Defaults returns the settings a new installation starts with: any time,
// all cores but one, half the memory, after 5 minutes of idle input, not
// on battery, below 85 °C, no programs listed but paused while a game
// runs (full-screen, GameMode, Steam), no GPU.
func Defaults() Settings {
	return Settings{
		MemoryShare:        DefaultMemoryShare,
		IdleFor:            DefaultIdleFor,
		MaxOtherCPUShare:   DefaultMaxOtherCPUShare,
		PauseOnBattery:     true,
		PauseForFullScreen: true,
		PauseForGameMode:   true,
		PauseForSteam:      true,
		MaxTemperatureC:    DefaultMaxTemperatureC,
	}
}

// Validate checks every field and returns an error naming the first field
// at fault and what it accepts.
func (s Settings) Validate() error {
	for i, w := range s.Schedule {
		if err := w.validate(); err != nil {
			return fmt.Errorf("schedule: window %d: %w", i+1, err)
		}
	}
	if s.TimeZone != "" {
		if _, err := location(s.TimeZone); err != nil {
			return fmt.Errorf("time_zone: %q is not a known time zone (an IANA name such as Europe/Berlin, or empty for the local zone)", s.TimeZone)
		}
	}
	switch {
	case s.Cores < 0:
		return fmt.Errorf("cores: must be 0 (the default) or more, got %d", s.Cores)
	case !inShare(s.CoresShare) && s.CoresShare != 0:
		return fmt.Errorf("cores_share: must be a share above 0 and at most 1, got %g", s.CoresShare)
	case s.Cores > 0 && s.CoresShare > 0:
		return fmt.Errorf("cores and cores_share: set one of them, not both")
	case s.CPUTimeShare != 0 && !(s.CPUTimeShare >= MinCPUTimeShare && s.CPUTimeShare <= 1):
		return fmt.Errorf("cpu_time_share: must be 0 (no limit) or a share from %g to 1, got %g", MinCPUTimeShare, s.CPUTimeShare)
	case !inShare(s.MemoryShare):
		return fmt.Errorf("memory_share: must be a share above 0 and at most 1, got %g", s.MemoryShare)
	case s.IdleFor < 0:
		return fmt.Errorf("idle_for: must not be negative, got %s", s.IdleFor)
	case !inShare(s.MaxOtherCPUShare):
		return fmt.Errorf("max_other_cpu_share: must be a share above 0 and at most 1, got %g", s.MaxOtherCPUShare)
	case !(s.MinBatteryPercent >= 0 && s.MinBatteryPercent <= 100):
		return fmt.Errorf("min_battery_percent: must be 0 to 100, got %g", s.MinBatteryPercent)
	case !(s.MaxTemperatureC >= 0 && s.MaxTemperatureC <= 150):
		return fmt.Errorf("max_temperature_c: must be 0 (no ceiling) to 150 °C, got %g", s.MaxTemperatureC)
	case s.CacheMiB < 0 || s.CacheMiB > maxCacheMiB:
		return fmt.Errorf("cache_mib: must be 0 (the default, %d MiB) to %d MiB, got %d", DefaultCacheMiB, maxCacheMiB, s.CacheMiB)
	case s.ShareDiskMiB < 0 || s.ShareDiskMiB > maxCacheMiB:
		return fmt.Errorf("share_disk_mib: must be 0 (the default, %d MiB) to %d MiB, got %d", DefaultShareDiskMiB, maxCacheMiB, s.ShareDiskMiB)
	case s.ShareUploadKiBps != 0 && s.ShareUploadKiBps != ShareUploadUnlimited &&
		(s.ShareUploadKiBps < MinShareUploadKiBps || s.ShareUploadKiBps > maxShareUploadKiBps):
		return fmt.Errorf("share_upload_kibps: must be 0 (the default, %d KiB/s), %d (no cap) or %d to %d KiB/s, got %d",
			DefaultShareUploadKiBps, ShareUploadUnlimited, MinShareUploadKiBps, maxShareUploadKiBps, s.ShareUploadKiBps)
	}
	for i, w := range s.QuietHours {
		if err := w.validate(); err != nil {
			return fmt.Errorf("quiet_hours: window %d: %w", i+1, err)
		}
	}
	switch {
	case !(s.CO2GramsPerKWh >= 0 && s.CO2GramsPerKWh <= 2000):
		return fmt.Errorf("co2_g_per_kwh: must be 0 (the default, %d g/kWh) to 2000, got %g", energy.DefaultCO2GramsPerKWh, s.CO2GramsPerKWh)
	case !(s.CPURatedW >= 0 && s.CPURatedW <= 2000):
		return fmt.Errorf("cpu_rated_w: must be 0 (the default, %d W) to 2000 W, got %g", energy.DefaultRatedW, s.CPURatedW)
	case !(s.EnergyDayKWh >= 0) || math.IsInf(s.EnergyDayKWh, 0):
		return fmt.Errorf("energy_day_kwh: must be 0 (no cap) or more kWh, got %g", s.EnergyDayKWh)
	case !(s.EnergyMonthKWh >= 0) || math.IsInf(s.EnergyMonthKWh, 0):
		return fmt.Errorf("energy_month_kwh: must be 0 (no cap) or more kWh, got %g", s.EnergyMonthKWh)
	case s.GPUPowerW != 0 && !(s.GPUPowerW >= 10 && s.GPUPowerW <= 2000):
		return fmt.Errorf("gpu_power_w: must be 0 (no ceiling) or 10 to 2000 W, got %g", s.GPUPowerW)
	case !(s.MaxPricePerKWh >= 0) || math.IsInf(s.MaxPricePerKWh, 0):
		return fmt.Errorf("max_price_per_kwh: must be 0 (no bound) or more, got %g", s.MaxPricePerKWh)
	case s.MaxPricePerKWh > 0 && !s.Tariff.IsSet():
		return fmt.Errorf("max_price_per_kwh: needs a tariff to compare with: set tariff first (e.g. \"EUR 0.35 23-7=0.15\")")
	}
	for i, p := range s.PauseFor {
		if strings.TrimSpace(p) == "" {
			return fmt.Errorf("pause_for: program %d is empty", i+1)
		}
	}
	for _, uuid := range slices.Sorted(maps.Keys(s.GPUs)) {
		g := s.GPUs[uuid]
		switch {
		case strings.TrimSpace(uuid) == "":
			return fmt.Errorf("gpus: a GPU has an empty UUID")
		case g.MemoryShare != 0 && !inShare(g.MemoryShare):
			return fmt.Errorf("gpus.%s.memory_share: must be a share above 0 and at most 1, got %g", uuid, g.MemoryShare)
		case !(g.MaxTemperatureC >= 0 && g.MaxTemperatureC <= 150):
			return fmt.Errorf("gpus.%s.max_temperature_c: must be 0 (no ceiling) to 150 °C, got %g", uuid, g.MaxTemperatureC)
		case g.MaxOtherShare != 0 && !inShare(g.MaxOtherShare):
			return fmt.Errorf("gpus.%s.max_other_share: must be a share above 0 and at most 1, got %g", uuid, g.MaxOtherShare)
		}
	}
	return nil
}

func inShare(f float64) bool { return f > 0 && f <= 1 }

// CoresFor returns how many of cpus logical CPUs the settings offer:
// Cores (at most cpus), CoresShare of cpus rounded down, or all but one;
// at least 1. An unknown CPU count (cpus < 1) counts as 1.
func (s Settings) CoresFor(cpus int) int {
	cpus = max(cpus, 1)
	switch {
	case s.Cores > 0:
		return min(s.Cores, cpus)
	case s.CoresShare > 0:
		return max(1, int(math.Floor(s.CoresShare*float64(cpus)+1e-9)))
	default:
		return max(1, cpus-1)
	}
}

// SourceOptions are the settings' choices about what the input sources
// count, for DefaultSources.
func (s Settings) SourceOptions() SourceOptions { return SourceOptions{RemoteInput: s.RemoteInput} }

// Location returns the schedule's time zone: TimeZone loaded, or
// time.Local when it is empty or cannot be loaded.
func (s Settings) Location() *time.Location {
	if s.TimeZone == "" {
		return time.Local
	}
	loc, err := location(s.TimeZone)
	if err != nil {
		return time.Local
	}
	return loc
}

var locations sync.Map // name -> *time.Location: Decide runs every second; LoadLocation reads a file

func location(name string) (*time.Location, error) {
	if l, ok := locations.Load(name); ok {
		return l.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, err
	}
	locations.Store(name, loc)
	return loc, nil
}

// gpu returns the settings for uuid with defaults filled in.
func (s Settings) gpu(uuid string) GPUSettings {
	g := s.GPUs[uuid]
	if g.MemoryShare == 0 {
		g.MemoryShare = DefaultGPUMemoryShare
	}
	if g.MaxOtherShare == 0 {
		g.MaxOtherShare = DefaultGPUMaxOtherShare
	}
	return g
}

// settingsJSON is Settings' JSON form: IdleFor as a duration string.
type settingsJSON struct {
	settingsAlias
	IdleFor string `json:"idle_for"`
}

type settingsAlias Settings

// MarshalJSON writes IdleFor as "5m0s".
func (s Settings) MarshalJSON() ([]byte, error) {
	return json.Marshal(settingsJSON{settingsAlias(s), s.IdleFor.String()})
}

// UnmarshalJSON reads the form MarshalJSON writes; fields that are
// missing keep the value they had, so decoding into Defaults() fills
// them.
func (s *Settings) UnmarshalJSON(b []byte) error {
	v := settingsJSON{settingsAlias: settingsAlias(*s), IdleFor: s.IdleFor.String()}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	d, err := time.ParseDuration(v.IdleFor)
	if err != nil {
		return fmt.Errorf("idle_for: %q is not a duration such as 5m", v.IdleFor)
	}
	*s = Settings(v.settingsAlias)
	s.IdleFor = d
	return nil
}

// SettingKeys lists the keys Set accepts, with what each takes, for help
// texts. "gpu.UUID.FIELD" stands for the per-GPU keys.
var SettingKeys = []struct{ Key, Takes string }{
	{"hours", `weekly allowed hours, e.g. "Mon-Fri 22:00-07:00; Sat,Sun" or "always"`},
	{"time_zone", `IANA zone of the hours, e.g. Europe/Berlin; "" for the local zone`},
	{"cores", `a count (6), a share (0.75 or 75%), or "default" (all but one)`},
	{"cpu_time", `how hard to work: the share of time each task computes on its core, from 5% to 100% (0.5 or 50%), or "full" (the default)`},
	{"idle_priority", `true or false: run tasks only at the system's idle priority (the default), or at a low one that still progresses while other programs keep the CPU busy (false)`},
	{"memory", `share of memory tasks may use (0.5 or 50%)`},
	{"idle_for", `input idle time before computing, e.g. 5m; 0 ignores input`},
	{"remote_input", `true or false: input in remote logins (SSH terminals, remote desktops) counts as you being at the machine (false: only the local keyboard, mouse and screen)`},
	{"max_other_cpu", `share of CPU other programs may use before stepping aside (50%)`},
	{"pause_on_battery", `true or false`},
	{"min_battery", `battery percent below which to wait when on battery (0: none)`},
	{"pause_for", `programs that pause computing, comma-separated (game.exe,steam)`},
	{"pause_for_fullscreen", `true or false: pause while the active window is full-screen (a game)`},
	{"pause_for_gamemode", `true or false: pause while GameMode has games registered`},
	{"pause_for_steam", `true or false: pause while Steam runs a game`},
	{"pause_for_games", `true or false: the three above at once`},
	{"max_temperature", `CPU ceiling in °C (0: none)`},
	{"cache", `disk for jobs' files and compiled programs, e.g. 2GiB, 500MB or "default" (4GiB)`},
	{"share_disk", `disk for file chunks kept to serve other devices of your pools, e.g. 1GiB or "default" (2GiB)`},
	{"share_peers", `true or false: serve the file chunks you hold to other devices of your pools (false: fetch from the coordinator only, upload nothing)`},
	{"share_upload", `cap on what you send to other devices, all pools together, e.g. 2MiB/s, "unlimited" or "default" (1MiB/s)`},
	{"updates", `true or false: keep idlepool up to date from its signed releases (the default), checked at most once a day`},
	{"update_url", `the release location to update from (http:// or https://), or "default" (the one the package names)`},
	{"update_download", `cap on a release's download, e.g. 512KiB/s, "unlimited" or "default" (1MiB/s)`},
	{"tariff", `what a kWh costs you, one price ("0.32 EUR") or by hour ("EUR 0.35 23-7=0.15"), or "none"`},
	{"co2", `grams of CO2 per kWh of your electricity (0: the world average, 480)`},
	{"cpu_rated_w", `your processor's rated power in W, for estimates where no counter is readable (0: 65)`},
	{"energy_day", `at most this many kWh a day, e.g. 2 (0: no cap)`},
	{"energy_month", `at most this many kWh a calendar month (0: no cap)`},
	{"gpu_power", `at most this many W on each GPU computing tasks, e.g. 150 (0: no ceiling), kept by the GPU's driver where it lets you set its limit, else by pausing the tasks part of the time`},
	{"max_price", `compute only while the tariff's price is at most this, per kWh (0: no bound)`},
	{"quiet_hours", `weekly hours never to compute, e.g. "daily 22:00-07:00", or "none"`},
	{"pause", `pause computing: a duration (1h), "tomorrow" (until midnight), a time (RFC 3339), "finish" (finish the tasks in hand, then pause until "off"), or "off"`},
	{"compute", `compute now, outside your hours and without waiting for idle: a duration (3h), "hours" (until your hours start), a time (RFC 3339), or "off"`},
	{"compute_during_programs", `true or false: compute now also while a pause_for program runs`},
	{"gpu.UUID.use", `true or false: compute on the GPU with this UUID`},
	{"gpu.UUID.memory", `share of its memory (0.5)`},
	{"gpu.UUID.max_temperature", `its ceiling in °C (0: none)`},
	{"gpu.UUID.max_other", `skip it while other processes use more than this share (0.1)`},
}

// ErrUnknownSetting is returned by Set for a key it does not know.
var ErrUnknownSetting = errors.New("idle: unknown setting")

// Set changes one setting from its text form, as a person types it
// (`idlepool settings set cores=6`); see SettingKeys. now is the wall
// clock, for "pause". It does not validate the whole Settings: call
// Validate after the last Set.
func (s *Settings) Set(key, value string, now time.Time) error {
	value = strings.TrimSpace(value)
	var err error
	switch key {
	case "hours", "schedule":
		s.Schedule, err = ParseSchedule(value)
	case "tariff":
		s.Tariff, err = energy.ParseTariff(value)
	case "co2", "co2_g_per_kwh":
		s.CO2GramsPerKWh, err = parseAmount(value, "grams per kWh")
	case "cpu_rated_w":
		s.CPURatedW, err = parseAmount(strings.TrimSuffix(value, "W"), "watts")
	case "energy_day", "energy_day_kwh":
		s.EnergyDayKWh, err = parseAmount(strings.TrimSuffix(value, "kWh"), "kWh")
	case "energy_month", "energy_month_kwh":
		s.EnergyMonthKWh, err = parseAmount(strings.TrimSuffix(value, "kWh"), "kWh")
	case "max_price", "max_price_per_kwh":
		s.MaxPricePerKWh, err = parseAmount(value, "a price per kWh")
	case "gpu_power", "gpu_power_w":
		s.GPUPowerW, err = parseAmount(strings.TrimSuffix(value, "W"), "watts")
	case "quiet_hours":
		if v := strings.ToLower(value); v == "none" || v == "off" {
			value = ""
		}
		s.QuietHours, err = ParseSchedule(value)
	case "time_zone", "tz":
		if value != "" {
			if _, lerr := location(value); lerr != nil {
				return fmt.Errorf("%s: %q is not a known time zone (an IANA name such as Europe/Berlin)", key, value)
			}
		}
		s.TimeZone = value
	case "cores":
		s.Cores, s.CoresShare = 0, 0
		switch {
		case value == "default" || value == "":
		case strings.HasSuffix(value, "%") || strings.Contains(value, "."):
			s.CoresShare, err = parseShare(value)
		default:
			s.Cores, err = strconv.Atoi(value)
			if err != nil {
				err = fmt.Errorf("want a count (6), a share (0.75 or 75%%) or default")
			} else if s.Cores < 1 {
				err = fmt.Errorf("a count must be at least 1")
			}
		}
	case "cpu_time", "cpu_time_share":
		s.CPUTimeShare, err = parseCPUTime(value)
	case "idle_priority":
		var on bool
		if on, err = parseBool(value); err == nil {
			s.NoIdlePriority = !on
		}
	case "memory", "memory_share":
		s.MemoryShare, err = parseShare(value)
	case "idle_for":
		s.IdleFor, err = parseDuration(value)
	case "remote_input":
		s.RemoteInput, err = parseBool(value)
	case "max_other_cpu", "max_other_cpu_share":
		s.MaxOtherCPUShare, err = parseShare(value)
	case "pause_on_battery":
		s.PauseOnBattery, err = parseBool(value)
	case "min_battery", "min_battery_percent":
		s.MinBatteryPercent, err = strconv.ParseFloat(strings.TrimSuffix(value, "%"), 64)
		if err != nil {
			err = fmt.Errorf("want a battery percent such as 30")
		}
	case "pause_for":
		s.PauseFor = nil
		for p := range strings.SplitSeq(value, ",") {
			if p = strings.TrimSpace(p); p != "" {
				s.PauseFor = append(s.PauseFor, p)
			}
		}
	case "pause_for_fullscreen":
		s.PauseForFullScreen, err = parseBool(value)
	case "pause_for_gamemode":
		s.PauseForGameMode, err = parseBool(value)
	case "pause_for_steam":
		s.PauseForSteam, err = parseBool(value)
	case "pause_for_games":
		var on bool
		if on, err = parseBool(value); err == nil {
			s.PauseForFullScreen, s.PauseForGameMode, s.PauseForSteam = on, on, on
		}
	case "max_temperature", "max_temperature_c":
		s.MaxTemperatureC, err = parseCelsius(value)
	case "cache", "cache_mib":
		s.CacheMiB, err = ParseCacheSize(value)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	case "share_disk", "share_disk_mib":
		s.ShareDiskMiB, err = ParseCacheSize(value)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	case "share_upload", "share_upload_kibps":
		s.ShareUploadKiBps, err = ParseUploadRate(value)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	case "updates":
		var on bool
		if on, err = parseBool(value); err == nil {
			s.NoUpdates = !on
		}
	case "update_url":
		if value == "default" || value == "" {
			s.UpdateURL = ""
			break
		}
		u, perr := url.Parse(value)
		if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s: %q is not an http:// or https:// URL (the release location a pool's operator publishes)", key, value)
		}
		s.UpdateURL = strings.TrimRight(value, "/")
	case "update_download", "update_kibps":
		s.UpdateKiBps, err = ParseUploadRate(value)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
	case "share_peers":
		var on bool
		if on, err = parseBool(value); err == nil {
			s.NoSharePeers = !on
		}
	case "pause", "paused_until":
		if strings.EqualFold(value, "finish") {
			s.SetFinishThenPause()
			break
		}
		var until time.Time
		if until, err = parsePause(value, now); err == nil {
			s.SetPause(until)
		}
	case "compute", "compute_until":
		var until time.Time
		if until, err = s.parseCompute(value, now); err == nil {
			s.SetComputeUntil(until)
		}
	case "compute_during_programs":
		s.ComputeDuringPrograms, err = parseBool(value)
	default:
		rest, ok := strings.CutPrefix(key, "gpu.")
		if !ok {
			rest, ok = strings.CutPrefix(key, "gpus.")
		}
		dot := strings.LastIndexByte(rest, '.')
		if !ok || dot <= 0 {
			return fmt.Errorf("%w %q (run `idlepool settings --help` for the list)", ErrUnknownSetting, key)
		}
		uuid, field := rest[:dot], rest[dot+1:]
		g := s.GPUs[uuid]
		switch field {
		case "use":
			g.Use, err = parseBool(value)
		case "memory", "memory_share":
			g.MemoryShare, err = parseShare(value)
		case "max_temperature", "max_temperature_c":
			g.MaxTemperatureC, err = parseCelsius(value)
		case "max_other", "max_other_share":
			g.MaxOtherShare, err = parseShare(value)
		default:
			return fmt.Errorf("%w %q: a GPU has use, memory, max_temperature and max_other", ErrUnknownSetting, key)
		}
		if err == nil {
			gpus := maps.Clone(s.GPUs)
			if gpus == nil {
				gpus = map[string]GPUSettings{}
			}
			gpus[uuid] = g
			s.GPUs = gpus
		}
	}
	if err != nil {
		return fmt.Errorf("%s=%s: %w", key, value, err)
	}
	return nil
}

// parseBool reads true or false (also yes/no, on/off, 1/0).
// parseAmount reads a number of what (0 or more); "none", "off" and ""
// are 0.
func parseAmount(v, what string) (float64, error) {
	v = strings.TrimSpace(v)
	switch strings.ToLower(v) {
	case "", "none", "off", "default":
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%q is not %s (a number, 0 or more)", v, what)
	}
	return f, nil
}

func parseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "true", "yes", "on", "1":
		return true, nil
	case "false", "no", "off", "0":
		return false, nil
	}
	return false, fmt.Errorf("want true or false")
}

func parseShare(v string) (float64, error) {
	div := 1.0
	if t, ok := strings.CutSuffix(v, "%"); ok {
		v, div = t, 100
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || !inShare(f/div) {
		return 0, fmt.Errorf("want a share above 0 and at most 1 (0.5) or a percentage (50%%)")
	}
	return f / div, nil
}

// parseCPUTime reads a CPUTimeShare: "full", "default", "none", "" or a
// share of 1 (100%) are no limit (0); else a share from MinCPUTimeShare.
func parseCPUTime(v string) (float64, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "full", "default", "none", "unlimited":
		return 0, nil
	}
	f, err := parseShare(v)
	if err != nil || f < MinCPUTimeShare {
		return 0, fmt.Errorf("want a share from %.0f%% to 100%% (0.5 or 50%%), or full", MinCPUTimeShare*100)
	}
	if f == 1 {
		return 0, nil
	}
	return f, nil
}

func parseCelsius(v string) (float64, error) {
	v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(v), "C"), "°"))
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("want degrees Celsius, e.g. 85")
	}
	return f, nil
}

func parseDuration(v string) (time.Duration, error) {
	if v == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("want a duration such as 5m or 90s")
	}
	return d, nil
}

func parsePause(v string, now time.Time) (time.Time, error) {
	switch strings.ToLower(v) {
	case "off", "no", "false", "resume", "":
		return time.Time{}, nil
	case "tomorrow":
		y, m, d := now.Date()
		return time.Date(y, m, d+1, 0, 0, 0, 0, now.Location()), nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("a pause must last more than 0")
		}
		return now.Add(d).Round(0).Truncate(time.Second), nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf(`want a duration (1h), "tomorrow", a time (2026-05-01T08:00:00+02:00) or "off"`)
}

// maxCacheMiB bounds CacheMiB: 64 TiB, more than any disk it would fit.
const maxCacheMiB = 64 << 20

// ParseCacheSize reads a cache size (Settings.CacheMiB) as a person types
// it and returns it in MiB: "2GiB", "500 MB", "1.5G" (K, M, G and T alone
// are binary units), or "default" or "" (0). A size needs its unit, and is
// 1 MiB to 64 TiB; the error says what is wrong.
func ParseCacheSize(v string) (mib int64, err error) {
	v = strings.TrimSpace(v)
	if v == "" || strings.EqualFold(v, "default") {
		return 0, nil
	}
	i := strings.IndexFunc(v, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, fmt.Errorf("%q is not a size: write a number and a unit, e.g. 2GiB or 500MB, or \"default\"", v)
	}
	n, err := strconv.ParseFloat(v[:i], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: write a number and a unit, e.g. 2GiB or 500MB", v)
	}
	units := map[string]float64{
		"k": 1 << 10, "kib": 1 << 10, "kb": 1e3,
		"m": 1 << 20, "mib": 1 << 20, "mb": 1e6,
		"g": 1 << 30, "gib": 1 << 30, "gb": 1e9,
		"t": 1 << 40, "tib": 1 << 40, "tb": 1e12,
	}
	unit, ok := units[strings.ToLower(strings.TrimSpace(v[i:]))]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (use KiB, MiB, GiB, TiB, or KB, MB, GB, TB)", v, strings.TrimSpace(v[i:]))
	}
	f := n * unit / (1 << 20)
	switch {
	case f < 1:
		return 0, fmt.Errorf("%q is below 1 MiB", v)
	case f > maxCacheMiB:
		return 0, fmt.Errorf("%q is above %d TiB", v, maxCacheMiB>>20)
	}
	return int64(math.Floor(f)), nil
}
