package energy

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// TestSystemEMI: the Windows build asks PDH for this machine's Energy
// Meter counters. Where they are exposed, a package's counter reads and
// counts up; where they are not (IDLEPOOL_EMI=absent demands this: Wine's
// pdh.dll has no Energy Meter set), the reason says so, and a task's CPU
// energy is estimated from its CPU time read with GetProcessTimes.
func TestSystemEMI(t *testing.T) {
	e, err := OpenSystemEMI()
	want := os.Getenv("IDLEPOOL_EMI")
	switch {
	case err == nil && want == "absent":
		t.Fatalf("OpenSystemEMI found %v, want none (IDLEPOOL_EMI=absent)", e.Instances())
	case err == nil:
		t.Logf("Energy Meter instances: %v", e.Instances())
		r0, err := e.Read()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		r1, err := e.Read()
		if err != nil {
			t.Fatal(err)
		}
		j, ok := e.Interval(r0, r1)
		t.Logf("one second: %.3f J (known: %t)", j, ok)
		if !ok || j <= 0 {
			t.Errorf("a package drew %g J in a second (known: %t), want more than 0", j, ok)
		}
		return
	case !errors.Is(err, ErrNoCounter) || !strings.Contains(err.Error(), "not exposed"):
		t.Fatalf("OpenSystemEMI: err = %v, want a *NotExposedError", err)
	}
	t.Logf("OpenSystemEMI: %v", err)

	pid := os.Getpid()
	times := SystemCPUTimes()
	if _, err := times.Busy(); err != nil {
		t.Fatalf("GetSystemTimes: %v", err)
	}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	m := NewMeter(Config{CPUProblem: err, Times: times, PIDs: func() []int { return []int{pid} }, CPUs: 4, RatedW: 40,
		Now: func() time.Time { return now }})
	task := m.Start(nil)
	before, err := times.Process(pid)
	if err != nil {
		t.Fatalf("GetProcessTimes: %v", err)
	}
	for spent := time.Duration(0); spent < 50*time.Millisecond; { // some CPU time of ours
		x := 0
		for i := range 1_000_000 {
			x += i * i
		}
		_ = x
		d, err := times.Process(pid)
		if err != nil {
			t.Fatal(err)
		}
		spent = d - before
	}
	now = now.Add(10 * time.Second)
	u := task.Stop(pid)
	t.Logf("task: %.3f J %s", u.CPU.Joules, u.CPU.How)
	if u.CPU.How != Estimated || u.CPU.Joules <= 0 || u.CPU.Joules >= 10*10 {
		t.Errorf("task = %.3f J %s, want its CPU time at 10 W a core, estimated (more than 0, less than its 10 s span)", u.CPU.Joules, u.CPU.How)
	}
	if how, err := m.CPUHow(); how != Estimated || err == nil || !strings.Contains(err.Error(), "not exposed") {
		t.Errorf("CPUHow = %s, %v; want estimated, saying the meter is not exposed", how, err)
	}
}
