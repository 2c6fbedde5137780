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
// same name runs for the data directory: it was sent the request given
// to ClaimInstance, and this one should exit (status 0).
var ErrRunning = errors.New("app: another instance runs")

// ErrRefused is the error of Ask when the instance answered but did not
// accept the request (a wrong token, an unknown command, or a failure
// carrying it out).
var ErrRefused = errors.New("app: request refused")

// errInUse is listenInstance's error when another instance listened
// first (a race between two launches).
var errInUse = errors.New("app: instance address in use")

// instanceTimeout bounds one exchange between two instances.
const instanceTimeout = 3 * time.Second

// TrayInstance is the name of the tray process's instance: it answers
// "show KIND..." (open those windows) and "reload" (the engine reads the
// store now).
const TrayInstance = "tray"

// Request commands of the instance protocol.
const (
	// CommandShow asks to open the windows named in Args (settings,
	// browse, history, firstrun), or bring them to the front.
	CommandShow = "show"
	// CommandReload asks the engine to read the settings and the joined
	// pools from the store now.
	CommandReload = "reload"
)

// Request is one request of the instance protocol. On the wire it is one
// line, "TOKEN COMMAND ARG...", with "-" as the token where there is none
// (Unix: the socket's mode is the access control), answered by "ok" or
// "refused". Commands and arguments are single words.
type Request struct {
	Command string
	Args    []string
}

// String is the request as words: "show settings".
func (r Request) String() string { return strings.Join(append([]string{r.Command}, r.Args...), " ") }

// valid reports whether r can go on the wire: a command and arguments
// that are single, non-empty words.
func (r Request) valid() bool {
	for _, w := range append([]string{r.Command}, r.Args...) {
		if w == "" || strings.ContainsFunc(w, func(c rune) bool { return c <= ' ' }) {
			return false
		}
	}
	return true
}

// Instance is this process's claim to be the only one of its name (such
// as TrayInstance) for a data directory: it listens on a Unix socket
// <dir>/NAME.sock (mode 0600) or, on Windows, on a loopback port written
// with a random token to <dir>/NAME.addr (mode 0600), and later launches
// send it requests instead of starting a second engine.
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

// ClaimInstance makes this process the instance called name for the data
// directory dir, which must exist. When another instance answers there it
// sends it req and returns ErrRunning (wrapped, with the reason, when that
// instance did not accept it). A socket or address file that nobody
// answers on (left by a crashed instance) is replaced. On systems with
// neither Unix sockets nor Windows it returns errors.ErrUnsupported.
func ClaimInstance(dir, name string, req Request) (*Instance, error) {
	for range 3 {
		if c, token, err := dialInstance(dir, name); err == nil {
			if err := ask(c, token, req); err != nil {
				return nil, fmt.Errorf("%w (it did not answer %q: %v)", ErrRunning, req, err)
			}
			return nil, ErrRunning
		}
		ln, token, cleanup, err := listenInstance(dir, name)
		if errors.Is(err, errInUse) {
			continue // another launch listened first: ask it
		}
		if err != nil {
			return nil, fmt.Errorf("claim the app instance %s in %s: %w", name, dir, err)
		}
		return &Instance{ln: ln, token: token, cleanup: cleanup}, nil
	}
	return nil, fmt.Errorf("claim the app instance %s in %s: %w", name, dir, errInUse)
}

// Ask sends req to the instance called name for the data directory dir
// and waits for its answer. It fails with ErrRefused when the instance
// did not accept the request, and with another error when none answers.
func Ask(dir, name string, req Request) error {
	c, token, err := dialInstance(dir, name)
	if err != nil {
		return fmt.Errorf("reach the app instance %s in %s: %w", name, dir, err)
	}
	if err := ask(c, token, req); err != nil {
		return fmt.Errorf("ask the app instance %s in %s to %s: %w", name, dir, req, err)
	}
	return nil
}

// ask sends req on c and waits for the answer; it closes c.
func ask(c net.Conn, token string, req Request) error {
	defer c.Close()
	if !req.valid() {
		return fmt.Errorf("%w: malformed request %q", ErrRefused, req)
	}
	if token == "" {
		token = "-"
	}
	_ = c.SetDeadline(time.Now().Add(instanceTimeout))
	if _, err := fmt.Fprintf(c, "%s %s\n", token, req); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	switch answer := strings.TrimSpace(line); answer {
	case "ok":
		return nil
	case "refused":
		return ErrRefused
	default:
		return fmt.Errorf("unexpected answer %q", answer)
	}
}

// Serve answers other processes until ctx ends or Close is called,
// calling handle (on Serve's goroutine: wrap Fyne calls in fyne.Do) for
// each request bearing the right token; the answer is "ok" when handle
// returns nil. It closes the listener and removes the socket or address
// file when ctx ends, and returns nil then.
func (i *Instance) Serve(ctx context.Context, handle func(Request) error) error {
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
		i.answer(c, handle)
	}
}

// answer reads one request from c, has handle carry it out and answers.
func (i *Instance) answer(c net.Conn, handle func(Request) error) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(instanceTimeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return
	}
	f := strings.Fields(line)
	want := i.token
	if want == "" {
		want = "-"
	}
	if len(f) < 2 || f[0] != want {
		_, _ = fmt.Fprintln(c, "refused")
		return
	}
	req := Request{Command: f[1]}
	if len(f) > 2 {
		req.Args = f[2:]
	}
	if handle(req) != nil {
		_, _ = fmt.Fprintln(c, "refused")
		return
	}
	_, _ = fmt.Fprintln(c, "ok")
}

// Close stops listening and removes the socket or address file. Safe to
// call more than once and concurrently with Serve.
func (i *Instance) Close() error {
	i.once.Do(i.cleanup)
	return nil
}
