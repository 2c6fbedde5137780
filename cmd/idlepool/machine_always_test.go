package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/idle"
)

// TestPrintMachineAlways: on a headless machine the settings wait for an
// idle time nobody can tell, and status says so with a hint about
// idle_for; but while the running donor computes without an idle policy
// (join --always) the settings decide nothing now, and status must not
// contradict the donor line with that wait and its hint.
func TestPrintMachineAlways(t *testing.T) {
	now := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	sig := idle.Signals{
		At:              now,
		InputIdle:       idle.Reading[time.Duration]{Err: "no input source works"},
		OtherCPUShare:   idle.Reading[float64]{Value: 0.05, Known: true, Source: "gopsutil"},
		Power:           idle.Reading[idle.Power]{Known: true, Source: "/sys/class/power_supply"},
		MaxTemperatureC: idle.Reading[float64]{Value: 50, Known: true, Source: "coretemp"},
		Running:         idle.Reading[[]string]{Known: true, Source: "process list"},
		GPUs:            idle.Reading[[]idle.GPU]{Err: "no NVIDIA driver"},
		CPUs:            2,
	}
	s := idle.Defaults()
	d, _ := idle.Decide(s, sig, now, 0, idle.PolicyState{})
	if !strings.Contains(d.Reason, "idle time unknown") {
		t.Fatalf("the settings decide %q on a headless machine, want a wait for the idle time", d.Reason)
	}
	c := idle.NewCapacity(idle.Machine{OS: "linux", Arch: "amd64", LogicalCPUs: 2, MemoryTotalMiB: 4096}, s, sig.GPUs)
	for _, tc := range []struct {
		name     string
		running  *agent.AgentStatus
		decision string // the decision line's text after its label
		hint     bool
		cores    int // offered
	}{
		{"no donor runs", nil, d.Reason, true, c.Cores},
		{"the donor has not decided yet", &agent.AgentStatus{}, d.Reason, true, c.Cores},
		{"the donor follows the settings", &agent.AgentStatus{Decision: d, DecidedAt: now, Signals: sig, Slots: 2}, d.Reason, true, c.Cores},
		{"the donor computes --always", &agent.AgentStatus{
			Decision:  idle.Decision{State: idle.StateComputing, Cores: 2, Reason: "computing on 2 slots (no idle policy)"},
			DecidedAt: now, Slots: 2, ActiveSlots: 2,
		}, "the running donor computes at any time (join --always); without it your settings would say: " + d.Reason, false, 2},
		{"the donor computes --always on more slots than CPUs", &agent.AgentStatus{
			Decision:  idle.Decision{State: idle.StateComputing, Cores: 8, Reason: "computing on 8 slots (no idle policy)"},
			DecidedAt: now, Slots: 8, ActiveSlots: 8,
		}, "the running donor computes at any time (join --always); without it your settings would say: " + d.Reason, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printMachine(&b, s, sig, d, alwaysCapacity(c, tc.running), now, noIdlePolicy(tc.running))
			out := b.String()
			if want := fmt.Sprintf("\noffers       %d of 2 cores,", tc.cores); !strings.Contains(out, want) {
				t.Errorf("want the offers line to start %q:\n%s", want[1:], out)
			}
			if !strings.Contains(out, "\ndecision     "+tc.decision+"\n") {
				t.Errorf("want the decision line %q:\n%s", tc.decision, out)
			}
			if hint := strings.Contains(out, "idle_for=0"); hint != tc.hint {
				t.Errorf("the idle_for hint printed: %v, want %v:\n%s", hint, tc.hint, out)
			}
		})
	}

	// The owner's hours: a donor that computes at any time offers any
	// hour, and the hours line says it does not keep to them.
	s.Schedule, _ = idle.ParseSchedule("mon-fri 09:00-17:00")
	c = idle.NewCapacity(idle.Machine{OS: "linux", Arch: "amd64", LogicalCPUs: 2, MemoryTotalMiB: 4096}, s, sig.GPUs)
	always := &agent.AgentStatus{Decision: idle.Decision{State: idle.StateComputing, Cores: 2}, DecidedAt: now, Slots: 2}
	if got := alwaysCapacity(c, always); len(got.Schedule) != 0 {
		t.Errorf("an --always donor's offer keeps the settings' hours: %v", got.Schedule)
	}
	if got := alwaysCapacity(c, nil); len(got.Schedule) == 0 {
		t.Errorf("with no donor running, the offer lost the settings' hours")
	}
	var b strings.Builder
	printMachine(&b, s, sig, d, alwaysCapacity(c, always), now, true)
	if !regexp.MustCompile(`(?m)^hours +.*; the running donor does not keep to them \(join --always\)$`).MatchString(b.String()) {
		t.Errorf("the hours line next to an --always donor:\n%s", b.String())
	}
}

