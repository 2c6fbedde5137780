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
//   - /dev/tty1, /dev/tty2, ... (the local virtual consoles): the kernel
//     sets a terminal's atime when a program reads typed input from it
//     (tty_update_time, 8-second granularity). A console counts once its
//     atime has moved past its ctime (creation, or logind handing it to a
//     user): one that never did tells nothing.
//   - /dev/pts/N, only with remote set (SourceOptions.RemoteInput): the
//     same for pseudo-terminals, typing in an SSH shell, tmux or screen,
//     what w(1) shows as IDLE. Off by default: a pseudo-terminal is how a
//     remote login types, and input there is not the person at the
//     machine (a terminal emulator on the local desktop is seen by the
//     desktop's idle time). Output (mtime) is not input and is ignored.
//   - /dev/input/event*: keyboards, mice, touchpads. The evdev driver does
//     not promise to move these times, so a node counts only once its atime
//     or mtime has moved past its ctime (creation); nodes that never moved
//     tell nothing.
//
// It answers where logind and X11 do not (a console without logind, a
// container that sees the host's /dev); it errors when no node tells
// anything.
type devInputIdle struct {
	root   string // "/dev"; a temporary directory in tests
	remote bool   // pseudo-terminals count (SourceOptions.RemoteInput)
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
	if d.remote {
		consider("pts/[0-9]*", func(st *syscall.Stat_t) (time.Time, bool) {
			return time.Unix(st.Atim.Unix()), true
		})
	}
	consider("tty[0-9]*", func(st *syscall.Stat_t) (time.Time, bool) {
		t := time.Unix(st.Atim.Unix())
		return t, t.After(time.Unix(st.Ctim.Unix()))
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
		what := "no console or input device"
		if d.remote {
			what = "no terminal or input device"
		}
		return 0, "", fmt.Errorf("input devices: %s shows activity under %s: %w", what, d.root, ErrNoSource)
	}
	return max(0, time.Since(newest)), newestSrc, nil
}
