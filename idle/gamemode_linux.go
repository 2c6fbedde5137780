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
// (ErrNoSource), and a gamemoded that restarts is found again by its name
// on the next call. The bus is DBUS_SESSION_BUS_ADDRESS, or
// $XDG_RUNTIME_DIR/bus where it exists; without either there is no
// session bus (ErrNoSource), and no dbus-launch is ever started.
//
// It keeps one connection for its whole life (a connection costs an
// authentication and a Hello), made on the first call and closed by
// Close. Each call's ctx bounds that call only: the handshake of a new
// connection and the property read, never the connection itself. A call
// that fails or times out keeps the connection; only a connection the bus
// closed (the bus restarted or went away) is replaced, on the next call.
// Close ends the connection; a later call connects anew.
type gameModeDBus struct {
	address string // "" reads the environment on each connect

	mu   sync.Mutex
	conn *dbus.Conn // nil until the first call, after Close, and after the bus closed it
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
	conn, err := g.connLocked(ctx)
	if err != nil {
		return "", err
	}
	var v dbus.Variant
	err = conn.Object(gameModeService, gameModePath).CallWithContext(ctx,
		"org.freedesktop.DBus.Properties.Get", dbus.FlagNoAutoStart, gameModeInterface, "ClientCount").Store(&v)
	var derr dbus.Error
	switch {
	case errors.As(err, &derr) && (derr.Name == "org.freedesktop.DBus.Error.ServiceUnknown" ||
		derr.Name == "org.freedesktop.DBus.Error.NameHasNoOwner"):
		return "", fmt.Errorf("gamemode: not running: %w", ErrNoSource)
	case err != nil:
		return "", fmt.Errorf("gamemode: read ClientCount: %w", err)
	}
	n, ok := v.Value().(int32)
	if !ok {
		return "", fmt.Errorf("gamemode: ClientCount is %s, not an int32", v.Signature())
	}
	return gameModeWhat(int(n)), nil
}

// connLocked returns the kept connection, connecting first when there is
// none or the bus has closed it. ctx bounds the handshake (authentication
// and Hello) and nothing after it: the connection is not tied to ctx.
// g.mu must be held.
func (g *gameModeDBus) connLocked(ctx context.Context) (*dbus.Conn, error) {
	if g.conn != nil && g.conn.Connected() {
		return g.conn, nil
	}
	if g.conn != nil { // closed by the bus: replace it
		_ = g.conn.Close()
		g.conn = nil
	}
	addr := g.address
	if addr == "" {
		addr = sessionBusAddress()
	}
	if addr == "" {
		return nil, fmt.Errorf("gamemode: no session bus: %w", ErrNoSource)
	}
	conn, err := dbus.Dial(addr)
	if err != nil {
		return nil, fmt.Errorf("gamemode: session bus %s: %w", addr, err)
	}
	// Closing the connection when ctx ends makes a handshake that hangs
	// return; once done, ctx no longer has any hold on it.
	stop := context.AfterFunc(ctx, func() { _ = conn.Close() })
	err = conn.Auth(nil)
	if err == nil {
		err = conn.Hello()
	}
	if !stop() { // ctx ended during or just after the handshake and closed conn
		_ = conn.Close()
		return nil, fmt.Errorf("gamemode: session bus %s: %w", addr, context.Cause(ctx))
	}
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("gamemode: session bus %s: %w", addr, err)
	}
	g.conn = conn
	return conn, nil
}

// Close closes the kept connection, if any; a later Game connects anew.
// Safe to call more than once.
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
