package app

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// autostartName is the name of the start-at-login entry: the .desktop
// file's base name on Linux, the Run value on Windows (macOS names its
// LaunchAgent autostartLabel).
const autostartName = "idlepool-tray"

// NewAutostart returns the start-at-login entry that starts the program
// exe (an absolute path, from os.Executable) with `--home home` when home
// is not empty (an absolute path: the home the app runs with, so that the
// next login starts the same identity), else with no arguments: an XDG
// autostart file ($XDG_CONFIG_HOME/autostart/idlepool-tray.desktop,
// default ~/.config/autostart) on Linux, or nothing of the user's where
// a system-wide entry of that name (/etc/xdg/autostart, the Debian
// package's) starts exe, with a Hidden=true override to turn it off (see
// xdgAutostart); the idlepool-tray value of
// HKCU\Software\Microsoft\Windows\CurrentVersion\Run on Windows, and
// ~/Library/LaunchAgents/org.idlepool.tray.plist on macOS. On other
// systems it returns nil, which hides the tray's "Start at login". The
// entry is only read or written when its methods are called. Enabled
// reports true only for an entry that starts exe with this home; Enable
// replaces an entry for another program or home.
func NewAutostart(exe, home string) Autostart { return newAutostart(exe, home) }

// args returns the entry's command line: exe, then --home home if given.
func autostartArgs(exe, home string) []string {
	if home == "" {
		return []string{exe}
	}
	return []string{exe, "--home", home}
}

// writeAutostartFile writes body to the entry file at p, making its
// directory: through a temporary file renamed over p, so that a crash
// leaves the old entry or the new one, never half of one.
func writeAutostartFile(p string, body []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("autostart: %w", err)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, body, 0o644); err != nil {
		return fmt.Errorf("autostart: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("autostart: %w", err)
	}
	return nil
}

// removeAutostartFile removes the entry file at p; nil if there is none.
func removeAutostartFile(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("autostart: %w", err)
	}
	return nil
}

// readAutostartFile reads the entry file at p; found is false when there
// is none.
func readAutostartFile(p string) (body []byte, found bool, err error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("autostart: %w", err)
	}
	return b, true, nil
}
