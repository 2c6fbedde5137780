//go:build linux

package idle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/godbus/dbus/v5"
)

// The D-Bus names of Feral Interactive's GameMode daemon, gamemoded
// (gamemode's daemon/gamemode-dbus.c): the service on the session bus,
// its object, and the interface with the ClientCount property (int32, the
// games registered now).
const (
	gameModeService   = "com.feralinteractive.GameMode"
	gameModePath      = "/com/feralinteractive/GameMode"
	gameModeInterface = "com.feralinteractive.GameMode"
)

// gameModeDBus is the GameGameMode sign: gamemoded's ClientCount on the
// user's session bus, above 0 while a game that asked for GameMode runs
// (Steam's "gamemoderun %command%", Lutris, games linking libgamemode).
//
// It reads the property with Properties.Get and the no-auto-start flag,
// so that asking never starts a gamemoded that is installed but not
// running; no owner of the name means GameMode is not running
// (ErrNoSource). It keeps one connection between calls (a connection
// costs an authentication and a Hello) and connects anew after an error.
// The bus is DBUS_SESSION_BUS_ADDRESS, or $XDG_RUNTIME_DIR/bus where it
// exists; without either there is no session bus (ErrNoSource), and no
// dbus-launch is ever started.
type gameModeDBus struct {
	address string // "" reads the environment on each connect

	mu   sync.Mutex
	conn *dbus.Conn
}

var (
	_ GameSource = (*gameModeDBus)(nil)
	_ io.Closer  = (*gameModeDBus)(nil)
)

// sessionBusAddress is the address of the user's session bus, or "".
func sessionBusAddress() string {
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" {
		return a
	}
	if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
		p := filepath.Join(dir, "bus")
		if fi, err := os.Stat(p); err == nil && fi.Mode().Type() == os.ModeSocket {
			return "unix:path=" + p
		}
	}
	return ""
}

// Game implements GameSource.
func (g *gameModeDBus) Game(ctx context.Context) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn == nil {
		addr := g.address
		if addr == "" {
			addr = sessionBusAddress()
		}
		if addr == "" {
			return "", fmt.Errorf("gamemode: no session bus: %w", ErrNoSource)
		}
		conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
		if err != nil {
			return "", fmt.Errorf("gamemode: session bus: %w", err)
		}
		g.conn = conn
	}
	var v dbus.Variant
	err := g.conn.Object(gameModeService, gameModePath).CallWithContext(ctx,
		"org.freedesktop.DBus.Properties.Get", dbus.FlagNoAutoStart, gameModeInterface, "ClientCount").Store(&v)
	var derr dbus.Error
	switch {
	case errors.As(err, &derr) && (derr.Name == "org.freedesktop.DBus.Error.ServiceUnknown" ||
		derr.Name == "org.freedesktop.DBus.Error.NameHasNoOwner"):
		return "", fmt.Errorf("gamemode: not running: %w", ErrNoSource)
	case err != nil:
		g.conn.Close()
		g.conn = nil
		return "", fmt.Errorf("gamemode: read ClientCount: %w", err)
	}
	n, ok := v.Value().(int32)
	if !ok {
		return "", fmt.Errorf("gamemode: ClientCount is %s, not an int32", v.Signature())
	}
	return gameModeWhat(int(n)), nil
}

// Close closes the kept connection.
func (g *gameModeDBus) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.conn != nil {
		err := g.conn.Close()
		g.conn = nil
		return err
	}
	return nil
}
