package energy

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// PowercapRoot is where Linux exposes the powercap interface.
const PowercapRoot = "/sys/class/powercap"

// RAPL reads the CPU packages' energy counters of Linux's powercap
// interface: one zone per package, intel-rapl:N (Intel, and AMD Zen 2 and
// later, which the kernel exposes under the same name), each with
// energy_uj (microjoules since some point, wrapping at
// max_energy_range_uj). Sub-zones (intel-rapl:N:M: cores, uncore, DRAM)
// are parts of a package or outside it and are not added. Source: the
// kernel's Documentation/power/powercap/powercap.rst.
//
// A RAPL is immutable once opened and safe for concurrent use.
type RAPL struct {
	fsys  fs.FS
	zones []zone
}

type zone struct {
	dir    string
	maxUJ  uint64 // max_energy_range_uj: the counter wraps to 0 past it
	energy string // dir/energy_uj
}

// OpenRAPL finds the package zones in fsys (os.DirFS(PowercapRoot), or a
// fake tree in tests) and reads each counter once. No zone is ErrNoCounter; a
// counter this user may not read is an *UnreadableError (matching
// ErrUnreadable), whose Hint says how to fix it.
func OpenRAPL(fsys fs.FS) (*RAPL, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no powercap interface", ErrNoCounter)
	}
	if err != nil {
		return nil, fmt.Errorf("read the powercap interface: %w", err)
	}
	r := &RAPL{fsys: fsys}
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, "intel-rapl:")
		if !ok || strings.Contains(rest, ":") {
			continue // not a package zone, or a sub-zone
		}
		maxUJ, err := readUint(fsys, path.Join(name, "max_energy_range_uj"))
		if err != nil {
			return nil, unreadable(path.Join(name, "max_energy_range_uj"), err)
		}
		r.zones = append(r.zones, zone{dir: name, maxUJ: maxUJ, energy: path.Join(name, "energy_uj")})
	}
	if len(r.zones) == 0 {
		return nil, fmt.Errorf("%w: no CPU package zone (intel-rapl:N) in the powercap interface", ErrNoCounter)
	}
	slices.SortFunc(r.zones, func(a, b zone) int { return strings.Compare(a.dir, b.dir) })
	if _, err := r.Read(); err != nil {
		return nil, err
	}
	return r, nil
}

// Zones returns the number of package zones.
func (r *RAPL) Zones() int { return len(r.zones) }

// Read returns each package zone's counter in microjoules, in zone order.
// A counter that cannot be read is an error (an *UnreadableError when
// permission was refused).
func (r *RAPL) Read() ([]uint64, error) {
	out := make([]uint64, len(r.zones))
	for i, z := range r.zones {
		v, err := readUint(r.fsys, z.energy)
		if err != nil {
			return nil, unreadable(z.energy, err)
		}
		out[i] = v
	}
	return out, nil
}

// Joules returns the energy in joules between two readings of Read, each
// zone's counter wrap-around undone: a counter below its earlier value
// wrapped once past max_energy_range_uj (a package at 100 W wraps about
// every 45 minutes, so a Meter samples more often than that).
func (r *RAPL) Joules(prev, cur []uint64) float64 {
	var uj uint64
	for i := range min(len(prev), len(cur), len(r.zones)) {
		uj += CounterDelta(prev[i], cur[i], r.zones[i].maxUJ)
	}
	return float64(uj) / 1e6
}

// Interval is Joules, always known: a powercap counter only wraps
// (CPUCounter).
func (r *RAPL) Interval(prev, cur []uint64) (float64, bool) { return r.Joules(prev, cur), true }

// CounterDelta returns how far a counter that wraps to 0 after maxValue
// advanced from prev to cur: cur-prev, or, when cur is below prev (it
// wrapped once), maxValue-prev+cur+1. A maxValue of 0 (unknown) treats a
// decrease as a reset and counts cur.
func CounterDelta(prev, cur, maxValue uint64) uint64 {
	switch {
	case cur >= prev:
		return cur - prev
	case maxValue == 0 || prev > maxValue:
		return cur
	}
	return maxValue - prev + cur + 1
}

func readUint(fsys fs.FS, name string) (uint64, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", name, err)
	}
	return v, nil
}

func unreadable(name string, err error) error {
	name = path.Join(PowercapRoot, name)
	if errors.Is(err, fs.ErrPermission) {
		return &UnreadableError{Path: name, Err: fs.ErrPermission}
	}
	return fmt.Errorf("read energy counter %s: %w", name, err)
}
