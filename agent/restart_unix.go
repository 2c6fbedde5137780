//go:build unix

package agent

import (
	"fmt"
	"os"
	"syscall"
)

// Restart replaces this process by the program now installed at its
// path (the new version), with the same arguments and environment.
func Restart() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if err := syscall.Exec(exe, os.Args, os.Environ()); err != nil {
		return fmt.Errorf("restart %s: %w", exe, err)
	}
	return nil // not reached
}
