//go:build !unix

package agent

import (
	"fmt"
	"os"
	"os/exec"
)

// Restart starts the program now installed at this one's path (the
// new version) with the same arguments, and returns so that this one
// exits.
func Restart() error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("restart %s: %w", exe, err)
	}
	return cmd.Process.Release()
}
