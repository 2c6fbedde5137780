package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// ErrRunning is returned by ClaimInstance when another instance of the
// app runs for the same data directory: it was asked to show its
// settings window, and this one should exit (status 0).
var ErrRunning = errors.New("app: another instance runs")

// errInUse is listenInstance's error when another instance listened
// first (a race between two launches).
var errInUse = errors.New("app: instance address in use")

// instanceTimeout bounds one exchange between two instances.
const instanceTimeout = 3 * time.Second

// Instance is this process's claim to be the only tray app of a data
// directory: it listens on a Unix socket <dir>/tray.sock (mode 0600) or,
// on Windows, on a loopback port written with a random token to
// <dir>/tray.addr (mode 0600), and a later launch asks it to show its
// settings window ("focus") instead of starting a second engine.
//
// Two launches at the very same moment may, with a socket left by a
// crashed instance (Unix) or on Windows, both win; the store's locking
// keeps them from corrupting anything.
type Instance struct {
	ln      net.Listener
	token   string // "" on Unix: the socket's mode is the access control
	cleanup func()

	once sync.Once
}

// ClaimInstance makes this process the app's instance for the data
// directory dir, which must exist. When another instance answers there it
// asks it to focus and returns ErrRunning (wrapped, with the reason, when
// that instance accepted but did not answer). A socket or address file
// that nobody answers on (left by a crashed instance) is replaced. On
// systems with neither Unix sockets nor Windows it returns
// errors.ErrUnsupported.
func ClaimInstance(dir string) (*Instance, error) {
	for range 3 {
		if c, token, err := dialInstance(dir); err == nil {
			if err := askFocus(c, token); err != nil {
				return nil, fmt.Errorf("%w (it did not answer: %v)", ErrRunning, err)
			}
			return nil, ErrRunning
		}
		ln, token, cleanup, err := listenInstance(dir)
		if errors.Is(err, errInUse) {
			continue // another launch listened first: ask it
		}
		if err != nil {
			return nil, fmt.Errorf("claim the app instance in %s: %w", dir, err)
		}
		return &Instance{ln: ln, token: token, cleanup: cleanup}, nil
	}
	return nil, fmt.Errorf("claim the app instance in %s: %w", dir, errInUse)
}

// askFocus sends the focus request on c and waits for the answer.
func askFocus(c net.Conn, token string) error {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(instanceTimeout))
	if _, err := fmt.Fprintf(c, "focus %s\n", token); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "ok" {
		return fmt.Errorf("unexpected answer %q", strings.TrimSpace(line))
	}
	return nil
}

// Serve answers later launches until ctx ends or Close is called,
// calling focus (on Serve's goroutine: wrap Fyne calls in fyne.Do) for
// each request bearing the right token. It closes the listener and
// removes the socket or address file when ctx ends, and returns nil then.
func (i *Instance) Serve(ctx context.Context, focus func()) error {
	stop := context.AfterFunc(ctx, func() { i.Close() })
	defer stop()
	for {
		c, err := i.ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("app instance: %w", err)
		}
		if i.answer(c) {
			focus()
		}
	}
}

// answer reads one request from c and answers it; it reports whether it
// was a valid focus request.
func (i *Instance) answer(c net.Conn) bool {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(instanceTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return false
	}
	cmd, token, _ := strings.Cut(strings.TrimSpace(line), " ")
	if cmd != "focus" || token != i.token {
		_, _ = fmt.Fprintln(c, "refused")
		return false
	}
	_, _ = fmt.Fprintln(c, "ok")
	return true
}

// Close stops listening and removes the socket or address file. Safe to
// call more than once and concurrently with Serve.
func (i *Instance) Close() error {
	i.once.Do(i.cleanup)
	return nil
}
