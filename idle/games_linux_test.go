//go:build linux

package idle

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/prop"
)

// buildXGame builds testdata/xgame (a minimal window manager and a game
// window, see its doc) and returns its path; it skips without a go tool.
func buildXGame(t *testing.T) string {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go tool to build testdata/xgame: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "xgame")
	if b, err := exec.Command(gotool, "build", "-o", bin, "./testdata/xgame").CombinedOutput(); err != nil {
		t.Fatalf("build xgame: %v\n%s", err, b)
	}
	return bin
}

// startXGame runs `xgame args...` on display until it prints "ready";
// closing the returned writer (its standard input) ends a game. Both end
// at cleanup.
func startXGame(t *testing.T, bin, display string, args ...string) io.WriteCloser {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "ready" {
		t.Fatalf("xgame %v: %q instead of ready", args, line)
	}
	return in
}

// waitGame asks src until it answers want (with no error), for at most 2
// minutes.
func waitGame(t *testing.T, src GameSource, want string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var got string
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		got, err = src.Game(ctx)
		cancel()
		if err == nil && got == want {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("full screen: %q, %v; want %q", got, err, want)
}

// TestFullScreenXvfb: on a bare X server the sign cannot exist (no window
// manager, no _NET_ACTIVE_WINDOW); with a window manager, a game window
// that asks for full screen is seen, with its title, and is no longer
// seen once it closes.
func TestFullScreenXvfb(t *testing.T) {
	display := startXvfb(t)
	src := &fullScreenX11{display: display}
	defer src.Close()
	if _, err := src.Game(t.Context()); !errors.Is(err, ErrNoSource) {
		t.Fatalf("without a window manager: %v, want ErrNoSource", err)
	}

	bin := buildXGame(t)
	startXGame(t, bin, display, "wm")
	waitGame(t, src, "")
	game := startXGame(t, bin, display, "-title", "Elden Ring", "game")
	waitGame(t, src, `a full-screen game ("Elden Ring")`)
	game.Close()
	waitGame(t, src, "")

	t.Setenv("DISPLAY", "")
	if _, err := (&fullScreenX11{}).Game(t.Context()); !errors.Is(err, ErrNoSource) {
		t.Errorf("without DISPLAY: %v, want ErrNoSource", err)
	}
}

func TestFullScreenWhat(t *testing.T) {
	for _, tc := range []struct{ title, want string }{
		{"", "a full-screen game"},
		{"  ", "a full-screen game"},
		{"Dota 2", `a full-screen game ("Dota 2")`},
		{strings.Repeat("x", 50), `a full-screen game ("` + strings.Repeat("x", 39) + `…")`},
		{"bad\x00title", "a full-screen game"},
	} {
		if got := fullScreenWhat(tc.title); got != tc.want {
			t.Errorf("fullScreenWhat(%q) = %q, want %q", tc.title, got, tc.want)
		}
	}
}

// fakeGameMode serves gamemoded's com.feralinteractive.GameMode interface
// with its ClientCount property, on a private bus, as gamemoded does.
func fakeGameMode(t *testing.T, addr string, clients int32) *prop.Properties {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	props, err := prop.Export(conn, gameModePath, prop.Map{gameModeInterface: {
		"ClientCount": {Value: clients, Emit: prop.EmitTrue},
	}})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(gameModeService, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("request name: %v, %v", reply, err)
	}
	return props
}

// TestGameModeOverDBus: no GameMode on the bus is no game; registered
// clients are; the count falling to 0 is none again; the bus going away
// is an error, not a game.
func TestGameModeOverDBus(t *testing.T) {
	addr := startBus(t)
	src := &gameModeDBus{address: addr}
	defer src.Close()
	if _, err := src.Game(t.Context()); !errors.Is(err, ErrNoSource) {
		t.Fatalf("GameMode not running: %v, want ErrNoSource", err)
	}
	props := fakeGameMode(t, addr, 0)
	for _, tc := range []struct {
		clients int32
		want    string
	}{{0, ""}, {1, "a game using GameMode"}, {2, "2 games using GameMode"}, {0, ""}} {
		props.SetMust(gameModeInterface, "ClientCount", tc.clients)
		got, err := src.Game(t.Context())
		if err != nil || got != tc.want {
			t.Errorf("%d clients: %q, %v; want %q", tc.clients, got, err, tc.want)
		}
	}

	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	if _, err := (&gameModeDBus{}).Game(t.Context()); !errors.Is(err, ErrNoSource) {
		t.Errorf("no session bus: %v, want ErrNoSource", err)
	}
}

// TestSteamVDF: Steam's registry.vdf with a running app counts while the
// Steam client that wrote it runs, not after; the file is parsed again
// only when it changes.
func TestSteamVDF(t *testing.T) {
	home, proc := t.TempDir(), t.TempDir()
	stats := 0
	src := &steamVDF{home: home, proc: proc, stat: func(p string) (os.FileInfo, error) { stats++; return os.Stat(p) }}
	if _, err := src.Game(t.Context()); !errors.Is(err, ErrNoSource) {
		t.Fatalf("Steam not installed: %v, want ErrNoSource", err)
	}
	path := filepath.Join(home, ".steam", "registry.vdf")
	write := func(app, pid string) {
		t.Helper()
		doc := `"Registry" { "HKCU" { "Software" { "Valve" { "Steam" { "RunningAppID" "` + app +
			`" "ActiveProcess" { "pid" "` + pid + `" } } } } } }`
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		// A later modification time than the last write, whatever the
		// file system's time granularity.
		mt := time.Now().Add(time.Duration(len(app)+len(pid)) * time.Second)
		if err := os.Chtimes(path, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	steamProc := func(pid, comm string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what, want string) {
		t.Helper()
		got, err := src.Game(t.Context())
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", what, got, err, want)
		}
	}
	write("0", "4242")
	steamProc("4242", "steam")
	check("Steam without a game", "")
	write("570", "4242")
	check("Steam running app 570", "a Steam game (app 570)")
	steamProc("4242", "bash")
	check("the pid taken by another program", "")
	steamProc("4242", "steam")
	write("570", "0")
	check("Steam exited (pid 0)", "")

	// A file that did not change is not read again: change it behind the
	// source's back keeping its size and time, and the old answer stays.
	write("570", "4242")
	check("Steam running app 570 again", "a Steam game (app 570)")
	fi, _ := os.Stat(path)
	doc, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(doc), `"570"`, `"999"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	check("unchanged size and time", "a Steam game (app 570)")
	if stats == 0 {
		t.Error("the file was never looked at")
	}
}
