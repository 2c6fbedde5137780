package energy

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// EMIReader reads the raw values of the Energy counter of Windows'
// "Energy Meter" performance counter set, \Energy Meter(*)\Energy, one
// per instance (a meter's channel: RAPL_Package0_PKG, RAPL_Package0_PP0,
// RAPL_Package0_DRAM... on a machine whose processor driver republishes
// RAPL), keyed by instance name. The values are cumulative energy in
// picowatt-hours from no stated origin: the unit of the Energy Meter
// Interface that the counter set republishes ("In EMI_VERSION_V1, the
// only supported unit is picowatt-hours", EMI_CHANNEL_MEASUREMENT_DATA,
// https://learn.microsoft.com/windows/win32/api/emi/ns-emi-emi_channel_measurement_data).
// A machine that exposes no such counter set, or no instance of it, is
// ErrNoCounter. The Windows build reads it through pdh.dll
// (OpenSystemEMI); the tests use a fake. Called from one goroutine at a
// time.
type EMIReader interface {
	ReadEnergy() (map[string]uint64, error)
}

// pWhPerJoule: 1 pWh = 1e-12 W × 3600 s = 3.6e-9 J.
const joulesPerPWh = 3.6e-9

// EMI reads the CPU packages' energy from Windows' Energy Meter
// counters: the instances named *_PKG (RAPL_Package0_PKG: the whole
// package; the others are its parts, or outside it, and are not added),
// a CPUCounter as *RAPL is on Linux. Instances are kept in the order
// first seen; one that appears later is added, one that vanishes makes
// Read fail. It is safe for concurrent use.
type EMI struct {
	r EMIReader

	mu    sync.Mutex
	names []string // the package instances, in the order first seen
}

// OpenEMI reads r once and keeps its package instances. No instance at
// all, or none of a package (named *_PKG), is a *NotExposedError
// (matching ErrNoCounter).
func OpenEMI(r EMIReader) (*EMI, error) {
	e := &EMI{r: r}
	if _, err := e.Read(); err != nil {
		return nil, err
	}
	return e, nil
}

// NotExposedError says that this machine exposes no energy meter of
// its CPU packages in the Energy Meter counters, and why: the counter set
// is missing (a processor driver that does not republish RAPL, or Wine),
// has no instance, or none of a package. It matches ErrNoCounter. The
// CPU's energy is then estimated.
type NotExposedError struct {
	Reason string
}

func (e *NotExposedError) Error() string {
	return "the CPU's energy meter is not exposed: " + e.Reason
}

// Is reports whether target is ErrNoCounter.
func (e *NotExposedError) Is(target error) bool { return target == ErrNoCounter }

// isPackage reports whether an Energy Meter instance is a CPU package.
func isPackage(name string) bool { return strings.HasSuffix(strings.ToUpper(name), "_PKG") }

// Instances returns the package instances read so far.
func (e *EMI) Instances() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.names)
}

// Read returns each package instance's counter in picowatt-hours, in the
// order the instances were first seen (an instance new since the last
// Read comes last). A failed read, an instance gone, or none left, is an
// error.
func (e *EMI) Read() ([]uint64, error) {
	vals, err := e.r.ReadEnergy()
	if err != nil {
		return nil, fmt.Errorf("read the Energy Meter counters: %w", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.names) == 0 {
		if len(vals) == 0 {
			return nil, &NotExposedError{Reason: `the Energy Meter counter set (\Energy Meter(*)\Energy) has no instance`}
		}
		var pkgs []string
		for name := range vals {
			if isPackage(name) {
				pkgs = append(pkgs, name)
			}
		}
		if len(pkgs) == 0 {
			return nil, &NotExposedError{Reason: "no CPU package (*_PKG) among the Energy Meter's instances (" +
				strings.Join(slices.Sorted(maps.Keys(vals)), ", ") + ")"}
		}
		slices.Sort(pkgs)
		e.names = pkgs
	} else {
		var added []string
		for name := range vals {
			if isPackage(name) && !slices.Contains(e.names, name) {
				added = append(added, name)
			}
		}
		slices.Sort(added)
		e.names = append(e.names, added...)
	}
	out := make([]uint64, len(e.names))
	for i, name := range e.names {
		v, ok := vals[name]
		if !ok {
			return nil, fmt.Errorf("read the Energy Meter counters: instance %s is gone", name)
		}
		out[i] = v
	}
	return out, nil
}

// Interval returns the energy in joules between two readings of Read.
// It is not known (false) when an instance was added between them (its
// energy before its first reading is missing) or when a counter went
// back (the meter was reset, from an origin no one states): such an
// interval is estimated instead. The 64-bit counters in picowatt-hours
// wrap after 5 million years at 100 W: a decrease is a reset, never a
// wrap.
func (e *EMI) Interval(prev, cur []uint64) (float64, bool) {
	if len(prev) != len(cur) {
		return 0, false
	}
	var pwh uint64
	for i := range cur {
		if cur[i] < prev[i] {
			return 0, false
		}
		pwh += cur[i] - prev[i]
	}
	return float64(pwh) * joulesPerPWh, true
}

// CPUCounter reads the CPU packages' energy counters: *RAPL (Linux's
// powercap interface) and *EMI (Windows' Energy Meter counters)
// implement it. Read returns one value per package in a unit only
// Interval knows, or an error when a counter cannot be read (the
// interval is then estimated); Interval returns the joules between two
// readings, false when the counters cannot tell them (a reset). Both are
// safe for concurrent use.
type CPUCounter interface {
	Read() ([]uint64, error)
	Interval(prev, cur []uint64) (float64, bool)
}

var (
	_ CPUCounter = (*RAPL)(nil)
	_ CPUCounter = (*EMI)(nil)
)
