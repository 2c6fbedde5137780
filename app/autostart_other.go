//go:build !linux && !windows && !darwin

package app

// newAutostart returns nil: no start-at-login entry is known here, and
// the tray hides the item.
func newAutostart(string, string) Autostart { return nil }
