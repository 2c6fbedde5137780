package desktop

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// childStopWait bounds how long stopping the window process waits for it
// to exit after SIGTERM before killing it.
const childStopWait = 5 * time.Second

// errStopped is windowProcess.Show's error once Stop was called.
var errStopped = errors.New("desktop: the window process was stopped")

// windowProcess is the tray process's one child window process: Show
// starts it (command, then the kinds, then flags) or, while it runs,
// writes "show KIND..." on its stdin. Its methods are safe for concurrent
// use. Stop ends it and waits for it.
type windowProcess struct {
	command []string  // the window program (idlepool-window) and its arguments before the kinds
	flags   []string  // --home DIR, -v
	stderr  io.Writer // the child's stdout and stderr
	log     *slog.Logger
	// exited, if set, is called on its own goroutine after each child
	// exited (the tray without a system tray quits then).
	exited func()

	mu      sync.Mutex
	stopped bool
	stdin   io.WriteCloser // of the child running; nil when none
	done    chan struct{}  // closed when that child exited
	proc    *exec.Cmd
	wg      sync.WaitGroup // the goroutines waiting for children
}

// Show asks the window process to show the windows of kinds, starting it
// when none runs (with --from-tray, so that it quits when its input ends
// with this process).
func (w *windowProcess) Show(kinds ...string) error {
	if err := checkKinds(kinds); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if w.stopped {
			return errStopped
		}
		if w.stdin == nil {
			return w.start(kinds)
		}
		done := w.done
		select {
		case <-done:
			return w.start(kinds)
		default:
		}
		if _, err := fmt.Fprintf(w.stdin, "show %s\n", strings.Join(kinds, " ")); err == nil {
			return nil
		}
		// Its input is closed: it is exiting (its last window closed).
		// Start another one once it has.
		w.mu.Unlock()
		select {
		case <-done:
		case <-time.After(childStopWait):
		}
		w.mu.Lock()
		if w.done == done {
			select {
			case <-done:
			default:
				return errors.New("desktop: the window process neither reads its input nor exits")
			}
		}
	}
}

// start starts a child showing kinds. w.mu is held.
func (w *windowProcess) start(kinds []string) error {
	args := slices.Concat(w.command[1:], kinds, w.flags, []string{"--" + fromTrayFlag})
	cmd := exec.Command(w.command[0], args...)
	cmd.Stdout, cmd.Stderr = w.stderr, w.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("start the window process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		stdin.Close()
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("start the window process: %s is missing (reinstall idlepool; from the sources, make tray builds it): %w", w.command[0], err)
		}
		return fmt.Errorf("start the window process: %w", err)
	}
	w.log.Debug("Started the window process", "pid", cmd.Process.Pid, "windows", kinds)
	done := make(chan struct{})
	w.proc, w.stdin, w.done = cmd, stdin, done
	w.wg.Go(func() {
		err := cmd.Wait()
		close(done)
		w.log.Debug("The window process exited", "pid", cmd.Process.Pid, "err", err)
		if w.exited != nil {
			w.exited()
		}
	})
	return nil
}

// Stop ends the window process, if one runs: it closes its input, sends
// SIGTERM (where there are signals), and kills it when it has not exited
// within childStopWait; then it waits for it. Show fails afterwards.
func (w *windowProcess) Stop() {
	w.mu.Lock()
	w.stopped = true
	cmd, stdin, done := w.proc, w.stdin, w.done
	w.mu.Unlock()
	if cmd != nil {
		stdin.Close()
		select {
		case <-done:
		default:
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				_ = cmd.Process.Kill()
			}
			select {
			case <-done:
			case <-time.After(childStopWait):
				w.log.Warn("The window process did not exit after SIGTERM: killing it")
				_ = cmd.Process.Kill()
			}
		}
	}
	w.wg.Wait()
}
