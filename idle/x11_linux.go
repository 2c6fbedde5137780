//go:build linux

package idle

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/screensaver"
	"github.com/jezek/xgb/xproto"
)

// x11Idle is an InputIdleSource over the X11 MIT-SCREEN-SAVER extension:
// ScreenSaverQueryInfo's ms-since-user-input on the default screen's root,
// the server's time since its last keyboard or pointer event (what
// xprintidle prints). It works for a local X session, an X2Go or xrdp
// session whose DISPLAY it is given, and under Xvfb; it needs no cgo
// (jezek/xgb speaks the protocol itself).
//
// Under a Wayland session Xwayland sees only the input sent to X11
// clients, so the source declines when WAYLAND_DISPLAY is set and leaves
// that session to logind. It keeps one connection between calls (a
// connection per call was most of an idle donor's CPU); when a query
// fails it connects once more, so a restarted X server is picked up.
// Close closes the connection.
//
// xgb logs to its package-level Logger on every connection (a missing
// ~/.Xauthority, the EOF of a closed connection); the first call discards
// that log, since every failure that matters is returned as an error.
type x11Idle struct {
	display string // "" reads $DISPLAY on each call

	mu      sync.Mutex
	conn    *xgb.Conn // nil until connected
	connFor string    // the display conn is to
	root    xproto.Window
}

var (
	_ InputIdleSource = (*x11Idle)(nil)
	_ io.Closer       = (*x11Idle)(nil)
)

var quietXGB sync.Once

// IdleTime implements InputIdleSource.
func (x *x11Idle) IdleTime(ctx context.Context) (time.Duration, string, error) {
	display := x.display
	if display == "" {
		if os.Getenv("WAYLAND_DISPLAY") != "" {
			return 0, "", fmt.Errorf("x11: Wayland session, Xwayland misses native input: %w", ErrNoSource)
		}
		display = os.Getenv("DISPLAY")
	}
	if display == "" {
		return 0, "", fmt.Errorf("x11: DISPLAY not set: %w", ErrNoSource)
	}
	quietXGB.Do(func() { xgb.Logger.SetOutput(io.Discard) })
	x.mu.Lock()
	defer x.mu.Unlock()
	for try := 0; ; try++ {
		if x.conn == nil || x.connFor != display {
			if err := x.connect(display); err != nil {
				return 0, "", err
			}
		}
		if err := ctx.Err(); err != nil {
			return 0, "", fmt.Errorf("x11: %w", err)
		}
		info, err := screensaver.QueryInfo(x.conn, xproto.Drawable(x.root)).Reply()
		if err == nil {
			return time.Duration(info.MsSinceUserInput) * time.Millisecond, "x11-screensaver", nil
		}
		x.closeConn()
		if try == 1 {
			return 0, "", fmt.Errorf("x11: %s: query screen saver: %w", display, err)
		}
	}
}

// connect opens the connection to display. x.mu is held.
func (x *x11Idle) connect(display string) error {
	x.closeConn()
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		return fmt.Errorf("x11: connect %s: %w", display, err)
	}
	if err := screensaver.Init(conn); err != nil {
		conn.Close()
		return fmt.Errorf("x11: %s: no MIT-SCREEN-SAVER: %w", display, err)
	}
	x.conn, x.connFor, x.root = conn, display, xproto.Setup(conn).DefaultScreen(conn).Root
	return nil
}

// closeConn closes the connection, if any. x.mu is held.
func (x *x11Idle) closeConn() {
	if x.conn != nil {
		x.conn.Close()
		x.conn = nil
	}
}

// Close closes the connection; a later IdleTime connects again.
func (x *x11Idle) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.closeConn()
	return nil
}
