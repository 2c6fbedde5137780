//go:build !linux && !windows

package worker

import (
	"errors"
	"os/exec"
	"syscall"
)

// sysProcAttr has no portable settings outside Linux. A worker outlives a
// parent that dies without calling Pool.Close until it next reads its
// stdin, which then ends (io.EOF), and Serve returns.
func sysProcAttr(Priority) *syscall.SysProcAttr { return nil }

// killProcess kills the worker process.
func killProcess(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

// lowerPriority is only implemented on Linux and Windows.
func lowerPriority(Priority) error { return errors.ErrUnsupported }

// adoptProcess has nothing to do outside Linux and Windows.
func adoptProcess(*exec.Cmd) error { return nil }
