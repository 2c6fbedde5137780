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
// that session to logind. It connects anew on every call, so a restarted
// X server is picked up and no connection outlives the call.
//
// xgb logs to its package-level Logger on every connection (a missing
// ~/.Xauthority, the EOF of a closed connection); the first call discards
// that log, since every failure that matters is returned as an error.
type x11Idle struct {
	display string // "" reads $DISPLAY on each call
}

var _ InputIdleSource = x11Idle{}

var quietXGB sync.Once

// IdleTime implements InputIdleSource.
func (x x11Idle) IdleTime(ctx context.Context) (time.Duration, string, error) {
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
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		return 0, "", fmt.Errorf("x11: connect %s: %w", display, err)
	}
	defer conn.Close()
	if err := screensaver.Init(conn); err != nil {
		return 0, "", fmt.Errorf("x11: %s: no MIT-SCREEN-SAVER: %w", display, err)
	}
	if err := ctx.Err(); err != nil {
		return 0, "", fmt.Errorf("x11: %w", err)
	}
	root := xproto.Setup(conn).DefaultScreen(conn).Root
	info, err := screensaver.QueryInfo(conn, xproto.Drawable(root)).Reply()
	if err != nil {
		return 0, "", fmt.Errorf("x11: %s: query screen saver: %w", display, err)
	}
	return time.Duration(info.MsSinceUserInput) * time.Millisecond, "x11-screensaver", nil
}
