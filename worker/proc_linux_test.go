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
		if time.Since(killed) > 5*time.Second {
			_ = syscall.Kill(workerPID, syscall.SIGKILL)
			t.Fatalf("worker %d still running %s after its parent was killed", workerPID, time.Since(killed))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("worker gone %s after its parent was killed", time.Since(killed).Round(time.Millisecond))
}

// TestPriority checks that a worker runs with nice 19 and SCHED_IDLE on
// every thread when PriorityEnv is not set.
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
	res := mustSucceed(t, p, Request{ModulePath: empty.path, ModuleSHA256: empty.sha, Timeout: time.Minute})
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", res.PID))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		f, err := procStat(fmt.Sprintf("/proc/%d/task/%s/stat", res.PID, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		// proc(5): field 19 is nice, field 41 the policy (SCHED_IDLE = 5).
		if nice, policy := f[19-3], f[41-3]; nice != "19" || policy != "5" {
			t.Errorf("thread %s: nice %s policy %s, want 19 and 5 (SCHED_IDLE)", task.Name(), nice, policy)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if !processGone(res.PID) {
		t.Errorf("worker %d alive after Close", res.PID)
	}
}

// signal0 probes a process without signalling it.
var signal0 = syscall.Signal(0)
