//go:build linux

package idle

import (
	"context"
	"errors"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

// gameModeServer is a stand-in gamemoded on a private bus: its own
// connection owns com.feralinteractive.GameMode and answers
// org.freedesktop.DBus.Properties.Get for the ClientCount property of
// com.feralinteractive.GameMode at /com/feralinteractive/GameMode, the one
// read the probe makes. It records the unique bus name of every caller,
// so a test sees whether the probe connected more than once.
type gameModeServer struct {
	conn    *dbus.Conn
	clients int32

	mu      sync.Mutex
	callers map[string]int // unique bus name: calls
}

// Get is org.freedesktop.DBus.Properties.Get.
func (s *gameModeServer) Get(sender dbus.Sender, iface, name string) (dbus.Variant, *dbus.Error) {
	s.mu.Lock()
	s.callers[string(sender)]++
	s.mu.Unlock()
	if iface != gameModeInterface || name != "ClientCount" {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty",
			[]any{"no property " + iface + "." + name})
	}
	return dbus.MakeVariant(s.clients), nil
}

// serveGameMode connects to the bus at addr and serves clients there as
// GameMode until stop or cleanup.
func serveGameMode(t *testing.T, addr string, clients int32) *gameModeServer {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &gameModeServer{conn: conn, clients: clients, callers: map[string]int{}}
	if err := conn.Export(s, gameModePath, "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(gameModeService, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("request name %s: %v, %v", gameModeService, reply, err)
	}
	return s
}

// stop ends the service's connection, which releases its name.
func (s *gameModeServer) stop() { s.conn.Close() }

// seen returns the callers' unique names and how many calls came in all.
func (s *gameModeServer) seen() ([]string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.callers {
		n += c
	}
	return slices.Sorted(maps.Keys(s.callers)), n
}

// readGameMode asks src once with a context of its own that ends when the
// call returns, as the Sampler does for every probe.
func readGameMode(t *testing.T, src GameSource) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	return src.Game(ctx)
}

// waitGameMode asks src until its answer passes ok, for at most 2 minutes,
// and returns the last answer.
func waitGameMode(t *testing.T, src GameSource, what string, ok func(string, error) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got, err := readGameMode(t, src)
		if ok(got, err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %q, %v after 2 minutes", what, got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGameModeKeepsConnection: the probe reads ClientCount over one
// connection for as long as it lives, however many calls it serves and
// whatever their contexts, and finds gamemoded again by its name when
// gamemoded restarts (a new connection owning the name, another count).
func TestGameModeKeepsConnection(t *testing.T) {
	addr := startBus(t)
	first := serveGameMode(t, addr, 2)
	src := &gameModeDBus{address: addr}
	defer src.Close()

	const reads = 50
	for i := range reads {
		got, err := readGameMode(t, src)
		if err != nil || got != "2 games using GameMode" {
			t.Fatalf("read %d of %d: %q, %v; want %q", i+1, reads, got, err, "2 games using GameMode")
		}
	}
	callers, calls := first.seen()
	if len(callers) != 1 || calls != reads {
		t.Fatalf("gamemoded saw %d calls from %d connections %v; want %d calls from 1", calls, len(callers), callers, reads)
	}
	probe := callers[0]

	// gamemoded exits: its name has no owner, which is "not running".
	first.stop()
	waitGameMode(t, src, "after gamemoded exited", func(_ string, err error) bool { return errors.Is(err, ErrNoSource) })

	second := serveGameMode(t, addr, 1)
	if got, err := readGameMode(t, src); err != nil || got != "a game using GameMode" {
		t.Fatalf("after gamemoded restarted: %q, %v; want %q", got, err, "a game using GameMode")
	}
	if callers, _ := second.seen(); !slices.Equal(callers, []string{probe}) {
		t.Errorf("restarted gamemoded was asked by %v; want the probe's one connection %s", callers, probe)
	}
}

// TestGameModeBusRestart: when the bus itself goes away the kept
// connection dies with it; the probe says so (an error, not "no game")
// and, once a bus is back at the address, connects anew and reads again,
// over one connection from then on.
func TestGameModeBusRestart(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "bus")
	addr, stop := startBusAt(t, sock)
	serveGameMode(t, addr, 1)
	// The daemon's address names its guid; the probe is given the
	// socket alone, as a session's DBUS_SESSION_BUS_ADDRESS outlives a
	// bus restart.
	src := &gameModeDBus{address: "unix:path=" + sock}
	defer src.Close()
	if got, err := readGameMode(t, src); err != nil || got != "a game using GameMode" {
		t.Fatalf("first bus: %q, %v; want %q", got, err, "a game using GameMode")
	}

	stop()
	if got, err := readGameMode(t, src); err == nil || errors.Is(err, ErrNoSource) {
		t.Fatalf("bus gone: %q, %v; want an error other than ErrNoSource", got, err)
	}

	addr, _ = startBusAt(t, sock)
	second := serveGameMode(t, addr, 3)
	waitGameMode(t, src, "after the bus restarted", func(got string, err error) bool {
		return err == nil && got == "3 games using GameMode"
	})
	_, before := second.seen()
	for range 10 {
		if got, err := readGameMode(t, src); err != nil || got != "3 games using GameMode" {
			t.Fatalf("second bus: %q, %v; want %q", got, err, "3 games using GameMode")
		}
	}
	if callers, calls := second.seen(); len(callers) != 1 || calls != before+10 {
		t.Errorf("second bus: %d calls from %v; want %d from one connection", calls, callers, before+10)
	}
}

// TestGameModeHandshakeEndsWithContext: a bus that accepts the connection
// and never answers holds the probe only until the call's context ends;
// the call fails with the context's error.
func TestGameModeHandshakeEndsWithContext(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "bus")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The bus accepts, stays silent and keeps the connection open; the
	// call's context ends once the probe is connected and waiting.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	quit, served := make(chan struct{}), make(chan struct{})
	defer func() {
		close(quit)
		ln.Close()
		<-served
	}()
	go func() {
		defer close(served)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		cancel()
		<-quit
	}()
	src := &gameModeDBus{address: "unix:path=" + sock}
	defer src.Close()
	if got, err := src.Game(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("silent bus: %q, %v; want context.Canceled", got, err)
	}
}
