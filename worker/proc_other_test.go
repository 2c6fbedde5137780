//go:build !linux

package worker

import (
	"syscall"
	"testing"
)

// childProcesses is only implemented on Linux.
func childProcesses(testing.TB) []string { return nil }

// signal0 probes a process without signalling it (on Windows, where only
// os.Kill is supported, every probe fails, weakening the checks).
var signal0 = syscall.Signal(0)
