//go:build linux

package idle

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

// startXvfb starts Xvfb on a display it picks itself (-displayfd) and
// returns that display; Xvfb is stopped at cleanup. -noreset keeps the
// server up between connections: without it, it resets when its last
// client leaves and refuses the next one meanwhile. It skips the test
// when Xvfb is not installed (Debian package xvfb).
func startXvfb(t *testing.T) string {
	t.Helper()
	display, _ := startXvfbProc(t)
	return display
}

// startXvfbProc is startXvfb that also returns the server's process.
func startXvfbProc(t *testing.T) (string, *os.Process) {
	t.Helper()
	bin, err := exec.LookPath("Xvfb")
	if err != nil {
		t.Skip("Xvfb not installed (apt-get install xvfb): X11 idle time not tested")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(bin, "-displayfd", "3", "-nolisten", "tcp", "-noreset", "-screen", "0", "320x240x24")
	cmd.ExtraFiles = []*os.File{w}
	if err := cmd.Start(); err != nil {
		w.Close()
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		got <- strings.TrimSpace(line)
	}()
	select {
	case n := <-got:
		if n == "" {
			t.Fatal("Xvfb exited without a display")
		}
		return ":" + n, cmd.Process
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill() // unblocks the reader
		t.Fatal("Xvfb did not start in 20s")
	}
	return "", nil
}

// TestX11IdleXvfb reads the idle time of a real X server, sends it a fake
// pointer motion through XTEST and checks that the idle time dropped.
func TestX11IdleXvfb(t *testing.T) {
	display := startXvfb(t)
	src := &x11Idle{display: display}
	defer src.Close()

	time.Sleep(600 * time.Millisecond) // let the X server's idle time grow
	before, name, err := src.IdleTime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if name != "x11-screensaver" || before < 500*time.Millisecond {
		t.Fatalf("idle = %v from %q, want at least 500ms from x11-screensaver", before, name)
	}

	conn, err := xgb.NewConnDisplay(display)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := xtest.Init(conn); err != nil {
		t.Fatalf("XTEST: %v", err)
	}
	root := xproto.Setup(conn).DefaultScreen(conn).Root
	if err := xtest.FakeInputChecked(conn, xproto.MotionNotify, 0, 0, root, 100, 100, 0).Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := xproto.GetInputFocus(conn).Reply(); err != nil { // a round trip: the motion is processed
		t.Fatal(err)
	}

	after, _, err := src.IdleTime(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if after >= before || after > 400*time.Millisecond {
		t.Errorf("idle after fake input = %v (before %v), want it to drop near 0", after, before)
	}

	t.Setenv("WAYLAND_DISPLAY", "wayland-0")
	t.Setenv("DISPLAY", display)
	if _, _, err := (&x11Idle{}).IdleTime(t.Context()); err == nil {
		t.Error("no error under Wayland: Xwayland's idle time misses native input")
	}
}

func TestX11IdleNoDisplay(t *testing.T) {
	t.Setenv("WAYLAND_DISPLAY", "")
	t.Setenv("DISPLAY", "")
	if _, _, err := (&x11Idle{}).IdleTime(t.Context()); err == nil {
		t.Error("no error without DISPLAY")
	}
	if _, _, err := (&x11Idle{display: ":9876"}).IdleTime(t.Context()); err == nil {
		t.Error("no error for a display with no server")
	}
}

// TestX11IdleReconnects: the source keeps its connection between calls,
// and when that connection breaks (an X server restarted) the next call
// connects again instead of failing.
func TestX11IdleReconnects(t *testing.T) {
	display := startXvfb(t)
	src := &x11Idle{display: display}
	defer src.Close()
	if _, _, err := src.IdleTime(t.Context()); err != nil {
		t.Fatal(err)
	}
	first := src.conn
	if _, _, err := src.IdleTime(t.Context()); err != nil || src.conn != first {
		t.Fatalf("second call: err %v, same connection %v; want one kept connection", err, src.conn == first)
	}
	first.Close() // as when the server goes away
	if _, _, err := src.IdleTime(t.Context()); err != nil {
		t.Fatalf("after the connection broke: %v", err)
	}
	if src.conn == first {
		t.Error("the broken connection is still used")
	}
}

// TestX11IdleHungServer: a query to an X server that stopped answering (a
// hung server; here Xvfb under SIGSTOP) is given up when the context ends,
// the source then backs off instead of queueing more queries, and once the
// backoff has passed it tries again and answers from the server that came
// back.
func TestX11IdleHungServer(t *testing.T) {
	display, proc := startXvfbProc(t)
	var clock atomic.Int64 // nanoseconds added to a fixed start
	start := time.Date(2026, 3, 10, 23, 0, 0, 0, time.UTC)
	src := &x11Idle{display: display, now: func() time.Time { return start.Add(time.Duration(clock.Load())) }}
	defer src.Close()
	if _, _, err := src.IdleTime(t.Context()); err != nil {
		t.Fatal(err)
	}

	// call runs IdleTime under a context of d; a source that ignores it
	// fails the test after a minute instead of hanging it.
	call := func(d time.Duration) (time.Duration, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), d)
		defer cancel()
		type result struct {
			idle time.Duration
			err  error
		}
		got := make(chan result, 1)
		go func() {
			idle, _, err := src.IdleTime(ctx)
			got <- result{idle, err}
		}()
		select {
		case r := <-got:
			return r.idle, r.err
		case <-time.After(time.Minute):
			t.Fatalf("IdleTime still waits a minute after its context of %v ended", d)
			return 0, nil
		}
	}

	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer proc.Signal(syscall.SIGCONT)
	if _, err := call(300 * time.Millisecond); !errors.Is(err, ErrProbeTimeout) {
		t.Fatalf("IdleTime of a hung server = %v, want ErrProbeTimeout", err)
	}
	if _, err := call(time.Hour); !errors.Is(err, ErrProbeTimeout) || !strings.Contains(err.Error(), "trying again in 5s") {
		t.Fatalf("IdleTime during the backoff = %v, want ErrProbeTimeout at once, trying again in 5s", err)
	}

	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	clock.Add(int64(x11FirstBackoff))
	if _, err := call(20 * time.Second); err != nil {
		t.Fatalf("IdleTime after the server came back and the backoff passed: %v", err)
	}
	src.mu.Lock()
	backoff := src.backoff
	src.mu.Unlock()
	if backoff != 0 {
		t.Errorf("backoff after an answer = %v, want 0", backoff)
	}
}
