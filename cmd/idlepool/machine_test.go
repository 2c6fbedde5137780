package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/agent"
	"idlepool/idle"
)

// statusDoc is the part of `status --json` (without a job) the tests read.
type statusDoc struct {
	At      time.Time `json:"at"`
	Signals struct {
		InputIdleSeconds struct {
			Known  bool     `json:"known"`
			Value  *float64 `json:"value"`
			Source string   `json:"source"`
			Error  string   `json:"error"`
		} `json:"input_idle_seconds"`
		Power struct {
			Known bool `json:"known"`
		} `json:"power"`
		GPUs struct {
			Known bool   `json:"known"`
			Error string `json:"error"`
		} `json:"gpus"`
		CPUs int `json:"cpus"`
	} `json:"signals"`
	InHours  bool          `json:"in_hours"`
	Decision decisionDoc   `json:"decision"`
	Capacity idle.Capacity `json:"capacity"`
	Settings idle.Settings `json:"settings"`
}

// TestMachineStatus runs `idlepool status` on this machine: whatever it
// has (a display or none, a battery or none, a GPU or none), every line is
// there and the decision is one of the policy's.
func TestMachineStatus(t *testing.T) {
	home := t.TempDir()
	out := idlepool(t, home, "status")
	if out.code != 0 {
		t.Fatalf("status: exit %d\n%s", out.code, out.stderr)
	}
	t.Logf("idlepool status on this machine:\n%s", out.stdout)
	for _, label := range []string{"machine", "input idle", "CPU load", "power", "temperature", "programs", "GPUs", "hours", "offers", "decision"} {
		if !regexp.MustCompile(`(?m)^` + label + ` +\S`).MatchString(out.stdout) {
			t.Errorf("no %q line", label)
		}
	}
	if !regexp.MustCompile(`(?m)^decision +(computing on \d+ of \d+ cores|waiting: |paused)`).MatchString(out.stdout) {
		t.Errorf("no decision the policy makes")
	}
	if !strings.Contains(out.stdout, "hours        any time") {
		t.Errorf("default hours are not 'any time'")
	}

	js := idlepool(t, home, "status", "--json")
	if js.code != 0 {
		t.Fatalf("status --json: exit %d\n%s", js.code, js.stderr)
	}
	var doc statusDoc
	if err := json.Unmarshal([]byte(js.stdout), &doc); err != nil {
		t.Fatalf("status --json is not one JSON document: %v\n%s", err, js.stdout)
	}
	if doc.Signals.CPUs != runtime.NumCPU() || doc.Capacity.LogicalCPUs != runtime.NumCPU() {
		t.Errorf("CPUs %d, capacity %d, want %d", doc.Signals.CPUs, doc.Capacity.LogicalCPUs, runtime.NumCPU())
	}
	if doc.Capacity.OS != runtime.GOOS || doc.Capacity.Cores != idle.Defaults().CoresFor(runtime.NumCPU()) {
		t.Errorf("capacity %+v", doc.Capacity)
	}
	if doc.Signals.InputIdleSeconds.Known != (doc.Signals.InputIdleSeconds.Value != nil) ||
		doc.Signals.InputIdleSeconds.Known == (doc.Signals.InputIdleSeconds.Error != "") {
		t.Errorf("a reading has a value exactly when known, an error exactly when not: %+v", doc.Signals.InputIdleSeconds)
	}
	if !doc.Signals.InputIdleSeconds.Known && doc.Decision.State == idle.StateComputing {
		t.Errorf("input idle time unknown but computing: %+v", doc.Decision)
	}
	if !doc.Signals.GPUs.Known && doc.Signals.GPUs.Error == "" {
		t.Errorf("GPUs unknown without a reason")
	}
	if !doc.InHours || time.Since(doc.At) > time.Minute {
		t.Errorf("in_hours %v, at %v", doc.InHours, doc.At)
	}
	if diff := cmp.Diff(idle.Defaults(), doc.Settings); diff != "" {
		t.Errorf("settings of a new home (-want +got):\n%s", diff)
	}
}

