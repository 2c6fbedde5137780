//go:build linux

package idle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
)

// fullScreenX11 is the GameFullScreen sign on X11: the window the window
// manager names in the root window's _NET_ACTIVE_WINDOW has
// _NET_WM_STATE_FULLSCREEN in its _NET_WM_STATE (Extended Window Manager
// Hints 1.5, "_NET_ACTIVE_WINDOW" and "_NET_WM_STATE"). A game that takes
// the screen asks for that state, and every EWMH window manager (GNOME's,
// KDE's, Xfwm, i3, ...) publishes the active window; under Wayland,
// Xwayland carries both for the X11 programs, which most games on Linux
// still are (SDL2, Proton, Wine).
//
// Without a window manager there is no _NET_ACTIVE_WINDOW and the sign
// cannot exist (ErrNoSource). A full-screen video player counts too: the
// sign cannot tell a film from a game, and both want the machine quiet.
//
// Each call costs two round trips to the X server (three while a window
// is full-screen, to read its title) on one connection kept between
// calls; a query that fails closes it, and the next call connects anew.
// xgb's calls take no context, so a query runs in a goroutine and Game
// returns when ctx ends; while that query has not returned, later calls
// answer ErrProbeTimeout at once instead of piling up queries.
type fullScreenX11 struct {
	display string // "" reads $DISPLAY on each call

	mu      sync.Mutex
	busy    bool // a query runs (it holds the connection)
	conn    *xgb.Conn
	connFor string
	x       x11Atoms
	gen     int // counts Close calls: a query of an older one closes its connection
}

// x11Atoms are a connection's root window and the atoms the query needs.
type x11Atoms struct {
	root                                  xproto.Window
	active, state, fullscreen, name, utf8 xproto.Atom
}

var (
	_ GameSource = (*fullScreenX11)(nil)
	_ io.Closer  = (*fullScreenX11)(nil)
)

// fullScreenAnswer is what one query found.
type fullScreenAnswer struct {
	what string
	conn *xgb.Conn // open after a query that worked, for the next one
	x    x11Atoms
	err  error
}

// Game implements GameSource.
func (f *fullScreenX11) Game(ctx context.Context) (string, error) {
	display := f.display
	if display == "" {
		display = os.Getenv("DISPLAY")
	}
	if display == "" {
		return "", fmt.Errorf("full screen: DISPLAY not set: %w", ErrNoSource)
	}
	quietXGB.Do(func() { xgb.Logger.SetOutput(io.Discard) })

	f.mu.Lock()
	if f.busy {
		f.mu.Unlock()
		return "", fmt.Errorf("full screen: %s: the last query has not returned: %w", display, ErrProbeTimeout)
	}
	conn, x := f.conn, f.x
	if conn != nil && f.connFor != display {
		conn.Close()
		conn = nil
	}
	f.conn, f.busy = nil, true
	gen := f.gen
	f.mu.Unlock()

	answer := make(chan fullScreenAnswer, 1)
	go func() {
		a := fullScreenQuery(conn, x, display)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.busy = false
		if a.conn != nil {
			if gen == f.gen && f.conn == nil {
				f.conn, f.connFor, f.x = a.conn, display, a.x
			} else {
				a.conn.Close()
			}
		}
		answer <- a
	}()
	select {
	case a := <-answer:
		return a.what, a.err
	case <-ctx.Done():
		return "", fmt.Errorf("full screen: %s did not answer in time: %w", display, ErrProbeTimeout)
	}
}

// fullScreenQuery asks the server at display on conn (with its atoms x),
// or on a new connection when conn is nil.
func fullScreenQuery(conn *xgb.Conn, x x11Atoms, display string) fullScreenAnswer {
	if conn == nil {
		var err error
		if conn, x, err = fullScreenConnect(display); err != nil {
			return fullScreenAnswer{err: err}
		}
	}
	what, err := activeFullScreen(conn, x)
	if err != nil && !errors.Is(err, ErrNoSource) {
		conn.Close()
		return fullScreenAnswer{err: fmt.Errorf("full screen: %s: %w", display, err)}
	}
	return fullScreenAnswer{what: what, conn: conn, x: x, err: err}
}

