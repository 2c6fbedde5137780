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

// killProcess sends SIGKILL to the worker's process group, and to the
// process itself in case the group is already gone.
func killProcess(cmd *exec.Cmd) {
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
}

// sysProcAttr puts a worker in a process group of its own (so that killing
// the group kills everything it might start) and has the kernel kill it when
// the parent goes away. Pdeathsig fires when the *thread* that started the
// child exits, which is why Pool starts workers from a goroutine locked to
// its thread for the pool's lifetime (see spawner). The worker lowers its
// own priority (lowerPriority), so prio changes nothing here.
func sysProcAttr(prio Priority) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// lowerPriority gives every thread of this process nice 19, and for
// PriorityIdle the SCHED_IDLE policy and the idle I/O class, so that the
// process runs only on otherwise idle CPUs and its I/O waits for everyone
// else's; for PriorityLow the normal policy (SCHED_NORMAL) and the lowest best-effort
// I/O level. All three are per thread on Linux and inherited by threads
// created later, so it repeats until a pass over /proc/self/task finds no
// thread it has not lowered yet.
func lowerPriority(prio Priority) error {
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
			if err := lowerThread(tid, prio); err != nil {
				return err
			}
		}
		if fresh == 0 {
			return nil
		}
	}
	return errors.New("threads kept appearing")
}

// I/O priorities of ioprio_set(2): the class in the top bits, the level
// (0 highest to 7 lowest) in the low ones.
const (
	ioprioWhoProcess = 1 // IOPRIO_WHO_PROCESS: a thread ID
	ioprioClassShift = 13
	ioprioClassBE    = 2 // IOPRIO_CLASS_BE, best effort
	ioprioClassIdle  = 3 // IOPRIO_CLASS_IDLE
	ioprioIdle       = ioprioClassIdle << ioprioClassShift
	ioprioLowest     = ioprioClassBE<<ioprioClassShift | 7
)

func lowerThread(tid int, prio Priority) error {
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 19); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("setpriority thread %d: %w", tid, err)
	}
	policy, io, what := unix.SCHED_IDLE, ioprioIdle, "SCHED_IDLE"
	if prio == PriorityLow {
		policy, io, what = unix.SCHED_NORMAL, ioprioLowest, "SCHED_NORMAL"
	}
	attr := &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: uint32(policy), Nice: 19}
	if err := unix.SchedSetAttr(tid, attr, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("sched_setattr %s thread %d: %w", what, tid, err)
	}
	if _, _, e := unix.Syscall(unix.SYS_IOPRIO_SET, ioprioWhoProcess, uintptr(tid), uintptr(io)); e != 0 && e != unix.ESRCH {
		return fmt.Errorf("ioprio_set thread %d: %w", tid, e)
	}
	return nil
}

// adoptProcess has nothing to do on Linux: Pdeathsig (sysProcAttr) already
// ties the worker's life to the pool's.
func adoptProcess(*exec.Cmd) error { return nil }
