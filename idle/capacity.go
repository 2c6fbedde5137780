package idle

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/shirou/gopsutil/v4/cpu"
	"github.com/shirou/gopsutil/v4/mem"
)

// Machine is the hardware this machine has, whatever the settings say.
type Machine struct {
	OS             string // runtime.GOOS: "linux", "windows", "darwin"
	Arch           string // runtime.GOARCH: "amd64", "arm64"
	CPUModel       string // "AMD Ryzen 9 7950X 16-Core Processor"; "" when unknown
	LogicalCPUs    int
	MemoryTotalMiB int64 // physical memory; 0 when unknown
	// TimeZone is the IANA name of the machine's local zone
	// ("Europe/Berlin"), or "Local" when it cannot be told.
	TimeZone string
}

// ReadMachine reads the CPU model (gopsutil's cpu.Info, from /proc/cpuinfo
// on Linux) and the physical memory (gopsutil's mem.VirtualMemory). What
// cannot be read stays empty and is named in the error, which is
// therefore informative only: the Machine returned is always usable.
func ReadMachine(ctx context.Context) (Machine, error) {
	m := Machine{OS: runtime.GOOS, Arch: runtime.GOARCH, LogicalCPUs: runtime.NumCPU(), TimeZone: localZoneName()}
	var errs []string
	if infos, err := cpu.InfoWithContext(ctx); err != nil {
		errs = append(errs, fmt.Sprintf("CPU model: %v", err))
	} else if len(infos) > 0 {
		m.CPUModel = strings.Join(strings.Fields(infos[0].ModelName), " ")
	}
	if vm, err := mem.VirtualMemoryWithContext(ctx); err != nil {
		errs = append(errs, fmt.Sprintf("memory: %v", err))
	} else {
		m.MemoryTotalMiB = int64(vm.Total >> 20)
	}
	if len(errs) > 0 {
		return m, fmt.Errorf("read machine: %s", strings.Join(errs, "; "))
	}
	return m, nil
}

// localZoneName names time.Local: $TZ when it names a zone, else the
// zoneinfo file /etc/localtime links to (Linux, macOS), else "Local".
func localZoneName() string {
	if name := time.Local.String(); name != "Local" && name != "" {
		return name
	}
	if tz := strings.TrimPrefix(os.Getenv("TZ"), ":"); tz != "" && !filepath.IsAbs(tz) {
		return tz
	}
	if target, err := filepath.EvalSymlinks("/etc/localtime"); err == nil {
		if _, name, ok := strings.Cut(filepath.ToSlash(target), "zoneinfo/"); ok {
			return name
		}
	}
	return "Local"
}

// Capacity is what this machine offers to pools: its hardware, the part
// of it the owner's settings allow, and the hours. It is what a capacity
// offer publishes; JSON field names are part of that format. Units are in
// the names.
type Capacity struct {
	OS          string `json:"os"`                  // runtime.GOOS
	Arch        string `json:"arch"`                // runtime.GOARCH
	CPUModel    string `json:"cpu_model,omitempty"` // "" when unknown
	LogicalCPUs int    `json:"logical_cpus"`
	// Cores is how many logical CPUs the settings offer (Settings.CoresFor).
	Cores int `json:"cores"`
	// CPUTimeShare (0..1) is the share of time each task computes on its
	// core (Settings.CPUTimeShare): a task takes about 1/CPUTimeShare as
	// long. 0 (absent) is no limit. It says how hard the machine works,
	// nothing about its owner.
	CPUTimeShare   float64 `json:"cpu_time_share,omitempty"`
	MemoryTotalMiB int64   `json:"memory_total_mib"`
	// MemoryMiB is the memory offered: Settings.MemoryShare of the total.
	MemoryMiB int64 `json:"memory_mib"`
	// GPUs are the GPUs the owner enabled that NVML found, by index;
	// empty (never null) when none.
	GPUs []GPUOffer `json:"gpus"`
	// Schedule is the weekly hours offered, in TimeZone's wall clock;
	// empty: any time.
	Schedule Schedule `json:"schedule"`
	// TimeZone is the IANA name the schedule is read in.
	TimeZone string `json:"time_zone"`
}

// GPUOffer is one GPU offered.
type GPUOffer struct {
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	ComputeCapability string `json:"compute_capability,omitempty"` // "8.9"; "" when NVML does not say
	MemoryTotalMiB    int64  `json:"memory_total_mib"`
	// MemoryMiB is the memory offered: the GPU's memory share of its
	// total.
	MemoryMiB int64 `json:"memory_mib"`
}

// NewCapacity combines the machine, the owner's settings and the GPUs NVML
// found (an unknown reading offers none). Momentary conditions — a GPU
// busy or hot now, the user active — do not change the offer; the policy
// deals with them when it is time to compute.
func NewCapacity(m Machine, s Settings, gpus Reading[[]GPU]) Capacity {
	c := Capacity{
		OS: m.OS, Arch: m.Arch, CPUModel: m.CPUModel,
		LogicalCPUs:    m.LogicalCPUs,
		Cores:          s.CoresFor(m.LogicalCPUs),
		CPUTimeShare:   s.CPUTimeShare,
		MemoryTotalMiB: m.MemoryTotalMiB,
		MemoryMiB:      int64(math.Floor(float64(m.MemoryTotalMiB) * s.MemoryShare)),
		GPUs:           []GPUOffer{},
		Schedule:       s.Schedule,
		TimeZone:       s.TimeZone,
	}
	if c.Schedule == nil {
		c.Schedule = Schedule{}
	}
	if c.TimeZone == "" {
		c.TimeZone = m.TimeZone
	}
	if gpus.Known {
		gs := slices.Clone(gpus.Value)
		slices.SortFunc(gs, func(a, b GPU) int { return a.Index - b.Index })
		for _, g := range gs {
			set := s.gpu(g.UUID)
			if !set.Use {
				continue
			}
			c.GPUs = append(c.GPUs, GPUOffer{
				UUID: g.UUID, Name: g.Name, ComputeCapability: g.ComputeCapability,
				MemoryTotalMiB: g.MemoryTotalMiB,
				MemoryMiB:      int64(math.Floor(float64(g.MemoryTotalMiB) * set.MemoryShare)),
			})
		}
	}
	return c
}
