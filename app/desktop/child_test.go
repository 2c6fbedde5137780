//go:build unix

package desktop

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitFile waits until the file at path holds want.
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if string(b) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q, want %q", filepath.Base(path), b, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeWindows is a windowProcess whose child is a shell that writes its
// arguments and then its input to out; with exit it ends at once instead
// of reading its input, as a window process whose last window closed.
func fakeWindows(t *testing.T, out string, exit bool) (*windowProcess, <-chan struct{}) {
	t.Helper()
	script := `printf 'start %s\n' "$*" >> "$0"; cat >> "$0"`
	if exit {
		script = `printf 'start %s\n' "$*" >> "$0"`
	}
	exited := make(chan struct{}, 10)
	w := &windowProcess{command: []string{"/bin/sh", "-c", script, out}, flags: []string{"--home", "/h"},
		stderr: io.Discard, log: slog.New(slog.DiscardHandler), exited: func() { exited <- struct{}{} }}
	t.Cleanup(w.Stop)
	return w, exited
}

// TestWindowProcess: the first Show starts the child with the windows
// and the flags, the next ones write "show" lines to its input; Stop ends
// it, and Show fails afterwards.
func TestWindowProcess(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	w, exited := fakeWindows(t, out, false)
	if err := w.Show("settings", "firstrun"); err != nil {
		t.Fatal(err)
	}
	if err := w.Show("browse", "history"); err != nil {
		t.Fatal(err)
	}
	if err := w.Show("tray"); err == nil {
		t.Error("Show of an unknown window succeeded")
	}
	waitFile(t, out, "start settings firstrun --home /h --from-tray\nshow browse history\n")
	w.Stop()
	select {
	case <-exited:
	default:
		t.Error("Stop returned before the child exited")
	}
	if err := w.Show("settings"); !errors.Is(err, errStopped) {
		t.Errorf("Show after Stop = %v, want errStopped", err)
	}
	w.Stop() // twice is fine
}

// TestWindowProcessAgain: a child that exited (its last window closed) is
// started anew by the next Show.
func TestWindowProcessAgain(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	w, exited := fakeWindows(t, out, true)
	for _, kind := range []string{"settings", "history"} {
		if err := w.Show(kind); err != nil {
			t.Fatal(err)
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Fatal("the child did not exit")
		}
	}
	waitFile(t, out, "start settings --home /h --from-tray\nstart history --home /h --from-tray\n")
	if n := strings.Count(readFile(t, out), "start"); n != 2 {
		t.Errorf("%d children started, want 2", n)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
