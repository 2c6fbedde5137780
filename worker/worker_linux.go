//go:build linux

package worker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr puts a worker in a process group of its own (so that killing
// the group kills everything it might start) and has the kernel kill it when
// the parent goes away. Pdeathsig fires when the *thread* that started the
// child exits, which is why Pool starts workers from a goroutine locked to
// its thread for the pool's lifetime (see spawner).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killProcess sends SIGKILL to the worker's process group, and to the
// process itself in case the group is already gone.
func killProcess(cmd *exec.Cmd) {
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}

// lowerPriority gives every thread of this process nice 19 and the
// SCHED_IDLE policy, so that the process runs only on otherwise idle CPUs.
// Both are per thread on Linux and inherited by threads created later, so
// it repeats until a pass over /proc/self/task finds no thread it has not
// lowered yet.
func lowerPriority() error {
	done := map[int]bool{}
	for pass := 0; pass < 100; pass++ {
		entries, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return fmt.Errorf("list threads: %w", err)
		}
		fresh := 0
		for _, e := range entries {
			tid, err := strconv.Atoi(e.Name())
			if err != nil || done[tid] {
				continue
			}
			fresh++
			done[tid] = true
			if err := lowerThread(tid); err != nil {
				return err
			}
		}
		if fresh == 0 {
			return nil
		}
	}
	return errors.New("threads kept appearing")
}

func lowerThread(tid int) error {
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 19); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("setpriority thread %d: %w", tid, err)
	}
	attr := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE, Nice: 19}
	if err := unix.SchedSetAttr(tid, attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("sched_setattr SCHED_IDLE thread %d: %w", tid, err)
	}
	return nil
}

// adoptProcess has nothing to do on Linux: Pdeathsig (sysProcAttr) already
// ties the worker's life to the pool's.
func adoptProcess(*exec.Cmd) error { return nil }
