//go:build !linux

package worker

import "time"

// threadCPU returns 0: the thread's CPU time is measured on Linux only.
func threadCPU() time.Duration { return 0 }
