//go:build unix

package worker

import (
	"errors"
	"os/exec"
	"syscall"
)

// canSuspend says whether stopProcess and continueProcess work here.
const canSuspend = true

// stopProcess sends SIGSTOP to the worker's process group (on Linux each
// worker leads one, see sysProcAttr) and to the process itself, for
// platforms where it leads none. A process already gone is not an error.
func stopProcess(cmd *exec.Cmd) error { return signalWorker(cmd, syscall.SIGSTOP) }

// continueProcess sends SIGCONT like stopProcess sends SIGSTOP.
func continueProcess(cmd *exec.Cmd) error { return signalWorker(cmd, syscall.SIGCONT) }

func signalWorker(cmd *exec.Cmd, sig syscall.Signal) error {
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, sig) // ESRCH where the worker leads no group
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}
