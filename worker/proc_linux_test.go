//go:build linux

package worker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// procStat returns the fields of /proc/PID[/task/TID]/stat after the
// command name, so that fields[0] is field 3 (state) of proc(5).
func procStat(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("%s: no command name", path)
	}
	return strings.Fields(s[i+1:]), nil
}

// childProcesses lists the live (not zombie) children of this process.
func childProcesses(t testing.TB) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	me := strconv.Itoa(os.Getpid())
	var kids []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		f, err := procStat(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil || len(f) < 2 {
			continue // gone meanwhile
		}
		if f[1] == me {
			kids = append(kids, e.Name()+" ("+f[0]+")")
		}
	}
	return kids
}

// processGone reports whether pid has exited (gone, or a zombie waiting
// for a reaper that is not us).
func processGone(pid int) bool {
	f, err := procStat(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	return err == nil && len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// TestParentKilled kills -9 a process that owns a pool while its worker
// runs an endless task: the worker must die with it (Pdeathsig).
func TestParentKilled(t *testing.T) {
	needHostile(t)
	checkClean(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(parentConfig{Module: hostile.path, SHA256: hostile.sha, CacheDir: cacheDir})
	parent := exec.Command(exe)
	parent.Env = append(os.Environ(), parentEnv+"="+string(cfg))
	parent.Stderr = t.Output()
	out, err := parent.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = parent.Process.Kill()
		_ = parent.Wait()
		t.Fatalf("read worker pid: %v", err)
	}
	workerPID, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	if processGone(workerPID) {
		t.Fatalf("worker %d not running before the parent is killed", workerPID)
	}
	if err := parent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = parent.Wait()
	killed := time.Now()
	for !processGone(workerPID) {
		if time.Since(killed) > time.Minute { // patience: the kernel signals at once, a busy machine may run it late
			_ = syscall.Kill(workerPID, syscall.SIGKILL)
			t.Fatalf("worker %d still running %s after its parent was killed", workerPID, time.Since(killed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("worker gone %s after its parent was killed", time.Since(killed).Round(time.Millisecond))
}

// threadPriorities returns, for each thread of process pid, its nice
// value, its scheduling policy (proc(5) fields 19 and 41) and its I/O
// priority (ioprio_get(2)).
func threadPriorities(t *testing.T, pid int) map[string][3]string {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][3]string{}
	for _, task := range tasks {
		f, err := procStat(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			t.Fatal(err)
		}
		io, _, e := unix.Syscall(unix.SYS_IOPRIO_GET, ioprioWhoProcess, uintptr(tid), 0)
		if e != 0 {
			t.Fatalf("ioprio_get thread %d: %v", tid, e)
		}
		out[task.Name()] = [3]string{f[19-3], f[41-3], strconv.Itoa(int(io))}
	}
	return out
}

// TestPriority checks the priority of every thread of a worker when
// PriorityEnv is not set: nice 19, SCHED_IDLE (policy 5) and the idle I/O
// class by default (PriorityIdle); nice 19, SCHED_NORMAL (0) and the
// lowest best-effort I/O level with PriorityLow. SetPriority retires the
// idle workers of the old priority: the next task runs in a fresh worker
// at the new one.
func TestPriority(t *testing.T) {
	checkClean(t)
	cfg := childConfig(t, 1)
	cfg.Env = append(os.Environ(), childEnv+"=1")
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	empty := writeModule(t, "empty.wasm", emptyModule())
	idle := [3]string{"19", "5", strconv.Itoa(ioprioIdle)}
	low := [3]string{"19", "0", strconv.Itoa(ioprioLowest)}
	var pids []int
	for i, step := range []struct {
		set  Priority
		want [3]string
	}{
		{PriorityIdle, idle},
		{PriorityLow, low},
		{PriorityLow, low},
		{PriorityIdle, idle},
	} {
		if err := p.SetPriority(step.set); err != nil {
			t.Fatal(err)
		}
		res := mustSucceed(t, p, Request{ModulePath: empty.path, ModuleSHA256: empty.sha, Timeout: time.Minute})
		for tid, got := range threadPriorities(t, res.PID) {
			if got != step.want {
				t.Errorf("step %d (%s): worker %d thread %s: nice, policy, ioprio %v, want %v", i, step.set, res.PID, tid, got, step.want)
			}
		}
		pids = append(pids, res.PID)
	}
	// A worker is reused at the same priority, and never across priorities.
	if pids[0] == pids[1] || pids[1] != pids[2] || pids[2] == pids[3] {
		t.Errorf("worker PIDs %v: want a fresh worker at each change of priority and the same one otherwise", pids)
	}
	if !processGone(pids[0]) {
		t.Errorf("worker %d of the old priority still alive", pids[0])
	}
	if err := p.SetPriority("high"); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("SetPriority(high) = %v, want ErrInvalidRequest", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !processGone(pids[3]) {
		t.Errorf("worker %d alive after Close", pids[3])
	}
}

// signal0 probes a process without signalling it.
var signal0 = syscall.Signal(0)
