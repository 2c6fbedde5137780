package worker

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestWorkerMemoryReturnedBetweenTasks runs tasks that each write 64 MiB
// of linear memory on one worker: between tasks the worker must hold none
// of it. (A linear memory on the Go heap stayed there, as garbage and then
// as the heap's free pages, until the Go runtime's scavenger returned it.)
func TestWorkerMemoryReturnedBetweenTasks(t *testing.T) {
	p := newTestPool(t, 1)
	touch := writeModule(t, "touch.wasm", memTouch64())
	req := task("", 0)
	req.ModulePath, req.ModuleSHA256 = touch.path, touch.sha
	var pid int
	for range 6 {
		res := mustRun(t, p, req)
		if res.Failure != nil {
			t.Fatalf("task failed: %v", res.Failure)
		}
		pid = res.PID
	}
	rss, err := vmRSSMiB(pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("worker %d holds %d MiB after 6 tasks of 64 MiB each", pid, rss)
	if rss >= 64 {
		t.Errorf("worker holds %d MiB between tasks, want less than the 64 MiB one task wrote", rss)
	}
}

// vmRSSMiB returns a process's resident memory in MiB (VmRSS).
func vmRSSMiB(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kib, err := strconv.Atoi(f[1])
			return kib / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}
