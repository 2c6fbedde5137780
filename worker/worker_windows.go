//go:build windows

package worker

import (
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/windows"
)

// sysProcAttr starts a worker at IDLE_PRIORITY_CLASS (it runs only when no
// other thread of normal priority wants the CPU), or for PriorityLow at
// BELOW_NORMAL_PRIORITY_CLASS, and without a console window of its own:
// the tray app is a GUI program, and a console worker started from it
// would otherwise open one per worker.
func sysProcAttr(prio Priority) *syscall.SysProcAttr {
	class := uint32(windows.IDLE_PRIORITY_CLASS)
	if prio == PriorityLow {
		class = windows.BELOW_NORMAL_PRIORITY_CLASS
	}
	return &syscall.SysProcAttr{
		CreationFlags: class | windows.CREATE_NO_WINDOW,
		HideWindow:    true,
	}
}

// killProcess ends the worker with TerminateProcess.
func killProcess(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

// lowerPriority puts this process (the worker) in IDLE_PRIORITY_CLASS and
// background mode (PROCESS_MODE_BACKGROUND_BEGIN: its I/O and memory
// priorities lowered too, which only a process can ask for itself), or
// for PriorityLow in BELOW_NORMAL_PRIORITY_CLASS, in case it was started
// by something other than a Pool.
func lowerPriority(prio Priority) error {
	if prio == PriorityLow {
		if err := windows.SetPriorityClass(windows.CurrentProcess(), windows.BELOW_NORMAL_PRIORITY_CLASS); err != nil {
			return fmt.Errorf("SetPriorityClass BELOW_NORMAL_PRIORITY_CLASS: %w", err)
		}
		return nil
	}
	if err := windows.SetPriorityClass(windows.CurrentProcess(), windows.IDLE_PRIORITY_CLASS); err != nil {
		return fmt.Errorf("SetPriorityClass IDLE_PRIORITY_CLASS: %w", err)
	}
	if err := windows.SetPriorityClass(windows.CurrentProcess(), windows.PROCESS_MODE_BACKGROUND_BEGIN); err != nil {
		return fmt.Errorf("SetPriorityClass PROCESS_MODE_BACKGROUND_BEGIN: %w", err)
	}
	return nil
}

// workerJob is a Job Object with JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE that
// every worker of this process joins. Its handle is never closed: Windows
// closes it when this process ends, however it ends (Task Manager's End
// task included), and then terminates every process still in the job.
// This is what Pdeathsig does on Linux.
var workerJob = sync.OnceValues(func() (windows.Handle, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return 0, fmt.Errorf("CreateJobObject: %w", err)
	}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{
		BasicLimitInformation: windows.JOBOBJECT_BASIC_LIMIT_INFORMATION{
			LimitFlags: windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
		},
	}
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		_ = windows.CloseHandle(job)
		return 0, fmt.Errorf("SetInformationJobObject KILL_ON_JOB_CLOSE: %w", err)
	}
	return job, nil
})

// adoptProcess puts a freshly started worker into workerJob, so that it
// dies with this process. The worker starts no processes of its own, so
// nothing escapes between its start and this call.
func adoptProcess(cmd *exec.Cmd) error {
	job, err := workerJob()
	if err != nil {
		return err
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(cmd.Process.Pid))
	if err != nil {
		return fmt.Errorf("OpenProcess: %w", err)
	}
	defer windows.CloseHandle(h)
	if err := windows.AssignProcessToJobObject(job, h); err != nil {
		return fmt.Errorf("AssignProcessToJobObject: %w", err)
	}
	return nil
}