// TestMachineStatusExplains sets the settings from the command line and
// checks that status gives the reason they imply, wherever it runs.
// idlepoolAt runs the command line in this process with the wall clock
// stopped at now, so that what it prints does not depend on the hour the
// test runs at.
func idlepoolAt(t *testing.T, home string, now time.Time, args ...string) runOut {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runAt(t.Context(), func() time.Time { return now }, append([]string{"--home", home}, args...), strings.NewReader(""), &stdout, &stderr)
	return runOut{stdout.String(), stderr.String(), code}
}

// TestMachineStatusExplains checks what `status` says for a pause, for
// settings that let the machine compute, and outside the owner's hours, at
// fixed instants: noon, and half an hour before midnight, where a two-hour
// pause ends on the next day.
func TestMachineStatusExplains(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		now   time.Time
		until string
		other string // the days of the week that are not today
	}{
		{"noon", time.Date(2026, 3, 4, 12, 0, 0, 0, berlin), "14:00", "Sun,Mon,Tue,Thu,Fri,Sat"},
		{"before midnight", time.Date(2026, 3, 4, 23, 30, 0, 0, berlin), "Thu 01:30", "Sun,Mon,Tue,Thu,Fri,Sat"},
		{"late on Saturday", time.Date(2026, 3, 7, 23, 59, 0, 0, berlin), "Sun 01:59", "Sun,Mon,Tue,Wed,Thu,Fri"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			// The pause is set an hour before now: what is left is what counts.
			if out := idlepoolAt(t, home, tc.now.Add(-time.Hour), "settings", "set", "time_zone=Europe/Berlin", "pause=3h"); out.code != 0 {
				t.Fatalf("settings set pause: exit %d\n%s", out.code, out.stderr)
			}
			out := idlepoolAt(t, home, tc.now, "status")
			if want := "paused by you until " + tc.until; !regexp.MustCompile(`(?m)^decision +` + want + `$`).MatchString(out.stdout) {
				t.Errorf("paused for 3 hours an hour ago, status says (want %q):\n%s", want, out.stdout)
			}
			if out := idlepoolAt(t, home, tc.now, "settings", "set", "pause=off", "idle_for=0", "max_other_cpu=1", "max_temperature=0"); out.code != 0 {
				t.Fatalf("settings set: exit %d\n%s", out.code, out.stderr)
			}
			out = idlepoolAt(t, home, tc.now, "status")
			// Nothing but a battery or the hours can stop it now; the hours are any time.
			if !regexp.MustCompile(`(?m)^decision +(computing on \d+ of \d+ cores.*input idle time not required|waiting: on battery)`).MatchString(out.stdout) {
				t.Errorf("with idle_for=0, status says:\n%s", out.stdout)
			}

			// A schedule that excludes now: every day except today.
			if out := idlepoolAt(t, home, tc.now, "settings", "set", "hours="+tc.other); out.code != 0 {
				t.Fatalf("settings set hours: exit %d\n%s", out.code, out.stderr)
			}
			out = idlepoolAt(t, home, tc.now, "status")
			next := tc.now.Add(24 * time.Hour).Weekday().String()[:3]
			if !strings.Contains(out.stdout, "; outside them now") || !regexp.MustCompile(`(?m)^decision +waiting: outside your hours \(next window `+next+` 00:00\)$`).MatchString(out.stdout) {
				t.Errorf("outside hours, status says (want the next window on %s):\n%s", next, out.stdout)
			}
		})
	}
}

