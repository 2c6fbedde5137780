package energy

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakePDH behaves as \Energy Meter(*)\Energy read through PDH: a raw
// value per instance in picowatt-hours, counting up; instances may
// appear; a read may fail (the counter set went away).
type fakePDH struct {
	pwh map[string]uint64
	err error
}

func (f *fakePDH) ReadEnergy() (map[string]uint64, error) {
	if f.err != nil {
		return nil, f.err
	}
	out := make(map[string]uint64, len(f.pwh))
	for k, v := range f.pwh {
		out[k] = v
	}
	return out, nil
}

// add adds joules to an instance, in picowatt-hours.
func (f *fakePDH) add(instance string, joules float64) {
	f.pwh[instance] += uint64(joules/joulesPerPWh + 0.5)
}

// A RAPL machine's meters: the package, its cores and its memory.
func raplMeters() *fakePDH {
	return &fakePDH{pwh: map[string]uint64{
		"RAPL_Package0_PKG": 917_000_000_000, "RAPL_Package0_PP0": 400_000_000_000, "RAPL_Package0_DRAM": 12_000_000_000,
	}}
}

func TestOpenEMI(t *testing.T) {
	f := raplMeters()
	e, err := OpenEMI(f)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"RAPL_Package0_PKG"}, e.Instances()); d != "" {
		t.Errorf("instances (-want +got):\n%s (only the package is added)", d)
	}

	for _, tc := range []struct {
		name string
		pwh  map[string]uint64
		want string
	}{
		{"no instance", map[string]uint64{}, `the CPU's energy meter is not exposed: the Energy Meter counter set (\Energy Meter(*)\Energy) has no instance`},
		{"no package", map[string]uint64{"SYS": 1, "CPU_CLUSTER_0": 2},
			"the CPU's energy meter is not exposed: no CPU package (*_PKG) among the Energy Meter's instances (CPU_CLUSTER_0, SYS)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := OpenEMI(&fakePDH{pwh: tc.pwh})
			if !errors.Is(err, ErrNoCounter) || err.Error() != tc.want {
				t.Errorf("err = %v, want %q matching ErrNoCounter", err, tc.want)
			}
		})
	}
	if _, err := OpenEMI(&fakePDH{err: errors.New("PdhCollectQueryData: PDH status 0xC0000BC6")}); err == nil || errors.Is(err, ErrNoCounter) {
		t.Errorf("PDH failing: err = %v, want an error other than ErrNoCounter", err)
	}
}

// The counters as they move: joules from picowatt-hours; a package
// that appears makes one interval unknown, then counts; a counter that
// goes back (a reset) makes its interval unknown; an instance gone or a
// read that fails is an error.
func TestEMIInterval(t *testing.T) {
	f := raplMeters()
	e, err := OpenEMI(f)
	if err != nil {
		t.Fatal(err)
	}
	read := func() []uint64 {
		t.Helper()
		v, err := e.Read()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	check := func(what string, prev, cur []uint64, joules float64, known bool) {
		t.Helper()
		j, ok := e.Interval(prev, cur)
		if ok != known || !near(j, joules) {
			t.Errorf("%s: Interval = %g J, %t; want %g J, %t", what, j, ok, joules, known)
		}
	}
	r0 := read()
	f.add("RAPL_Package0_PKG", 150)
	f.add("RAPL_Package0_PP0", 100) // a part of the package: not added again
	r1 := read()
	check("150 J", r0, r1, 150, true)

	f.pwh["RAPL_Package1_PKG"] = 5_000_000_000 // a second socket's meter appears
	f.add("RAPL_Package0_PKG", 10)
	r2 := read()
	check("a package appeared", r1, r2, 0, false)
	f.add("RAPL_Package0_PKG", 20)
	f.add("RAPL_Package1_PKG", 30)
	r3 := read()
	check("both packages", r2, r3, 50, true)
	if d := cmp.Diff([]string{"RAPL_Package0_PKG", "RAPL_Package1_PKG"}, e.Instances()); d != "" {
		t.Errorf("instances (-want +got):\n%s", d)
	}

	f.pwh["RAPL_Package1_PKG"] = 1000 // reset
	f.add("RAPL_Package0_PKG", 20)
	r4 := read()
	check("a counter reset", r3, r4, 0, false)
	f.add("RAPL_Package0_PKG", 1)
	check("after the reset", r4, read(), 1, true)

	delete(f.pwh, "RAPL_Package1_PKG")
	if _, err := e.Read(); err == nil || !strings.Contains(err.Error(), "RAPL_Package1_PKG is gone") {
		t.Errorf("an instance gone: err = %v", err)
	}
	f.err = errors.New("PdhCollectQueryData: PDH status 0xC0000BC6")
	if _, err := e.Read(); err == nil {
		t.Error("a failed read: no error")
	}
}

// A Meter on Windows' Energy Meter counters, with CPU times from
// Config.Times: a task's share is measured; a reset of the counter and
// then a counter that goes unreadable mid-task make those intervals
// estimated, and the task with them.
func TestMeterOnEMI(t *testing.T) {
	h := newFakeHost(t)
	h.pidTicks[7] = 0
	h.writeProc()
	f := raplMeters()
	e, err := OpenEMI(f)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMeter(Config{RAPL: e, Times: procTimes(h.proc), PIDs: h.pids, CPUs: 8, RatedW: 80,
		Now: func() time.Time { return h.now }})
	sample := func() {
		m.mu.Lock()
		m.sampleLocked()
		m.mu.Unlock()
	}
	sample()
	// At rest: 5 W over 10 s, another program busy 1 s.
	h.step(10*time.Second, 0, 1, nil)
	f.add("RAPL_Package0_PKG", 50)
	task := m.Start(nil)
	// The task: 250 J, 50 of them the baseline; ours 6 s of the 8 busy.
	h.step(10*time.Second, 0, 8, map[int]float64{7: 6})
	f.add("RAPL_Package0_PKG", 250)
	checkFigure(t, "measured task", task.Stop(7).CPU, 200*6.0/8, Measured)
	if how, err := m.CPUHow(); how != Measured || err != nil {
		t.Errorf("CPUHow = %s, %v; want measured", how, err)
	}

	task = m.Start(nil)
	h.step(10*time.Second, 0, 2, map[int]float64{7: 2})
	f.pwh["RAPL_Package0_PKG"] = 0 // reset: 2 CPU seconds at 10 W a core
	sample()
	h.step(10*time.Second, 0, 4, map[int]float64{7: 4})
	f.err = errors.New("PdhCollectQueryData: PDH status 0xC0000BC6") // unreadable: 4 s more
	u := task.Stop(7)
	checkFigure(t, "task across a reset and a failed read", u.CPU, 2*10+4*10, Estimated)
	if how, err := m.CPUHow(); how != Estimated || err == nil || !strings.Contains(err.Error(), "0xC0000BC6") {
		t.Errorf("CPUHow = %s, %v; want estimated, with PDH's status", how, err)
	}
}
