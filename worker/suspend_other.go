//go:build !unix && !windows

package worker

import (
	"errors"
	"os/exec"
)

// canSuspend says whether stopProcess and continueProcess work here.
const canSuspend = false

// stopProcess is not implemented on this platform.
func stopProcess(*exec.Cmd) error { return errors.ErrUnsupported }

// continueProcess is not implemented on this platform.
func continueProcess(*exec.Cmd) error { return errors.ErrUnsupported }
