//go:build linux

package idle

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

// startBus runs a private dbus-daemon and returns its address; it skips
// the test when dbus-daemon is not installed (Debian package dbus-daemon).
func startBus(t *testing.T) string {
	t.Helper()
	addr, _ := startBusAt(t, filepath.Join(t.TempDir(), "bus"))
	return addr
}

// startBusAt runs a private dbus-daemon listening on the unix socket sock
// and returns its address and a stop func that ends the daemon and
// removes the socket, so that another can start at the same address. The
// daemon also ends at cleanup. It skips the test when dbus-daemon is not
// installed (Debian package dbus-daemon).
func startBusAt(t *testing.T, sock string) (addr string, stop func()) {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		t.Skip("dbus-daemon not installed (apt-get install dbus-daemon): D-Bus sources not tested")
	}
	// The session configuration lets anyone own any name, as the fake
	// services must; only the address is ours.
	cmd := exec.Command(bin, "--session", "--address=unix:path="+sock, "--nofork", "--print-address=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			_ = os.Remove(sock)
		})
	}
	t.Cleanup(stop)
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		got <- strings.TrimSpace(line)
	}()
	select {
	case addr := <-got:
		if addr == "" {
			t.Fatal("dbus-daemon printed no address")
		}
		return addr, stop
	case <-time.After(20 * time.Second):
		stop()
		t.Fatal("dbus-daemon did not start in 20s")
	}
	return "", stop
}

// fakeLogind serves org.freedesktop.login1's Manager.ListSessions and
// each session's properties, as systemd-logind does.
type fakeLogind struct {
	sessions []fakeSession
}

type fakeSession struct {
	id    string
	props map[string]any
}

type sessionEntry struct {
	ID   string
	UID  uint32
	User string
	Seat string
	Path dbus.ObjectPath
}

func (f *fakeLogind) ListSessions() ([]sessionEntry, *dbus.Error) {
	var out []sessionEntry
	for _, s := range f.sessions {
		out = append(out, sessionEntry{ID: s.id, UID: 1000, User: "owner", Path: sessionPath(s.id)})
	}
	return out, nil
}

func sessionPath(id string) dbus.ObjectPath {
	return dbus.ObjectPath("/org/freedesktop/login1/session/_3" + id)
}

func serveLogind(t *testing.T, addr string, f *fakeLogind) {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Export(f, "/org/freedesktop/login1", "org.freedesktop.login1.Manager"); err != nil {
		t.Fatal(err)
	}
	for _, s := range f.sessions {
		m := map[string]*prop.Prop{}
		for k, v := range s.props {
			m[k] = &prop.Prop{Value: v, Emit: prop.EmitFalse}
		}
		if _, err := prop.Export(conn, sessionPath(s.id), prop.Map{"org.freedesktop.login1.Session": m}); err != nil {
			t.Fatal(err)
		}
	}
	reply, err := conn.RequestName("org.freedesktop.login1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("request name: %v, %v", reply, err)
	}
}

// TestLogindOverDBus asks a fake logind on a private bus: an SSH session
// typed into two minutes ago counts only with remote input on, the local
// console typed into ten minutes ago either way, a background desktop and
// a greeter never.
func TestLogindOverDBus(t *testing.T) {
	addr := startBus(t)
	mono, err := monotonicNow()
	if err != nil {
		t.Fatal(err)
	}
	sess := func(typ, class, tty string, active, remote, idleHint bool, since time.Duration) map[string]any {
		return map[string]any{
			"Type": typ, "Class": class, "TTY": tty, "Service": "test", "State": "active",
			"Active": active, "Remote": remote, "IdleHint": idleHint,
			"IdleSinceHint":          uint64(time.Now().Add(-since).UnixMicro()),
			"IdleSinceHintMonotonic": uint64((mono - since) / time.Microsecond),
		}
	}
	serveLogind(t, addr, &fakeLogind{sessions: []fakeSession{
		{id: "1", props: sess("wayland", "user", "", false, false, false, time.Second)}, // switched away
		{id: "2", props: sess("x11", "greeter", "", true, false, false, 0)},
		{id: "3", props: sess("tty", "user", "pts/0", true, true, false, 2*time.Minute)},
		{id: "4", props: sess("tty", "user", "pts/1", true, true, true, 3*time.Hour)},
		{id: "5", props: sess("tty", "user", "tty2", true, false, false, 10*time.Minute)},
	}})

	for _, tc := range []struct {
		remote  bool
		want    time.Duration
		wantSrc string
	}{
		{false, 10 * time.Minute, "logind session 5 (tty tty2)"},
		{true, 2 * time.Minute, "logind session 3 (tty pts/0, remote)"},
	} {
		got, src, err := logindIdle{address: addr, remote: tc.remote}.IdleTime(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if d := got - tc.want; d < 0 || d > 5*time.Second {
			t.Errorf("remote input %v: idle = %v, want about %v", tc.remote, got, tc.want)
		}
		if src != tc.wantSrc {
			t.Errorf("remote input %v: source = %q, want %q", tc.remote, src, tc.wantSrc)
		}
	}
}

func TestLogindNoService(t *testing.T) {
	addr := startBus(t)
	if _, _, err := (logindIdle{address: addr}).IdleTime(t.Context()); err == nil {
		t.Error("no error on a bus without logind")
	}
	if _, _, err := (logindIdle{address: "unix:path=" + filepath.Join(t.TempDir(), "none")}).IdleTime(t.Context()); err == nil {
		t.Error("no error without a bus")
	}
}