// fullScreenConnect opens a connection to display and interns the atoms.
func fullScreenConnect(display string) (*xgb.Conn, x11Atoms, error) {
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		return nil, x11Atoms{}, fmt.Errorf("full screen: connect %s: %w", display, err)
	}
	x := x11Atoms{root: xproto.Setup(conn).DefaultScreen(conn).Root}
	names := []string{"_NET_ACTIVE_WINDOW", "_NET_WM_STATE", "_NET_WM_STATE_FULLSCREEN", "_NET_WM_NAME", "UTF8_STRING"}
	cookies := make([]xproto.InternAtomCookie, len(names))
	for i, n := range names {
		cookies[i] = xproto.InternAtom(conn, false, uint16(len(n)), n)
	}
	atoms := []*xproto.Atom{&x.active, &x.state, &x.fullscreen, &x.name, &x.utf8}
	for i, c := range cookies {
		r, err := c.Reply()
		if err != nil {
			conn.Close()
			return nil, x11Atoms{}, fmt.Errorf("full screen: %s: intern %s: %w", display, names[i], err)
		}
		*atoms[i] = r.Atom
	}
	return conn, x, nil
}

// activeFullScreen reads the active window and its state: "" when it is
// not full-screen, ErrNoSource when no window manager publishes an
// active window.
func activeFullScreen(conn *xgb.Conn, x x11Atoms) (string, error) {
	r, err := xproto.GetProperty(conn, false, x.root, x.active, xproto.AtomWindow, 0, 1).Reply()
	if err != nil {
		return "", fmt.Errorf("read _NET_ACTIVE_WINDOW: %w", err)
	}
	if r.Format != 32 || len(r.Value) < 4 {
		return "", fmt.Errorf("full screen: no window manager publishes _NET_ACTIVE_WINDOW: %w", ErrNoSource)
	}
	win := xproto.Window(xgb.Get32(r.Value))
	if win == 0 {
		return "", nil // no window is active
	}
	st, err := xproto.GetProperty(conn, false, win, x.state, xproto.AtomAtom, 0, 64).Reply()
	if err != nil {
		var bad xproto.WindowError
		if errors.As(err, &bad) {
			return "", nil // closed since the window manager named it
		}
		return "", fmt.Errorf("read _NET_WM_STATE of window %#x: %w", win, err)
	}
	full := false
	for i := 0; st.Format == 32 && i+4 <= len(st.Value); i += 4 {
		if xproto.Atom(xgb.Get32(st.Value[i:])) == x.fullscreen {
			full = true
			break
		}
	}
	if !full {
		return "", nil
	}
	return fullScreenWhat(windowTitle(conn, x, win)), nil
}

// windowTitle reads the window's _NET_WM_NAME (UTF-8), or its WM_NAME;
// "" when it has none or cannot be read.
func windowTitle(conn *xgb.Conn, x x11Atoms, win xproto.Window) string {
	r, err := xproto.GetProperty(conn, false, win, x.name, x.utf8, 0, 64).Reply()
	if err == nil && r.Format == 8 && len(r.Value) > 0 {
		return string(r.Value)
	}
	r, err = xproto.GetProperty(conn, false, win, xproto.AtomWmName, xproto.AtomString, 0, 64).Reply()
	if err == nil && r.Format == 8 {
		return string(r.Value)
	}
	return ""
}

// fullScreenWhat names a full-screen window for the policy's reason:
// `a full-screen game ("Title")`, the title cut to 40 characters and
// left out when empty or not text.
func fullScreenWhat(title string) string {
	title = strings.TrimSpace(strings.ToValidUTF8(title, ""))
	if title == "" || strings.ContainsAny(title, "\x00\n") {
		return "a full-screen game"
	}
	if utf8.RuneCountInString(title) > 40 {
		title = string([]rune(title)[:39]) + "…"
	}
	return fmt.Sprintf("a full-screen game (%q)", title)
}

// Close closes the kept connection; a query running meanwhile closes its
// own when done.
func (f *fullScreenX11) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	if f.conn != nil {
		f.conn.Close()
		f.conn = nil
	}
	return nil
}
