package agent_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
	"idlepool/release"
	"idlepool/release/releasetest"
	"idlepool/store"
)

// TestServeUpdatingInstallsWhenNoTaskIsHeld: the tray app's engine path
// in process (cmd/idlepool-tray's TestTrayUpdatesItself runs the real
// program under Xvfb): a donor that holds no task finds release 2.0.0 on
// a release server on 127.0.0.1, installs it over the programs of its
// user install and returns ErrRestart, with the event said in words and
// the owner's settings and pending receipt kept.
func TestServeUpdatingInstallsWhenNoTaskIsHeld(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("the tarball update is the Linux user install's")
	}
	tmp := t.TempDir()
	bin, v2 := filepath.Join(tmp, "bin"), filepath.Join(tmp, "v2")
	script := func(dir, name, v string) string {
		os.MkdirAll(dir, 0o755)
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\necho 'idlepool "+v+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	script(bin, "idlepool", "1.0.0")
	tray1 := script(bin, "idlepool-tray", "1.0.0")
	keys, err := release.GenerateKeys(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(tmp, "repo")
	releasetest.Publish(t, repo, keys, "2.0.0", releasetest.Tarball(t, filepath.Join(tmp, "idlepool-2.0.0.tar.gz"),
		script(v2, "idlepool", "2.0.0"), script(v2, "idlepool-tray", "2.0.0")))
	srv := httptest.NewServer(http.FileServer(http.Dir(repo)))
	defer srv.Close()
	releasetest.TrustRoot(t, repo, bin)

	dev := newDevice(t, mustKey(t))
	ctx := context.Background()
	s, err := dev.local.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.UpdateURL, s.UpdateKiBps, s.IdleFor = srv.URL, idle.ShareUploadUnlimited, 17*time.Minute
	if err := dev.local.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := dev.local.AddPending(ctx, store.Contribution{Pool: "http://pool.example", Lease: "lease-kept", Task: 7, Cost: 2}); err != nil {
		t.Fatal(err)
	}
	events := filepath.Join(dev.dirs.Data, agent.EventsFile)
	d, err := agent.NewDonor(agent.DonorConfig{Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Workers: 1,
		Executor: &fakeExec{}, Store: dev.local, Logger: quietLogger(t), ProgramDir: bin,
		Events: agent.NewEventLog(events, 0, nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute) // patience, not a verdict
	defer cancel()
	if err := d.ServeUpdating(ctx); !errors.Is(err, agent.ErrRestart) {
		t.Fatalf("ServeUpdating = %v, want ErrRestart once 2.0.0 is installed", err)
	}
	for prog, want := range map[string]string{tray1: "idlepool 2.0.0", tray1 + release.PreviousSuffix: "idlepool 1.0.0"} {
		if out, err := exec.Command(prog).Output(); err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("%s says %q, %v; want %q", filepath.Base(prog), out, err, want)
		}
	}
	evs, err := agent.ReadEvents(events, 0)
	if err != nil || len(evs) == 0 || !strings.Contains(evs[len(evs)-1].Words, "idlepool 2.0.0 is installed: restarting") {
		t.Errorf("events = %+v, %v; want the install said in words", evs, err)
	}
	if s, err := dev.local.Settings(context.Background()); err != nil || s.IdleFor != 17*time.Minute {
		t.Errorf("settings after the update: idle_for %v, %v; want 17m", s.IdleFor, err)
	}
	if p, err := dev.local.Unacknowledged(context.Background(), "http://pool.example"); err != nil || len(p) != 1 {
		t.Errorf("pending receipts after the update = %+v, %v; want lease-kept", p, err)
	}
}
