//go:build linux

package idle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"golang.org/x/sys/unix"
)

// logindIdle is an InputIdleSource over systemd-logind's D-Bus API
// (org.freedesktop.login1(5)): Manager.ListSessions on the system bus, then
// each Session's properties. It sees local console and graphical sessions
// and remote ones (SSH, xrdp) that went through pam_systemd; the remote
// ones, and any session on a pseudo-terminal (pts/N), count only with
// remote set (SourceOptions.RemoteInput):
//
//   - TTY sessions (a console, SSH with a tty): logind sets IdleSinceHint to
//     the atime of the session's tty, which the kernel moves when the user
//     types (at 8-second granularity), so the idle time is exact.
//   - Graphical sessions: IdleHint and IdleSinceHint are what the desktop
//     (GNOME, KDE, ...) published. A desktop that never published a hint
//     (IdleSinceHint 0) tells nothing and is skipped, except a remote one,
//     which counts as in use while connected.
//   - Remote sessions (Remote=yes), with remote set, count whether or not
//     they are Active; local sessions only while Active (the one in front
//     on their seat).
//     Sessions without a tty that are not graphical (ssh host command,
//     cron) and non-user classes (greeter, lock-screen, background) have no
//     person typing and are skipped.
//
// The answer is the smallest idle time among the sessions that count; an
// error when there is no system bus, no logind, or no session that counts.
// It connects anew on every call, so a restarted bus is picked up and no
// connection outlives the call.
type logindIdle struct {
	address string // "" is the system bus; a private bus in tests
	remote  bool   // remote sessions and pseudo-terminals count (SourceOptions.RemoteInput)
}

var _ InputIdleSource = logindIdle{}

// IdleTime implements InputIdleSource.
func (l logindIdle) IdleTime(ctx context.Context) (time.Duration, string, error) {
	var conn *dbus.Conn
	var err error
	if l.address == "" {
		conn, err = dbus.ConnectSystemBus(dbus.WithContext(ctx))
	} else {
		conn, err = dbus.Connect(l.address, dbus.WithContext(ctx))
	}
	if err != nil {
		return 0, "", fmt.Errorf("logind: system bus: %w", err)
	}
	defer conn.Close()

	var list []struct {
		ID   string
		UID  uint32
		User string
		Seat string
		Path dbus.ObjectPath
	}
	mgr := conn.Object("org.freedesktop.login1", "/org/freedesktop/login1")
	if err := mgr.CallWithContext(ctx, "org.freedesktop.login1.Manager.ListSessions", 0).Store(&list); err != nil {
		return 0, "", fmt.Errorf("logind: list sessions: %w", err)
	}
	nowReal := time.Now()
	nowMono, err := monotonicNow()
	if err != nil {
		return 0, "", fmt.Errorf("logind: %w", err)
	}
	best, bestSrc, found := time.Duration(0), "", false
	for _, e := range list {
		var props map[string]dbus.Variant
		obj := conn.Object("org.freedesktop.login1", e.Path)
		if err := obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.GetAll", 0, "org.freedesktop.login1.Session").Store(&props); err != nil {
			if ctx.Err() != nil {
				return 0, "", fmt.Errorf("logind: session %s: %w", e.ID, err)
			}
			continue // closed meanwhile
		}
		s := sessionFromProps(e.ID, props)
		idle, ok := s.idle(nowReal, nowMono, l.remote)
		if ok && (!found || idle < best) {
			best, bestSrc, found = idle, s.describe(), true
		}
	}
	if !found {
		what := "no local session with input"
		if l.remote {
			what = "no session with input"
		}
		return 0, "", fmt.Errorf("logind: %s among %d: %w", what, len(list), ErrNoSource)
	}
	return best, bestSrc, nil
}

// monotonicNow reads CLOCK_MONOTONIC, the clock of logind's
// IdleSinceHintMonotonic.
func monotonicNow() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, fmt.Errorf("clock_gettime: %w", err)
	}
	return time.Duration(ts.Nano()), nil
}

// logindSession is what the idle rules need of an org.freedesktop.login1.Session.
type logindSession struct {
	ID, Type, Class, TTY, Service string
	Active, Remote, IdleHint      bool
	IdleSinceUS, IdleSinceMonoUS  uint64 // IdleSinceHint (CLOCK_REALTIME) and IdleSinceHintMonotonic, µs; 0 when never set
}

func sessionFromProps(id string, p map[string]dbus.Variant) logindSession {
	s := logindSession{ID: id}
	str := func(k string) string { v, _ := p[k].Value().(string); return v }
	boolean := func(k string) bool { v, _ := p[k].Value().(bool); return v }
	u64 := func(k string) uint64 { v, _ := p[k].Value().(uint64); return v }
	s.Type, s.Class, s.TTY, s.Service = str("Type"), str("Class"), str("TTY"), str("Service")
	s.Active, s.Remote, s.IdleHint = boolean("Active"), boolean("Remote"), boolean("IdleHint")
	s.IdleSinceUS, s.IdleSinceMonoUS = u64("IdleSinceHint"), u64("IdleSinceHintMonotonic")
	return s
}

// idle applies the rules in logindIdle's comment: how long the session has
// had no input, and whether it counts at all; remote sessions and those
// on a pseudo-terminal count only when remote is set.
func (s logindSession) idle(nowReal time.Time, nowMono time.Duration, remote bool) (time.Duration, bool) {
	if !strings.HasPrefix(s.Class, "user") || (!s.Remote && !s.Active) {
		return 0, false
	}
	if !remote && (s.Remote || strings.HasPrefix(s.TTY, "pts/")) {
		return 0, false
	}
	since := func() time.Duration {
		var d time.Duration
		if s.IdleSinceMonoUS != 0 {
			d = nowMono - time.Duration(s.IdleSinceMonoUS)*time.Microsecond
		} else {
			d = nowReal.Sub(time.UnixMicro(int64(s.IdleSinceUS)))
		}
		return max(0, d)
	}
	hinted := s.IdleSinceUS != 0 || s.IdleSinceMonoUS != 0
	switch s.Type {
	case "x11", "wayland", "mir":
		switch {
		case s.IdleHint && hinted:
			return since(), true
		case hinted:
			return 0, true // the desktop says it is in use
		case s.Remote:
			return 0, true // a remote desktop that publishes nothing: in use while connected
		}
		return 0, false
	}
	if s.TTY == "" || !hinted {
		return 0, false
	}
	return since(), true // the tty's atime
}

func (s logindSession) describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "logind session %s (%s", s.ID, s.Type)
	if s.TTY != "" {
		fmt.Fprintf(&b, " %s", s.TTY)
	}
	if s.Remote {
		b.WriteString(", remote")
	}
	b.WriteString(")")
	return b.String()
}
