//go:build linux

package idle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// devInputIdle is the fallback InputIdleSource: the most recent activity
// time of input devices and terminals, from their device nodes' times
// (stat(2), no read access needed). What it catches:
//
//   - /dev/pts/N: the kernel sets a pseudo-terminal's atime when a program
//     reads typed input from it (tty_update_time, 8-second granularity):
//     typing in an SSH shell, a terminal emulator, tmux or screen. This is
//     what w(1) shows as IDLE. Output (mtime) is not input and is ignored.
//   - /dev/input/event*: keyboards, mice, touchpads. The evdev driver does
//     not promise to move these times, so a node counts only once its atime
//     or mtime has moved past its ctime (creation); nodes that never moved
//     tell nothing.
//
// It answers where logind and X11 do not (a console without logind, a
// container that sees the host's /dev); it errors when no node tells
// anything.
type devInputIdle struct {
	root string // "/dev"; a temporary directory in tests
}

var _ InputIdleSource = devInputIdle{}

// IdleTime implements InputIdleSource.
func (d devInputIdle) IdleTime(ctx context.Context) (time.Duration, string, error) {
	var newest time.Time
	var newestSrc string
	consider := func(pattern string, usable func(st *syscall.Stat_t) (time.Time, bool)) {
		paths, _ := filepath.Glob(filepath.Join(d.root, pattern))
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				continue
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok {
				continue
			}
			if t, ok := usable(st); ok && t.After(newest) {
				newest, newestSrc = t, p
			}
		}
	}
	consider("pts/[0-9]*", func(st *syscall.Stat_t) (time.Time, bool) {
		return time.Unix(st.Atim.Unix()), true
	})
	consider("input/event*", func(st *syscall.Stat_t) (time.Time, bool) {
		c := time.Unix(st.Ctim.Unix())
		t := time.Unix(st.Atim.Unix())
		if m := time.Unix(st.Mtim.Unix()); m.After(t) {
			t = m
		}
		return t, t.After(c)
	})
	if err := ctx.Err(); err != nil {
		return 0, "", fmt.Errorf("input devices: %w", err)
	}
	if newest.IsZero() {
		return 0, "", fmt.Errorf("input devices: no terminal or input device shows activity under %s: %w", d.root, ErrNoSource)
	}
	return max(0, time.Since(newest)), newestSrc, nil
}
