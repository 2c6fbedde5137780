//go:build !unix || darwin

package desktop

import (
	"log/slog"

	"fyne.io/systray"
)

// trayAvailable reports that the tray works and shows: Windows and macOS
// always have one (the notification area, the menu bar).
func trayAvailable(*slog.Logger) (tray, shown bool) { return true, true }

// runSystray shows the tray until quit is closed: systray.Run, which on
// Windows and macOS runs the platform's event loop on this thread, and
// calls onReady once the tray exists.
func runSystray(onReady func(), quit <-chan struct{}) {
	go func() {
		<-quit
		systray.Quit()
	}()
	systray.Run(onReady, nil)
}