func TestSettingsCommand(t *testing.T) {
	home := t.TempDir()
	show := idlepool(t, home, "settings")
	if show.code != 0 || !strings.Contains(show.stdout, "cores             default: all but one") || !strings.Contains(show.stdout, "idle_for          5m0s") {
		t.Fatalf("settings of a new home: exit %d\n%s%s", show.code, show.stdout, show.stderr)
	}

	set := idlepool(t, home, "settings", "set", "hours=Mon-Fri 22:00-07:00; Sat,Sun", "time_zone=Europe/Berlin",
		"cores=1", "cpu_time=50%", "idle_priority=false", "remote_input=true", "idle_for=10m", "pause_for=game.exe,steam",
		"gpu.GPU-1234.use=true", "gpu.GPU-1234.memory=80%")
	if set.code != 0 {
		t.Fatalf("settings set: exit %d\n%s", set.code, set.stderr)
	}
	for _, want := range []string{"hours             Mon-Fri 22:00-07:00; Sat,Sun 00:00-24:00", "cores             1", "idle_for          10m0s",
		"cpu_time          50% of the time on each core", "idle_priority     false: tasks run at a low priority", "remote_input      true",
		"pause_for         game.exe,steam", "gpu.GPU-1234      use=true memory=80% max_temperature=none max_other=10%"} {
		if !strings.Contains(set.stdout, want) {
			t.Errorf("settings set printed no %q:\n%s", want, set.stdout)
		}
	}

	js := idlepool(t, home, "settings", "--json")
	var got idle.Settings
	if err := json.Unmarshal([]byte(js.stdout), &got); err != nil {
		t.Fatalf("settings --json: %v\n%s", err, js.stdout)
	}
	want := idle.Defaults()
	want.Schedule, _ = idle.ParseSchedule("Mon-Fri 22:00-07:00; Sat,Sun")
	want.TimeZone, want.Cores, want.IdleFor = "Europe/Berlin", 1, 10*time.Minute
	want.CPUTimeShare, want.NoIdlePriority, want.RemoteInput = 0.5, true, true
	want.PauseFor = []string{"game.exe", "steam"}
	want.GPUs = map[string]idle.GPUSettings{"GPU-1234": {Use: true, MemoryShare: 0.8}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("saved settings (-want +got):\n%s", diff)
	}

	// Mistakes: nothing is saved (not even cores=0.5, which is fine
	// alone), the message names the key.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "cores=0.5", "idle_for=soon"}, "idle_for=soon: want a duration"},
		{[]string{"set", "cpu_time=1%"}, "cpu_time=1%: want a share from 5% to 100%"},
		{[]string{"set", "colour=red"}, `unknown setting "colour"`},
		{[]string{"set", "cores"}, `"cores" is not KEY=VALUE`},
		{[]string{"set", "hours=Mon 25:00-26:00"}, `"25:00" is not a time of day`},
		{[]string{"set"}, "settings set needs at least one KEY=VALUE"},
		{[]string{"frobnicate"}, `unknown subcommand "frobnicate"`},
	} {
		out := idlepool(t, home, append([]string{"settings"}, tc.args...)...)
		if out.code != 2 || !strings.Contains(out.stderr, tc.want) {
			t.Errorf("settings %v: exit %d, stderr:\n%s\nwant exit 2 and %q", tc.args, out.code, out.stderr, tc.want)
		}
	}
	js = idlepool(t, home, "settings", "--json")
	var after idle.Settings
	if err := json.Unmarshal([]byte(js.stdout), &after); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, after); diff != "" {
		t.Errorf("a rejected change was saved (-want +got):\n%s", diff)
	}

	if out := idlepool(t, home, "settings", "reset"); out.code != 0 || !strings.Contains(out.stdout, "cores             default: all but one") {
		t.Errorf("settings reset: exit %d\n%s%s", out.code, out.stdout, out.stderr)
	}
}

// TestStatusOfAJobStillNeedsItsID: --pool without a job is a mistake, not
// this machine's status.
func TestStatusOfAJobStillNeedsItsID(t *testing.T) {
	out := idlepool(t, t.TempDir(), "status", "--pool", "http://127.0.0.1:1")
	if out.code != 2 || !strings.Contains(out.stderr, "status needs exactly one job ID") {
		t.Errorf("status --pool without a job: exit %d\n%s", out.code, out.stderr)
	}
}

