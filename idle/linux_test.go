//go:build linux

package idle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/shirou/gopsutil/v4/common"
)

func TestParseProcStat(t *testing.T) {
	total, idle, err := parseProcStat([]byte("cpu  100 5 50 800 20 3 2 1 7 0\ncpu0 50 2 25 400 10 1 1 0 3 0\n"))
	if err != nil || total != 981 || idle != 820 {
		t.Errorf("parseProcStat = %d, %d, %v; want 981, 820", total, idle, err)
	}
	if _, _, err := parseProcStat([]byte("intr 1 2 3\n")); err == nil {
		t.Error("no error without a cpu line")
	}
}

func TestParsePIDStat(t *testing.T) {
	// A command name with spaces and parentheses, as a program may choose.
	line := "4242 (my (evil) prog) R 17 4242 4242 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 1 0 100 1000 10\n"
	got, err := parsePIDStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := (procTimes{ppid: 17, ticks: 310}); got != want {
		t.Errorf("parsePIDStat = %+v, want %+v", got, want)
	}
}

func TestOwnTicks(t *testing.T) {
	procs := map[int]procTimes{
		1:  {ppid: 0, ticks: 1000},
		10: {ppid: 1, ticks: 5},    // idlepool
		11: {ppid: 10, ticks: 100}, // a worker
		12: {ppid: 10, ticks: 200}, // another worker
		13: {ppid: 12, ticks: 40},  // its child
		20: {ppid: 1, ticks: 9999}, // a game
	}
	tests := []struct {
		own  []int
		want uint64
	}{
		{[]int{10}, 345},
		{[]int{12}, 240},
		{[]int{10, 12}, 345}, // no double count
		{[]int{99}, 0},       // gone
		{nil, 0},
	}
	for _, tc := range tests {
		if got := ownTicks(procs, tc.own); got != tc.want {
			t.Errorf("ownTicks(%v) = %d, want %d", tc.own, got, tc.want)
		}
	}
}

// startBusyChild re-executes the test binary as a child that spins on one
// CPU (see TestMain) and returns its PID; it is killed at cleanup.
func startBusyChild(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), busyEnv+"=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

func childTicks(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	pt, err := parsePIDStat(b)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(pt.ticks) * 10 * time.Millisecond
}

// TestProcLoadExcludesOwnChild runs a real CPU-bound child of this process
// and checks that the Linux load source counts its time as Own, so
// OtherCPUShare leaves it out, and counts it as other when it is not ours.
func TestProcLoadExcludesOwnChild(t *testing.T) {
	child := startBusyChild(t)
	src := procLoad{root: "/proc"}
	ctx := t.Context()
	me := []int{os.Getpid()}
	read := func() (ours, notOurs CPUCounters) {
		var err error
		if ours, err = src.CPUCounters(ctx, me); err != nil {
			t.Fatal(err)
		}
		if notOurs, err = src.CPUCounters(ctx, []int{1 << 30}); err != nil {
			t.Fatal(err)
		}
		return ours, notOurs
	}
	c0 := childTicks(t, child)
	ours0, not0 := read()
	time.Sleep(time.Second) // measure a real process over a real second
	ours1, not1 := read()
	c1 := childTicks(t, child)

	childUsed := c1 - c0
	if childUsed < 100*time.Millisecond {
		t.Skipf("busy child got only %v of CPU in 1s; machine too loaded to tell", childUsed)
	}
	ownUsed := ours1.Own - ours0.Own
	if ownUsed < childUsed-20*time.Millisecond {
		t.Errorf("Own grew by %v while our busy child used %v: the child is not counted as ours", ownUsed, childUsed)
	}
	if d := not1.Own - not0.Own; d != 0 {
		t.Errorf("Own grew by %v with no own processes", d)
	}
	busy := ours1.Busy - ours0.Busy
	if busy < childUsed-20*time.Millisecond {
		t.Errorf("Busy grew by %v, less than the child's %v", busy, childUsed)
	}
	share, err := otherShare(ours0, ours1)
	if err != nil {
		t.Fatal(err)
	}
	total := ours1.Total - ours0.Total
	if limit := float64(busy-childUsed+20*time.Millisecond) / float64(total); share > limit {
		t.Errorf("OtherCPUShare = %.3f, above %.3f: our child's %v is counted", share, limit, childUsed)
	}
	t.Logf("child used %v, own %v, busy %v of %v: other share %.3f", childUsed, ownUsed, busy, total, share)
}

