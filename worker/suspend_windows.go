//go:build windows

package worker

import (
	"fmt"
	"os/exec"

	"golang.org/x/sys/windows"
)

// ntdll's NtSuspendProcess and NtResumeProcess suspend and resume every
// thread of a process. They are undocumented but stable since Windows XP
// and what Sysinternals' PsSuspend and Process Explorer use; loaded
// lazily, so a missing procedure is an error at the call, not at start.
var (
	ntdll            = windows.NewLazySystemDLL("ntdll.dll")
	ntSuspendProcess = ntdll.NewProc("NtSuspendProcess")
	ntResumeProcess  = ntdll.NewProc("NtResumeProcess")
)

// canSuspend says whether stopProcess and continueProcess work here.
const canSuspend = true

// stopProcess suspends every thread of the worker process.
func stopProcess(cmd *exec.Cmd) error { return ntProcessCall(cmd, ntSuspendProcess) }

// continueProcess resumes every thread of the worker process.
func continueProcess(cmd *exec.Cmd) error { return ntProcessCall(cmd, ntResumeProcess) }

func ntProcessCall(cmd *exec.Cmd, proc *windows.LazyProc) error {
	if err := proc.Find(); err != nil {
		return err
	}
	h, err := windows.OpenProcess(windows.PROCESS_SUSPEND_RESUME, false, uint32(cmd.Process.Pid))
	if err != nil {
		return fmt.Errorf("OpenProcess: %w", err)
	}
	defer windows.CloseHandle(h)
	status, _, _ := proc.Call(uintptr(h))
	if status != 0 { // an NTSTATUS; 0 is STATUS_SUCCESS
		return fmt.Errorf("%s: NTSTATUS %#x", proc.Name, status)
	}
	return nil
}
