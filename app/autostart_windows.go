//go:build windows

package app

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/windows/registry"
)

// runKey is the per-user key whose values Windows starts at logon.
const runKey = `Software\Microsoft\Windows\CurrentVersion\Run`

// runAutostart is the idlepool-tray value of HKCU's Run key.
type runAutostart struct{ exe, home string }

func newAutostart(exe, home string) Autostart { return runAutostart{exe: exe, home: home} }

// command is the value's data: the quoted path, as Explorer expects for
// paths with spaces, then `--home DIR` (DIR quoted as the C runtime
// parses it) when a home was given.
func (a runAutostart) command() string {
	cmd := `"` + a.exe + `"`
	if a.home != "" {
		cmd += " --home " + syscall.EscapeArg(a.home)
	}
	return cmd
}

// Enabled reports whether the value exists and starts exe with this home.
func (a runAutostart) Enabled() (bool, error) {
	k, err := registry.OpenKey(registry.CURRENT_USER, runKey, registry.QUERY_VALUE)
	if errors.Is(err, registry.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("autostart: open the Run key: %w", err)
	}
	defer k.Close()
	v, _, err := k.GetStringValue(autostartName)
	if errors.Is(err, registry.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("autostart: read the Run value: %w", err)
	}
	return v == a.command(), nil
}

// Enable writes the value (creating the key if missing).
func (a runAutostart) Enable() error {
	k, _, err := registry.CreateKey(registry.CURRENT_USER, runKey, registry.SET_VALUE)
	if err != nil {
		return fmt.Errorf("autostart: open the Run key: %w", err)
	}
	defer k.Close()
	if err := k.SetStringValue(autostartName, a.command()); err != nil {
		return fmt.Errorf("autostart: write the Run value: %w", err)
	}
	return nil
}

// Disable deletes the value; nil if there is none.
func (a runAutostart) Disable() error {
	k, err := registry.OpenKey(registry.CURRENT_USER, runKey, registry.SET_VALUE)
	if errors.Is(err, registry.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("autostart: open the Run key: %w", err)
	}
	defer k.Close()
	if err := k.DeleteValue(autostartName); err != nil && !errors.Is(err, registry.ErrNotExist) {
		return fmt.Errorf("autostart: delete the Run value: %w", err)
	}
	return nil
}