// TestStatusOfAnAlwaysDonor: `idlepool status` next to a running `join
// --always` tells from the donor's own status (read through its local
// API) that it computes at any time, instead of giving the settings'
// decision (here a pause, which --always ignores) as if it applied.
func TestStatusOfAnAlwaysDonor(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and an agent")
	}
	h := t.TempDir()
	now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
	if out := idlepoolAt(t, h, now, "settings", "set", "time_zone=UTC", "pause=3h"); out.code != 0 {
		t.Fatalf("settings set pause: exit %d\n%s", out.code, out.stderr)
	}
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	startJoin(t, h, url, "--workers", "2") // --always
	dirs, err := home.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dirs.Data, agent.LocalAPIFile)
	for deadline := patient(t); ; time.Sleep(20 * time.Millisecond) {
		st, err := agent.ReadStatus(context.Background(), sock)
		if err == nil && st.Decision.State != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the donor served no decision: %+v, %v", st, err)
		}
	}
	out := idlepoolAt(t, h, now, "status")
	if out.code != 0 {
		t.Fatalf("status: exit %d\n%s", out.code, out.stderr)
	}
	if !regexp.MustCompile(`(?m)^decision +the running donor computes at any time \(join --always\); without it your settings would say: paused by you until 15:00$`).MatchString(out.stdout) ||
		!regexp.MustCompile(`(?m)^donor +computing on 2 slots \(no idle policy\)`).MatchString(out.stdout) ||
		!regexp.MustCompile(fmt.Sprintf(`(?m)^offers +%d of \d+ cores`, min(2, runtime.NumCPU()))).MatchString(out.stdout) ||
		strings.Contains(out.stdout, "hint:") {
		t.Errorf("status next to join --always:\n%s", out.stdout)
	}
}

// TestJoinHintsAtUnknownIdleTime: a donor started without --always on a
// machine that cannot tell its input idle time (a headless test machine)
// waits for ever under the default idle_for; join says so on stderr,
// once, with how to let it compute. Skipped where this machine can tell
// its idle time (status gives no such hint there).
func TestJoinHintsAtUnknownIdleTime(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a coordinator and a donor")
	}
	h := t.TempDir()
	if out := idlepoolAt(t, h, time.Now(), "status"); !strings.Contains(out.stdout, "hint: no source tells this machine's input idle time") {
		t.Skipf("this machine tells its input idle time, or does not wait for it:\n%s", out.stdout)
	}
	_, url := startServe(t, t.TempDir(), "127.0.0.1:0")
	d := startDaemon(t, "join "+filepath.Base(h), h, "join", url, "--workers", "1")
	const hint = "hint: no source tells this machine's input idle time"
	if !d.awaitStderr(patient(t), func(b []byte) bool { return strings.Contains(string(b), hint) }) {
		b, _ := os.ReadFile(d.stderr)
		t.Fatalf("join gave no hint about the idle time it cannot tell:\n%s", b)
	}
	b, _ := os.ReadFile(d.stderr)
	if !strings.Contains(string(b), "idlepool: waiting: idle time unknown") || !strings.Contains(string(b), "'idlepool join --always'") ||
		strings.Count(string(b), hint) != 1 {
		t.Errorf("join's stderr:\n%s", b)
	}
}
