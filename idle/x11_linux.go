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
// xgb's calls take no context and wait for the server as long as it
// takes, so each query (connecting included) runs in a goroutine of its
// own and IdleTime returns when its context ends. A query that has not
// answered by then is given up, not waited for: its goroutine closes its
// connection whenever the server answers or goes away. After a query
// given up the source answers at once with an error wrapping
// ErrProbeTimeout, and tries the server again, on a new connection, after
// x11FirstBackoff, doubling after each further hang up to x11MaxBackoff;
// an answer resets the backoff. At most x11MaxHung queries given up may
// be waiting at once: beyond that it tries no more until one of them
// returns (a server that hangs every connection would otherwise pile them
// up).
//
// xgb logs to its package-level Logger on every connection (a missing
// ~/.Xauthority, the EOF of a closed connection); the first call discards
// that log, since every failure that matters is returned as an error.
type x11Idle struct {
	display string           // "" reads $DISPLAY on each call
	now     func() time.Time // nil: time.Now; a fake clock in tests

	turn chan struct{} // one query at a time; made on first use

	mu        sync.Mutex
	conn      *xgb.Conn // nil until connected, and while a query holds it
	connFor   string    // the display conn is to
	root      xproto.Window
	gen       int       // counts Close calls: a query of an older one closes its connection
	hung      int       // queries given up that have not returned
	hungSince time.Time // when the first query of the current run of hangs was given up
	backoff   time.Duration
	retryAt   time.Time // no query before this, after a hang
}

// The backoff of x11Idle after a query that did not answer in time.
const (
	x11FirstBackoff = 5 * time.Second
	x11MaxBackoff   = 5 * time.Minute
	x11MaxHung      = 3
)

var (
	_ InputIdleSource = (*x11Idle)(nil)
	_ io.Closer       = (*x11Idle)(nil)
)

var quietXGB sync.Once

// x11Answer is what one query's goroutine found.
type x11Answer struct {
	idle time.Duration
	conn *xgb.Conn // open on success, for the next query; nil otherwise
	root xproto.Window
	err  error
}

func (x *x11Idle) clock() time.Time {
	if x.now != nil {
		return x.now()
	}
	return time.Now()
}

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
	if x.turn == nil {
		x.turn = make(chan struct{}, 1)
	}
	turn := x.turn
	x.mu.Unlock()
	select {
	case turn <- struct{}{}:
		defer func() { <-turn }()
	case <-ctx.Done():
		return 0, "", fmt.Errorf("x11: %s: another query still runs: %w", display, ErrProbeTimeout)
	}

	x.mu.Lock()
	now := x.clock()
	switch {
	case x.hung >= x11MaxHung:
		err := fmt.Errorf("x11: %s: %d queries unanswered since %s; trying again once one returns: %w",
			display, x.hung, x.hungSince.Format("15:04:05"), ErrProbeTimeout)
		x.mu.Unlock()
		return 0, "", err
	case now.Before(x.retryAt):
		err := fmt.Errorf("x11: %s did not answer (since %s); trying again in %v: %w",
			display, x.hungSince.Format("15:04:05"), x.retryAt.Sub(now).Round(time.Second), ErrProbeTimeout)
		x.mu.Unlock()
		return 0, "", err
	}
	conn, root := x.conn, x.root
	if conn != nil && x.connFor != display {
		conn.Close()
		conn = nil
	}
	x.conn = nil
	gen := x.gen
	x.mu.Unlock()

	answer := make(chan x11Answer, 1)
	go func() { answer <- x11Query(conn, root, display) }()
	select {
	case a := <-answer:
		x.mu.Lock()
		defer x.mu.Unlock()
		if a.err != nil {
			return 0, "", a.err
		}
		if gen == x.gen && x.conn == nil {
			x.conn, x.connFor, x.root = a.conn, display, a.root
		} else {
			a.conn.Close()
		}
		x.backoff, x.retryAt = 0, time.Time{}
		return a.idle, "x11-screensaver", nil
	case <-ctx.Done():
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.hung == 0 {
		x.hungSince = now
	}
	x.hung++
	x.backoff = min(max(2*x.backoff, x11FirstBackoff), x11MaxBackoff)
	x.retryAt = now.Add(x.backoff)
	go func() {
		if a := <-answer; a.conn != nil {
			a.conn.Close()
		}
		x.mu.Lock()
		x.hung--
		x.mu.Unlock()
	}()
	return 0, "", fmt.Errorf("x11: %s did not answer in time; trying again in %v: %w", display, x.backoff, ErrProbeTimeout)
}

// x11Query asks the server at display for its idle time on conn (root is
// its default screen's root), or on a new connection when conn is nil or
// fails. It may wait for the server as long as the server takes.
func x11Query(conn *xgb.Conn, root xproto.Window, display string) x11Answer {
	for try := 0; ; try++ {
		if conn == nil {
			var err error
			if conn, root, err = x11Connect(display); err != nil {
				return x11Answer{err: err}
			}
			try = 1 // a fresh connection is not tried twice
		}
		info, err := screensaver.QueryInfo(conn, xproto.Drawable(root)).Reply()
		if err == nil {
			return x11Answer{idle: time.Duration(info.MsSinceUserInput) * time.Millisecond, conn: conn, root: root}
		}
		conn.Close()
		conn = nil
		if try >= 1 {
			return x11Answer{err: fmt.Errorf("x11: %s: query screen saver: %w", display, err)}
		}
	}
}

// x11Connect opens a connection to display with MIT-SCREEN-SAVER.
func x11Connect(display string) (*xgb.Conn, xproto.Window, error) {
	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		return nil, 0, fmt.Errorf("x11: connect %s: %w", display, err)
	}
	if err := screensaver.Init(conn); err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("x11: %s: no MIT-SCREEN-SAVER: %w", display, err)
	}
	return conn, xproto.Setup(conn).DefaultScreen(conn).Root, nil
}

// Close closes the kept connection, if any; a later IdleTime connects
// again. A query running meanwhile closes its own connection when done.
func (x *x11Idle) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.gen++
	if x.conn != nil {
		x.conn.Close()
		x.conn = nil
	}
	return nil
}
