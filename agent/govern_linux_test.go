//go:build linux

package agent_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/store"
	"idlepool/worker"
)

// workerCPU reads a process's state letter and its user plus system CPU
// time in clock ticks from /proc/PID/stat (proc(5) fields 3, 14, 15).
func workerCPU(t testing.TB, pid int) (state string, ticks int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("worker %d: %v", pid, err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		t.Fatalf("worker %d: short stat %q", pid, b)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("worker %d: stat %q", pid, b)
	}
	return f[0], ut + st
}

// spinJob builds testdata/spin for wasip1 and plans a one-task job
// running it, with the given lease timeout; it skips the test without a
// go tool.
func spinJob(t *testing.T, leaseTimeout time.Duration) *job.Job {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build the test program: %v", err)
	}
	dir := t.TempDir()
	cmd := exec.Command(gotool, "build", "-trimpath", "-o", filepath.Join(dir, "spin.wasm"), "./testdata/spin")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build spin: %v\n%s", err, b)
	}
	text := fmt.Sprintf(`name = "spin"
program = "spin.wasm"
[split]
rule = "range"
tasks = 1
[[merge]]
field = "square"
rule = "sum"
[policy]
redundancy = 1
quorum = 1
lease_timeout = %q
time_limit = "10m"
`, leaseTimeout)
	m, err := job.ParseManifest("job.toml", dir, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	j, err := job.Plan(m)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// TestStepAsideRealWorker runs a real agent with a real worker pool and a
// CPU-bound WebAssembly task, flips a fake input-idle source to "owner
// active" and measures from /proc that the worker stops using the CPU
// within a second; flipped back, it resumes. Then a pause longer than the
// lease allows hands the lease back, and another agent computes the task.
func TestStepAsideRealWorker(t *testing.T) {
	const leaseTimeout = 4 * time.Second // hand back after 3 s suspended
	j := spinJob(t, leaseTimeout)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wp, err := worker.NewPool(worker.Config{
		Command:  []string{exe},
		Env:      append(os.Environ(), workerEnv+"=1", worker.PriorityEnv+"=normal"),
		Slots:    1,
		CacheDir: filepath.Join(t.TempDir(), "wazero"),
		Logger:   quietLogger(t).With("side", "worker"),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wp.Close() }) // after the agents stop

	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	sub := newSubmitter(t, co.url, nil)
	ctx := context.Background()
	if err := sub.c.Submit(ctx, j); err != nil {
		t.Fatal(err)
	}
	sig := newFakeSignals(1)
	a := startGoverned(t, co.url, newDevice(t, nil), wp, 1, sig, 0, "") // samples every 250 ms

	// The task runs: its worker's CPU time grows. Compiling the module
	// takes a while under the race detector.
	var pid int
	eventually(t, 3*time.Minute, "a worker process", func() bool {
		pids := wp.PIDs()
		if len(pids) == 1 {
			pid = pids[0]
		}
		return pid != 0
	})
	_, t0 := workerCPU(t, pid)
	eventually(t, 3*time.Minute, "the task computing", func() bool {
		_, ticks := workerCPU(t, pid)
		return ticks > t0+20 // 200 ms of CPU
	})

	// The owner comes back: the worker must stop within a second.
	flipped := time.Now()
	sig.active.Store(true)
	eventually(t, time.Second, "the worker stopped (state T)", func() bool {
		state, _ := workerCPU(t, pid)
		return state == "T"
	})
	stopped := time.Since(flipped)
	_, before := workerCPU(t, pid)
	time.Sleep(300 * time.Millisecond)
	if _, after := workerCPU(t, pid); after != before {
		t.Errorf("the stopped worker used %d ticks of CPU in 300 ms", after-before)
	}
	t.Logf("worker stopped %s after the owner came back", stopped)
	if st := a.Status(); !st.Suspended || len(st.Running) != 1 {
		t.Errorf("status while suspended: %+v", st)
	}

	// The owner leaves again before the lease would lapse: it resumes.
	sig.active.Store(false)
	flipped = time.Now()
	eventually(t, 2*time.Second, "the worker running again", func() bool {
		state, ticks := workerCPU(t, pid)
		return state != "T" && ticks > before+5
	})
	t.Logf("worker computing again %s after the owner left", time.Since(flipped))
	if n := len(a.Running()); n != 1 {
		t.Fatalf("%d tasks running after a short pause, want the same 1", n)
	}

	// A long pause: after 3 s suspended the lease is handed back.
	sig.active.Store(true)
	flipped = time.Now()
	eventually(t, 20*time.Second, "the lease handed back", func() bool { return len(a.Running()) == 0 })
	t.Logf("lease handed back %s after the owner came back", time.Since(flipped))
	js, err := sub.c.Status(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if js.Leased != 0 || js.Accepted != 0 {
		t.Errorf("job status after the hand-back: %+v", js)
	}
	eventually(t, 10*time.Second, "the worker killed", func() bool { return len(wp.PIDs()) == 0 })

	// The pool leases the task again, to another device, which finishes it.
	bexec := &fakeExec{}
	startAgent(t, co.url, newDevice(t, nil), bexec, 1, nil)
	eventually(t, 30*time.Second, "the task done elsewhere", func() bool {
		js, err := sub.c.Status(ctx, j.ID)
		return err == nil && js.Accepted == 1
	})
	if n := bexec.runs.Load(); n != 1 {
		t.Errorf("the other agent ran the task %d times, want 1", n)
	}
	mine, err := a.dev.local.Contributions(ctx, store.Filter{})
	if err != nil || len(mine) != 0 {
		t.Errorf("the suspended agent recorded %v, %v; want no contribution", mine, err)
	}
	if st := a.Status(); st.Decision.State != "waiting" || len(st.Running) != 0 {
		t.Errorf("status of the waiting agent: %+v", st)
	}
}
