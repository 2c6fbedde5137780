package release_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"idlepool/release"
	"idlepool/version"
)

// script is a program that says `idlepool V` to `version` (a stand-in
// for the real idlepool, which cmd/idlepool's TestUpdateFromOneToTwo
// builds).
func script(v string) string { return "#!/bin/sh\necho 'idlepool " + v + "'\n" }

// tarballFile writes a release tarball with bin/idlepool saying v.
func tarballFile(t *testing.T, v string) release.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idlepool-"+v+".tar.gz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	body := script(v)
	tw.WriteHeader(&tar.Header{Name: "idlepool-tray/usr/local/bin/idlepool", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))})
	tw.Write([]byte(body))
	tw.Close()
	zw.Close()
	f.Close()
	return release.File{Path: p, Kind: release.KindTarball, OS: runtime.GOOS, Arch: runtime.GOARCH}
}

func says(t *testing.T, prog string) string {
	t.Helper()
	out, err := exec.Command(prog, "version").Output()
	if err != nil {
		t.Fatalf("%s version: %v", prog, err)
	}
	return strings.TrimSpace(string(out))
}

// keepFixture: a release server with 1.0.0, an install of 1.0.0 in bin,
// and an Updater over both on an injected clock; hits counts the checks
// (requests for timestamp.json: a check that downloads reads it twice,
// once to find the release and once before the download).
type keepFixture struct {
	*fixture
	bin  string
	u    *release.Updater
	hits atomic.Int64
}

func newKeepFixture(t *testing.T) *keepFixture {
	if runtime.GOOS == "windows" {
		t.Skip("the tarball install is the Linux user install's")
	}
	kf := &keepFixture{fixture: newFixture(t), bin: t.TempDir()}
	if err := os.WriteFile(filepath.Join(kf.bin, "idlepool"), []byte(script("1.0.0")), 0o755); err != nil {
		t.Fatal(err)
	}
	files := http.FileServer(http.Dir(kf.repo))
	kf.srv.set("/metadata/timestamp.json", func(w http.ResponseWriter, r *http.Request) {
		kf.hits.Add(1)
		files.ServeHTTP(w, r)
	})
	kf.u = &release.Updater{Source: kf.src, Kind: release.KindTarball, OS: runtime.GOOS, Arch: runtime.GOARCH,
		BinDir: kf.bin, Current: version.V{Major: 1}, Now: func() time.Time { return kf.now },
		Jitter: func() time.Duration { return 2 * time.Hour }}
	return kf
}

func (kf *keepFixture) publishTarball(t *testing.T, v string) {
	t.Helper()
	if err := release.Publish(kf.repo, kf.keys, []release.File{tarballFile(t, v)}, release.PublishOptions{Version: v, Now: func() time.Time { return t0 }}); err != nil {
		t.Fatal(err)
	}
}

