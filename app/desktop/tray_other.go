//go:build !unix || darwin

package desktop

import "log/slog"

// trayAvailable reports that the tray works and shows: Windows and macOS
// always have one (the notification area, the menu bar).
func trayAvailable(*slog.Logger) (tray, shown bool) { return true, true }
