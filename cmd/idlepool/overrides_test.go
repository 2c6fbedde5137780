package main

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestSettingsCoresAboveTheMachine: a count of cores above this machine's
// is refused with a message that says how many it has; nothing is saved.
func TestSettingsCoresAboveTheMachine(t *testing.T) {
	home := t.TempDir()
	out := idlepool(t, home, "settings", "set", "cores=100000")
	if out.code != 2 || !regexp.MustCompile(`cores: this computer has \d+ logical CPUs; 100000 is more than it has`).MatchString(out.stderr) {
		t.Fatalf("cores=100000: exit %d\n%s", out.code, out.stderr)
	}
	if show := idlepool(t, home, "settings"); !strings.Contains(show.stdout, "cores             default: all but one") {
		t.Errorf("the refused count was saved:\n%s", show.stdout)
	}
}

// TestComputeNowAndFinishFromTheCLI: `settings set compute=...` computes
// outside the hours until the time given, said by status; `pause=finish`
// with nothing in hand is a pause until `pause=off`.
func TestComputeNowAndFinishFromTheCLI(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	noon := time.Date(2026, 3, 4, 12, 0, 0, 0, berlin) // a Wednesday
	home := t.TempDir()
	// Hours that exclude now, and nothing else of this machine's state
	// that could hold computing back, except a battery.
	if out := idlepoolAt(t, home, noon, "settings", "set", "time_zone=Europe/Berlin", "hours=Mon-Fri 22:00-07:00",
		"idle_for=0", "max_other_cpu=1", "max_temperature=0", "pause_on_battery=false"); out.code != 0 {
		t.Fatalf("settings set: exit %d\n%s", out.code, out.stderr)
	}
	if out := idlepoolAt(t, home, noon, "status"); !strings.Contains(out.stdout, "waiting: outside your hours (next window Wed 22:00)") {
		t.Fatalf("outside the hours, status says:\n%s", out.stdout)
	}
	out := idlepoolAt(t, home, noon, "settings", "set", "compute=hours")
	if out.code != 0 || !strings.Contains(out.stdout, "compute           now, until Wed 4 Mar 2026 22:00 CET") {
		t.Fatalf("compute=hours: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out = idlepoolAt(t, home, noon, "settings", "set", "compute=3h")
	if out.code != 0 || !strings.Contains(out.stdout, "now, until Wed 4 Mar 2026 15:00 CET") {
		t.Fatalf("compute=3h: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out = idlepoolAt(t, home, noon.Add(time.Hour), "status")
	if !regexp.MustCompile(`(?m)^decision +computing now, as you asked, until 15:00, on \d+ of \d+ cores`).MatchString(out.stdout) {
		t.Errorf("computing now, status says:\n%s", out.stdout)
	}
	out = idlepoolAt(t, home, noon, "settings", "set", "pause=finish")
	if out.code != 0 || !strings.Contains(out.stdout, "pause             finish: the tasks in hand finish, then paused until pause=off") ||
		!strings.Contains(out.stdout, "compute           off") {
		t.Fatalf("pause=finish: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
	out = idlepoolAt(t, home, noon, "status")
	if !regexp.MustCompile(`(?m)^decision +paused by you: the tasks in hand are finished; resume to compute again$`).MatchString(out.stdout) {
		t.Errorf("finish then pause with no tasks in hand, status says:\n%s", out.stdout)
	}
	if out := idlepoolAt(t, home, noon, "settings", "set", "compute=soon"); out.code != 2 || !strings.Contains(out.stderr, `want a duration (3h), "hours"`) {
		t.Errorf("compute=soon: exit %d\n%s", out.code, out.stderr)
	}
}