func (kf *keepFixture) step(t *testing.T) release.Result {
	t.Helper()
	r, err := kf.u.Step(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestUpdaterChecksDailyWithJitterAndInstallsWhenIdle: a check at most
// once per CheckEvery plus jitter, none outside the donor's hours, a
// download kept while a task runs and installed after it.
func TestUpdaterChecksDailyWithJitterAndInstallsWhenIdle(t *testing.T) {
	kf := newKeepFixture(t)
	if r := kf.step(t); r.State != release.StateUpToDate || kf.hits.Load() != 1 {
		t.Fatalf("first step: %+v after %d checks, want up to date after 1", r, kf.hits.Load())
	}
	kf.now = t0.Add(25 * time.Hour) // a day, but not the jitter
	if r := kf.step(t); r.State != release.StateNotDue || kf.hits.Load() != 1 {
		t.Fatalf("after 25 h: %+v after %d checks, want not due", r, kf.hits.Load())
	}
	kf.now = t0.Add(26*time.Hour + time.Minute)
	kf.u.Allowed = func(time.Time) bool { return false }
	if r := kf.step(t); r.State != release.StateOutside || kf.hits.Load() != 1 {
		t.Fatalf("outside the hours: %+v after %d checks", r, kf.hits.Load())
	}
	kf.u.Allowed = nil

	kf.publishTarball(t, "2.0.0")
	busy := true
	kf.u.Busy = func() bool { return busy }
	if r := kf.step(t); r.State != release.StateReady || r.Version.String() != "2.0.0" || kf.hits.Load() != 3 {
		t.Fatalf("with a task running: %+v after %d checks, want 2.0.0 ready", r, kf.hits.Load())
	}
	if got := says(t, filepath.Join(kf.bin, "idlepool")); got != "idlepool 1.0.0" {
		t.Fatalf("installed while a task ran: %s", got)
	}
	busy = false
	kf.now = kf.now.Add(10 * time.Minute) // not due for a check, but the download waits
	if r := kf.step(t); r.State != release.StateInstalled || kf.hits.Load() != 3 {
		t.Fatalf("once the task ended: %+v after %d checks", r, kf.hits.Load())
	}
	if got := says(t, filepath.Join(kf.bin, "idlepool")); got != "idlepool 2.0.0" {
		t.Errorf("installed: %s", got)
	}
	if got := says(t, filepath.Join(kf.bin, "idlepool"+release.PreviousSuffix)); got != "idlepool 1.0.0" {
		t.Errorf("kept for a rollback: %s", got)
	}
}

// TestUpdaterKeepsTheOldVersionOnABadTarball: a signed tarball whose
// program says another version is not installed; what an interrupted
// install left beside the programs is cleared.
func TestUpdaterKeepsTheOldVersionOnABadTarball(t *testing.T) {
	kf := newKeepFixture(t)
	// An install interrupted while it wrote the new program.
	if err := os.WriteFile(filepath.Join(kf.bin, ".idlepool.new"), []byte("half a progr"), 0o755); err != nil {
		t.Fatal(err)
	}
	f := tarballFile(t, "9.9.9") // its program says 9.9.9
	if err := release.Publish(kf.repo, kf.keys, []release.File{f}, release.PublishOptions{Version: "2.0.0", Now: func() time.Time { return t0 }}); err != nil {
		t.Fatal(err)
	}
	_, err := kf.u.Step(context.Background(), true)
	if !errors.Is(err, release.ErrBadRelease) {
		t.Fatalf("step: %v, want ErrBadRelease", err)
	}
	if got := says(t, filepath.Join(kf.bin, "idlepool")); got != "idlepool 1.0.0" {
		t.Errorf("after a refused install: %s", got)
	}
	left, _ := filepath.Glob(filepath.Join(kf.bin, ".*"))
	if len(left) != 0 {
		t.Errorf("staged files left: %v", left)
	}
}

// TestKeeperObeysTheOffSwitch: with updates off nothing is asked; on, it
// installs and Serve returns ErrInstalled.
func TestKeeperObeysTheOffSwitch(t *testing.T) {
	kf := newKeepFixture(t)
	kf.publishTarball(t, "2.0.0")
	on := false
	ticks := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	polls := 0
	k := &release.Keeper{Updater: kf.u,
		Settings: func(context.Context) (release.Settings, error) {
			return release.Settings{On: on, URL: kf.srv.URL}, nil
		},
		After: func(time.Duration) <-chan time.Time {
			polls++
			if polls == 3 {
				cancel()
			}
			return ticks
		},
	}
	done := make(chan error, 1)
	go func() { done <- k.Serve(ctx) }()
	for range 2 {
		ticks <- t0
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve with updates off: %v", err)
	}
	if kf.hits.Load() != 0 {
		t.Errorf("updates off, yet %d checks", kf.hits.Load())
	}
	on = true
	var reported []release.Result
	k.Report = func(r release.Result, err error) { reported = append(reported, r) }
	if err := k.Serve(context.Background()); !errors.Is(err, release.ErrInstalled) {
		t.Fatalf("Serve with updates on: %v, want ErrInstalled", err)
	}
	if len(reported) != 1 || reported[0].Version.String() != "2.0.0" || !strings.Contains(reported[0].Words, "restarting") {
		t.Errorf("reported %+v", reported)
	}
}

// TestKeeperWakeChecksAtOnceAtMostHourly: a pool that needs a newer
// version wakes the Keeper, which checks outside its daily schedule, but
// not more than once per WakeEvery.
func TestKeeperWakeChecksAtOnceAtMostHourly(t *testing.T) {
	kf := newKeepFixture(t)
	wake := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// After is called as Serve starts to wait, once its step is done.
	waiting := make(chan struct{}, 1)
	k := &release.Keeper{Updater: kf.u, Wake: wake,
		Settings: func(context.Context) (release.Settings, error) {
			return release.Settings{On: true, URL: kf.srv.URL}, nil
		},
		After: func(time.Duration) <-chan time.Time {
			waiting <- struct{}{}
			return nil // no poll: only wakes
		},
	}
	done := make(chan error, 1)
	go func() { done <- k.Serve(ctx) }()
	for _, tc := range []struct {
		what    string
		advance time.Duration
		want    int64
	}{
		{"the first step, due", 0, 1},
		{"a wake", time.Minute, 2},
		{"a second wake within the hour", 10 * time.Minute, 2},
		{"a wake an hour later", time.Hour, 3},
	} {
		if tc.advance > 0 {
			kf.now = kf.now.Add(tc.advance)
			wake <- struct{}{}
		}
		<-waiting
		if got := kf.hits.Load(); got != tc.want {
			t.Errorf("%s: %d checks, want %d", tc.what, got, tc.want)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestForInstallTrustsTheBuildRoot: without a root file beside the
// programs, the root the build was made with (make release) is trusted;
// without either, the self-update is off with ErrNoRoot.
func TestForInstallTrustsTheBuildRoot(t *testing.T) {
	bin, state := t.TempDir(), t.TempDir()
	was := release.BuildRoot
	t.Cleanup(func() { release.BuildRoot = was })
	release.BuildRoot = ""
	if _, err := release.ForInstall(bin, state, "http://127.0.0.1:1", "", 0); !errors.Is(err, release.ErrNoRoot) {
		t.Fatalf("no root anywhere: %v, want ErrNoRoot", err)
	}
	kf := newKeepFixture(t)
	release.BuildRoot = base64.StdEncoding.EncodeToString(kf.src.Root)
	u, err := release.ForInstall(bin, state, kf.srv.URL, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	u.Source.Now = func() time.Time { return t0 } // when the fixture's metadata is fresh
	r, err := u.Source.Latest(context.Background(), runtime.GOOS, runtime.GOARCH, release.KindTarball)
	if err != nil || r.Version.String() != "1.0.0" {
		t.Fatalf("latest with the build's root: %v, %v", r.Version, err)
	}
}

// TestKeeperTellsADownloadWaitingOnce: a release that waits for the
// running tasks is reported once, not at every poll.
func TestKeeperTellsADownloadWaitingOnce(t *testing.T) {
	kf := newKeepFixture(t)
	kf.publishTarball(t, "2.0.0")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan struct{}, 1)
	ticks := make(chan time.Time)
	var reported []release.Result
	k := &release.Keeper{Updater: kf.u, Busy: func() bool { return true },
		Settings: func(context.Context) (release.Settings, error) {
			return release.Settings{On: true, URL: kf.srv.URL}, nil
		},
		After: func(time.Duration) <-chan time.Time {
			waiting <- struct{}{}
			return ticks
		},
		Report: func(r release.Result, err error) { reported = append(reported, r) },
	}
	done := make(chan error, 1)
	go func() { done <- k.Serve(ctx) }()
	for range 3 {
		<-waiting
		kf.now = kf.now.Add(10 * time.Minute)
		ticks <- t0
	}
	<-waiting
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(reported) != 1 || reported[0].State != release.StateReady {
		t.Errorf("reported %+v, want the download waiting once", reported)
	}
}
