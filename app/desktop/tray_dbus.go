//go:build unix && !darwin

package desktop

import (
	"context"
	"log/slog"
	"time"

	"fyne.io/systray"
	"github.com/godbus/dbus/v5"
)

// watcherWait is how long trayAvailable waits for a StatusNotifierWatcher
// (the panel) to appear on the session bus: at login the app may start
// before the panel does.
const watcherWait = 5 * time.Second

// trayAvailable reports whether fyne.io/systray can work (tray), and
// whether its icon shows now (shown). systray talks StatusNotifierItem
// over the D-Bus session bus, and without one it logs an error and panics
// when the app quits: tray needs the session bus to answer a ping. The
// icon shows once a StatusNotifierWatcher (the panel) owns its name on
// the bus; systray registers with one that appears later, but when none
// appears within watcherWait (GNOME without its AppIndicator extension)
// shown is false, so that the caller opens a window the owner can see.
func trayAvailable(log *slog.Logger) (tray, shown bool) {
	conn, err := dbus.ConnectSessionBus()
	if err != nil {
		log.Info("No D-Bus session bus, so no system tray", "err", err)
		return false, false
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.Peer.Ping", 0).Err; err != nil {
		log.Info("The D-Bus session bus does not answer, so no system tray", "err", err)
		return false, false
	}
	deadline := time.Now().Add(watcherWait)
	for {
		var has bool
		err := conn.BusObject().Call("org.freedesktop.DBus.NameHasOwner", 0, "org.kde.StatusNotifierWatcher").Store(&has)
		if err == nil && has {
			return true, true
		}
		if time.Now().After(deadline) {
			log.Info("No StatusNotifierWatcher on the session bus: the tray icon shows once a panel offers one", "err", err)
			return true, false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// runSystray shows the tray until quit is closed: it exports the tray's
// item on the session bus, then calls onReady, then waits. fyne.io/systray's
// Run calls onReady on a goroutine of its own as soon as it starts, while
// it is still connecting to the bus and exporting the item, and its menu
// calls read that connection without its lock: a data race (the race
// detector caught one in the tray's test). Here the item is exported
// before onReady runs, on the same goroutine.
func runSystray(onReady func(), quit <-chan struct{}) {
	start, end := systray.RunWithExternalLoop(nil, nil)
	start()
	onReady()
	<-quit
	end()
}
