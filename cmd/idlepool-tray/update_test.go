package main

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"idlepool/home"
	"idlepool/idle"
	"idlepool/release"
	"idlepool/release/releasetest"
	"idlepool/store"
)

// updateEnv, set to "1", runs TestTrayUpdatesItself (make
// tray-update-check): it builds the tray app twice and takes about a
// minute, too long for make test, where release's
// TestUpdaterChecksDailyWithJitterAndInstallsWhenIdle and agent's
// TestServeUpdatingInstallsWhenNoTaskIsHeld cover the same steps in
// process.
const updateEnv = "IDLEPOOL_TRAY_UPDATE"

// panelMenu runs scripts/panel (a system-tray host) on the session bus
// bus and collects the menu labels it prints for each tray icon that
// registers; wait returns once one of them is want.
type panelMenu struct {
	mu    sync.Mutex
	lines []string
	seen  chan struct{} // signalled on each new line
}

func startPanel(t *testing.T, dir, bus string) *panelMenu {
	t.Helper()
	prog := filepath.Join(dir, "panel")
	if out, err := exec.Command("go", "build", "-o", prog, "idlepool/scripts/panel").CombinedOutput(); err != nil {
		t.Fatalf("build the panel: %v\n%s", err, out)
	}
	cmd := exec.Command(prog)
	cmd.Env = append(os.Environ(), "DBUS_SESSION_BUS_ADDRESS="+bus)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	background(t, cmd)
	p := &panelMenu{seen: make(chan struct{}, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
			select {
			case p.seen <- struct{}{}:
			default:
			}
		}
	}()
	return p
}

// wait waits up to d for a menu entry labelled want (enabled or not:
// the panel shows a disabled one in brackets).
func (p *panelMenu) wait(t *testing.T, want string, d time.Duration, a *trayApp) {
	t.Helper()
	deadline := time.After(d)
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if l = strings.TrimSpace(l); l == "menu "+want || l == "menu ("+want+")" {
				p.mu.Unlock()
				return
			}
		}
		all := strings.Join(p.lines, "\n")
		p.mu.Unlock()
		select {
		case <-p.seen:
		case <-a.done:
			t.Fatalf("the tray app exited (%v) before its menu said %q; the panel saw:\n%s", a.cmd.ProcessState, want, all)
		case <-deadline:
			t.Fatalf("no tray menu said %q within %v; the panel saw:\n%s", want, d, all)
		}
	}
}

// TestTrayUpdatesItself: the tray app 1.0.0, installed with idlepool
// 1.0.0 in a user install, finds release 2.0.0 on a release server on
// 127.0.0.1 when it starts, installs it (no task is held: it joined no
// pool), restarts in the same process, and its tray menu then says
// idlepool 2.0.0; the donor's settings and pending receipt are kept,
// and 1.0.0 is kept for one rollback.
func TestTrayUpdatesItself(t *testing.T) {
	if os.Getenv(updateEnv) != "1" {
		t.Skipf("builds the tray app twice (about a minute): make tray-update-check sets %s=1", updateEnv)
	}
	if runtime.GOOS != "linux" {
		t.Skip("the tarball update is the Linux user install's")
	}
	needTools(t, "Xvfb", "dbus-daemon")
	tmp := t.TempDir()
	inst, v2dir := filepath.Join(tmp, "inst"), filepath.Join(tmp, "v2")
	tray1 := releasetest.Build(t, inst, ".", "idlepool-tray", "1.0.0")
	cli1 := releasetest.Build(t, inst, "idlepool/cmd/idlepool", "idlepool", "1.0.0")
	tray2 := releasetest.Build(t, v2dir, ".", "idlepool-tray", "2.0.0")
	cli2 := releasetest.Build(t, v2dir, "idlepool/cmd/idlepool", "idlepool", "2.0.0")
	v1bytes, err := os.ReadFile(tray1)
	if err != nil {
		t.Fatal(err)
	}

	keys, err := release.GenerateKeys(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(tmp, "repo")
	arch := runtime.GOARCH
	releasetest.Publish(t, repo, keys, "1.0.0", releasetest.Tarball(t, filepath.Join(tmp, "idlepool-1.0.0-linux-"+arch+".tar.gz"), tray1, cli1))
	releasetest.Publish(t, repo, keys, "2.0.0", releasetest.Tarball(t, filepath.Join(tmp, "idlepool-2.0.0-linux-"+arch+".tar.gz"), tray2, cli2))
	srv := httptest.NewServer(http.FileServer(http.Dir(repo)))
	defer srv.Close()
	releasetest.TrustRoot(t, repo, inst)

	// The donor's settings (the release location among them) and a
	// pending receipt.
	h := filepath.Join(tmp, "home")
	dirs, err := home.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := dirs.Create(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	l, err := store.OpenLocal(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.UpdateURL, s.UpdateKiBps, s.IdleFor = srv.URL, idle.ShareUploadUnlimited, 17*time.Minute
	if err := l.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := l.AddPending(ctx, store.Contribution{Pool: "http://pool.example", Lease: "lease-kept", Task: 7, Cost: 2}); err != nil {
		t.Fatal(err)
	}
	l.Close()

	display := startXvfb(t)
	bus := startSessionBus(t)
	panel := startPanel(t, tmp, bus)
	a := startProgram(t, tray1, h, display, "DBUS_SESSION_BUS_ADDRESS="+bus)
	panel.wait(t, "idlepool 2.0.0", 3*time.Minute, a)
	if !strings.Contains(a.stderr.String(), "A new version is installed: restarting") {
		t.Errorf("the tray app did not say it restarts for the new version:\n%s", a.stderr)
	}
	for prog, want := range map[string][]byte{tray1: mustRead(t, tray2), tray1 + release.PreviousSuffix: v1bytes} {
		if got := mustRead(t, prog); !bytes.Equal(got, want) {
			t.Errorf("%s is not the build it should be after the update", filepath.Base(prog))
		}
	}
	if out, err := exec.Command(cli1, "version").Output(); err != nil || strings.TrimSpace(string(out)) != "idlepool 2.0.0" {
		t.Errorf("idlepool version after the update = %q, %v; want idlepool 2.0.0", out, err)
	}
	a.quit(t)
	t.Logf("the tray app's log:\n%s", a.stderr)

	l, err = store.OpenLocal(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if s, err := l.Settings(ctx); err != nil || s.UpdateURL != srv.URL || s.IdleFor != 17*time.Minute {
		t.Errorf("settings after the update: update_url %q, idle_for %v, %v; want %q, 17m", s.UpdateURL, s.IdleFor, err, srv.URL)
	}
	if p, err := l.Unacknowledged(ctx, "http://pool.example"); err != nil || len(p) != 1 || p[0].Lease != "lease-kept" {
		t.Errorf("pending receipts after the update = %+v, %v; want lease-kept", p, err)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