func TestSensorThermalHwmonFixture(t *testing.T) {
	sys := t.TempDir()
	write := func(path, s string) {
		p := filepath.Join(sys, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("class/hwmon/hwmon0/name", "coretemp")
	write("class/hwmon/hwmon0/temp1_label", "Package id 0")
	write("class/hwmon/hwmon0/temp1_input", "58000")
	write("class/hwmon/hwmon0/temp2_label", "Core 0")
	write("class/hwmon/hwmon0/temp2_input", "61000")
	write("class/hwmon/hwmon1/name", "nvme")
	write("class/hwmon/hwmon1/temp1_label", "Composite")
	write("class/hwmon/hwmon1/temp1_input", "75000")
	ctx := context.WithValue(t.Context(), common.EnvKey, common.EnvMap{common.HostSysEnvKey: sys})
	c, sensor, err := sensorThermal{}.MaxTemperatureC(ctx)
	if err != nil || c != 61 || sensor != "coretemp_core_0" {
		t.Errorf("MaxTemperatureC = %v, %q, %v; want 61, coretemp_core_0", c, sensor, err)
	}
	empty := context.WithValue(t.Context(), common.EnvKey, common.EnvMap{common.HostSysEnvKey: t.TempDir()})
	if _, _, err := (sensorThermal{}).MaxTemperatureC(empty); err == nil {
		t.Error("no error without sensors")
	}
}

// TestDevInputIdle points the scanner at a fake /dev of files whose
// times are set: a pseudo-terminal's input (an SSH shell) counts only
// with remote input on; a local console's counts either way, once its
// atime moved past its ctime.
func TestDevInputIdle(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name    string
		remote  bool
		files   map[string]time.Time // path under the fake /dev: atime and mtime
		want    time.Duration
		wantSrc string
		wantErr bool
	}{
		{name: "nothing", wantErr: true},
		{name: "nothing, remote input on", remote: true, wantErr: true},
		{
			name:    "ssh shell typed in 5 minutes ago: not the local seat",
			files:   map[string]time.Time{"pts/0": now.Add(-5 * time.Minute), "pts/3": now.Add(-time.Hour), "pts/ptmx": now},
			wantErr: true,
		},
		{
			name:    "ssh shell typed in 5 minutes ago, remote input on",
			remote:  true,
			files:   map[string]time.Time{"pts/0": now.Add(-5 * time.Minute), "pts/3": now.Add(-time.Hour), "pts/ptmx": now},
			want:    5 * time.Minute,
			wantSrc: "pts/0",
		},
		{
			// Setting times moves ctime to now: a time after now has moved
			// past it, as a console's atime does when someone types there.
			name:    "local console typed in, and an ssh shell just now",
			files:   map[string]time.Time{"tty2": now.Add(time.Minute), "pts/0": now.Add(2 * time.Minute)},
			want:    0,
			wantSrc: "tty2",
		},
		{
			name:    "local console typed in, remote input on: the newer counts",
			remote:  true,
			files:   map[string]time.Time{"tty2": now.Add(time.Minute), "pts/0": now.Add(2 * time.Minute)},
			want:    0,
			wantSrc: "pts/0",
		},
		{
			name:    "console never typed in, a serial line and the controlling tty",
			files:   map[string]time.Time{"tty1": now.Add(-time.Minute), "ttyS0": now.Add(time.Minute), "tty": now.Add(time.Minute)},
			wantErr: true,
		},
		{
			// Setting times moves ctime to now: a node whose times lie in
			// the past never moved after creation and tells nothing.
			name:    "input node never moved",
			files:   map[string]time.Time{"input/event0": now.Add(-time.Minute)},
			wantErr: true,
		},
		{
			name:    "input node moved",
			files:   map[string]time.Time{"input/event0": now.Add(time.Minute), "pts/1": now.Add(-time.Hour)},
			want:    0,
			wantSrc: "input/event0",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dev := t.TempDir()
			for p, tm := range tc.files {
				full := filepath.Join(dev, p)
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chtimes(full, tm, tm); err != nil {
					t.Fatal(err)
				}
			}
			got, src, err := devInputIdle{root: dev, remote: tc.remote}.IdleTime(t.Context())
			if (err != nil) != tc.wantErr {
				t.Fatalf("idle %v from %q, error = %v, want error %v", got, src, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if d := got - tc.want; d < 0 || d > 5*time.Second {
				t.Errorf("idle = %v, want about %v", got, tc.want)
			}
			if want := filepath.Join(dev, tc.wantSrc); src != want {
				t.Errorf("source = %q, want %q", src, want)
			}
		})
	}
}

func TestLogindSessionIdle(t *testing.T) {
	nowReal := time.Unix(1_800_000_000, 0)
	nowMono := 10 * time.Hour
	us := func(d time.Duration) uint64 { return uint64(d / time.Microsecond) }
	realAgo := func(d time.Duration) uint64 { return uint64(nowReal.Add(-d).UnixMicro()) }
	// counts is whether the session counts with remote input on;
	// remoteOnly, that it does not by default (only the local seat does).
	tests := []struct {
		name       string
		s          logindSession
		want       time.Duration
		counts     bool
		remoteOnly bool
	}{
		{
			name:   "ssh with a tty typed 2 minutes ago (remote, not on a seat)",
			s:      logindSession{Class: "user", Type: "tty", TTY: "pts/0", Remote: true, IdleSinceUS: realAgo(2 * time.Minute), IdleSinceMonoUS: us(nowMono - 2*time.Minute)},
			want:   2 * time.Minute,
			counts: true, remoteOnly: true,
		},
		{
			name:   "ssh tty idle per logind's hint: still the tty's atime",
			s:      logindSession{Class: "user", Type: "tty", TTY: "pts/1", Remote: true, IdleHint: true, IdleSinceUS: realAgo(3 * time.Hour)},
			want:   3 * time.Hour,
			counts: true, remoteOnly: true,
		},
		{
			name:   "a session on a pseudo-terminal that logind does not call remote",
			s:      logindSession{Class: "user", Type: "tty", TTY: "pts/5", Active: true, IdleSinceUS: realAgo(time.Minute)},
			want:   time.Minute,
			counts: true, remoteOnly: true,
		},
		{
			name: "ssh without a tty: no person typing",
			s:    logindSession{Class: "user", Type: "unspecified", Remote: true},
		},
		{
			name:   "gnome on wayland, idle hint set 20 minutes ago",
			s:      logindSession{Class: "user", Type: "wayland", Active: true, IdleHint: true, IdleSinceMonoUS: us(nowMono - 20*time.Minute)},
			want:   20 * time.Minute,
			counts: true,
		},
		{
			name:   "gnome in use",
			s:      logindSession{Class: "user", Type: "x11", Active: true, IdleSinceMonoUS: us(nowMono - time.Hour)},
			want:   0,
			counts: true,
		},
		{
			name: "desktop that publishes no hint",
			s:    logindSession{Class: "user", Type: "x11", Active: true},
		},
		{
			name:   "xrdp session that publishes no hint: in use while connected",
			s:      logindSession{Class: "user", Type: "x11", Remote: true},
			want:   0,
			counts: true, remoteOnly: true,
		},
		{
			name: "local session in the background (user switched away)",
			s:    logindSession{Class: "user", Type: "wayland", IdleSinceMonoUS: us(nowMono - time.Minute)},
		},
		{
			name: "greeter",
			s:    logindSession{Class: "greeter", Type: "x11", Active: true, IdleSinceMonoUS: us(nowMono)},
		},
		{
			name:   "local console",
			s:      logindSession{Class: "user", Type: "tty", TTY: "tty2", Active: true, IdleSinceUS: realAgo(30 * time.Second)},
			want:   30 * time.Second,
			counts: true,
		},
		{
			name:   "hint in the future (clock moved back): not negative",
			s:      logindSession{Class: "user", Type: "tty", TTY: "pts/2", Remote: true, IdleSinceUS: realAgo(-time.Hour)},
			want:   0,
			counts: true, remoteOnly: true,
		},
		{
			name:   "local console's hint in the future: not negative",
			s:      logindSession{Class: "user", Type: "tty", TTY: "tty3", Active: true, IdleSinceUS: realAgo(-time.Hour)},
			want:   0,
			counts: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, counts := tc.s.idle(nowReal, nowMono, true)
			if counts != tc.counts || got != tc.want {
				t.Errorf("remote input on: idle = %v, %v; want %v, %v", got, counts, tc.want, tc.counts)
			}
			got, counts = tc.s.idle(nowReal, nowMono, false)
			if want := tc.counts && !tc.remoteOnly; counts != want || (want && got != tc.want) {
				t.Errorf("local seat only: idle = %v, %v; want %v, %v", got, counts, tc.want, want)
			}
		})
	}
}

func TestSessionFromProps(t *testing.T) {
	props := map[string]dbus.Variant{
		"Type": dbus.MakeVariant("tty"), "Class": dbus.MakeVariant("user"), "TTY": dbus.MakeVariant("pts/0"),
		"Service": dbus.MakeVariant("sshd"), "Active": dbus.MakeVariant(true), "Remote": dbus.MakeVariant(true),
		"IdleHint": dbus.MakeVariant(false), "IdleSinceHint": dbus.MakeVariant(uint64(5)),
		"IdleSinceHintMonotonic": dbus.MakeVariant(uint64(7)), "State": dbus.MakeVariant("active"),
	}
	want := logindSession{ID: "3", Type: "tty", Class: "user", TTY: "pts/0", Service: "sshd", Active: true, Remote: true, IdleSinceUS: 5, IdleSinceMonoUS: 7}
	if diff := cmp.Diff(want, sessionFromProps("3", props), cmp.AllowUnexported(logindSession{})); diff != "" {
		t.Errorf("sessionFromProps (-want +got):\n%s", diff)
	}
}

// TestProcLoadOwnTreeMatchesScan checks the children-file walk against the
// scan of every process: the same descendants of this process, a real
// child among them.
func TestProcLoadOwnTreeMatchesScan(t *testing.T) {
	child := startBusyChild(t)
	src := procLoad{root: "/proc"}
	me := []int{os.Getpid()}
	tree, ok := src.ownTree(me)
	if !ok {
		t.Skip("this kernel has no /proc/[pid]/task/[tid]/children")
	}
	all, err := src.processes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	descendants := func(procs map[int]procTimes) map[int]bool {
		out := map[int]bool{}
		queue := append([]int(nil), me...)
		for len(queue) > 0 {
			pid := queue[0]
			queue = queue[1:]
			if out[pid] {
				continue
			}
			if _, ok := procs[pid]; !ok {
				continue
			}
			out[pid] = true
			for kid, p := range procs {
				if p.ppid == pid {
					queue = append(queue, kid)
				}
			}
		}
		return out
	}
	got, want := descendants(tree), descendants(all)
	if !got[child] {
		t.Errorf("the children walk missed our child %d: %v", child, got)
	}
	for pid := range want {
		if !got[pid] {
			t.Errorf("the children walk missed descendant %d", pid)
		}
	}
	if len(tree) > len(want)+2 { // a process may have started between the two reads
		t.Errorf("the children walk read %d processes, the descendants are %d", len(tree), len(want))
	}
}