func TestPrintAgent(t *testing.T) {
	var b strings.Builder
	now := time.Date(2026, 3, 10, 14, 30, 0, 0, time.Local)
	printAgent(&b, nil, now)
	if !strings.Contains(b.String(), "not running") {
		t.Errorf("no donor: %q", b.String())
	}
	b.Reset()
	printAgent(&b, &agent.AgentStatus{
		Decision: idle.Decision{State: idle.StateWaiting, Reason: "waiting: outside the allowed hours (Mon-Fri 22:00-07:00)"},
		Running:  []agent.RunningTask{{Job: "j", Task: 1}},
		Pools: []agent.PoolState{{URL: "http://a:7420", Name: "lab-a", Slots: 2, Running: 1},
			{URL: "http://b:7420", Error: "its weight is 0: this machine offers it nothing"}},
	}, now)
	want := "donor        waiting: outside the allowed hours (Mon-Fri 22:00-07:00); 1 task held\n" +
		"  pool       lab-a (http://a:7420): 2 workers, 1 task, connected\n" +
		"  pool       http://b:7420: its weight is 0: this machine offers it nothing\n"
	if b.String() != want {
		t.Errorf("printAgent:\n%s\nwant:\n%s", b.String(), want)
	}

	// A clock off the pool's, a pool gone with a task abandoned, and the
	// cache.
	b.Reset()
	since := time.Date(2026, 3, 10, 14, 2, 0, 0, time.Local)
	printAgent(&b, &agent.AgentStatus{
		Decision: idle.Decision{State: idle.StateComputing, Reason: "computing on 2 of 4 cores"},
		Pools: []agent.PoolState{{URL: "http://a:7420", Name: "lab-a", Slots: 2, ClockOffsetMS: 7 * 60 * 1000},
			{URL: "http://b:7420", Name: "lab-b", Slots: 1, UnreachableSince: since}},
		Abandoned: []agent.AbandonedTask{{Pool: "http://b:7420", Job: "ab12cd34ef56ab12", JobName: "pi", Task: 4,
			At: now, UnreachableSince: since}},
		Cache: &agent.CacheUsage{UsedBytes: 3565158, CapBytes: 2 << 30, Jobs: 1},
	}, now)
	want = "donor        computing on 2 of 4 cores; 0 tasks held\n" +
		"  pool       lab-a (http://a:7420): 2 workers, 0 tasks, connected\n" +
		"  pool       lab-b (http://b:7420): 1 worker, 0 tasks, cannot reach the pool since 14:02, retrying\n" +
		"  note       pool lab-a: this device's clock is 7 min off the pool's (behind); requests are signed with the pool's time\n" +
		"  note       task 4 of job pi abandoned: pool unreachable since 14:02\n" +
		"cache        3.4 MiB of 2.0 GiB (1 job)\n"
	if b.String() != want {
		t.Errorf("printAgent:\n%s\nwant:\n%s", b.String(), want)
	}

	// The only pool is down: the donor line says so, not "computing … 0
	// tasks held"; a lone agent's pool is listed as a donor's are.
	for _, st := range []agent.AgentStatus{
		{Decision: idle.Decision{State: idle.StateComputing, Reason: "computing on 2 of 4 cores"},
			Pools: []agent.PoolState{{URL: "http://b:7420", Name: "lab-b", Slots: 2, UnreachableSince: since}}},
		{Decision: idle.Decision{State: idle.StateComputing, Reason: "computing on 2 of 4 cores"},
			Pool: "http://b:7420", PoolName: "lab-b", Slots: 2, UnreachableSince: since},
	} {
		b.Reset()
		printAgent(&b, &st, now)
		want = "donor        no pool answers: lab-b: cannot reach the pool since 14:02, retrying; 0 tasks held\n" +
			"  pool       lab-b (http://b:7420): 2 workers, 0 tasks, cannot reach the pool since 14:02, retrying\n"
		if b.String() != want {
			t.Errorf("printAgent with the pool down:\n%s\nwant:\n%s", b.String(), want)
		}
	}
}
