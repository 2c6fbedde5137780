package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
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
	"idlepool/release"
	"idlepool/store"
)

// buildVersions builds idlepool as make does once per version, with
// version versions[i], into dirs[i], all at once (the links are the
// slow part, and each runs on its own core), and returns the programs'
// paths in the same order.
func buildVersions(t *testing.T, dirs, versions []string) []string {
	t.Helper()
	progs := make([]string, len(dirs))
	errs := make([]error, len(dirs))
	var wg sync.WaitGroup
	for i := range dirs {
		progs[i] = filepath.Join(dirs[i], "idlepool")
		wg.Go(func() {
			if b, err := exec.Command("go", "build", "-ldflags", "-X idlepool/version.Version="+versions[i], "-o", progs[i], ".").CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("build idlepool %s: %w\n%s", versions[i], err, b)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return progs
}

// tarball writes a release tarball as make release does (the package's
// layout, gzip) with prog as its bin/idlepool.
func tarball(t *testing.T, prog, path string) {
	t.Helper()
	b, err := os.ReadFile(prog)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for _, h := range []*tar.Header{
		{Name: "idlepool-tray/usr/local/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "idlepool-tray/usr/local/bin/idlepool", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
	}
	tw.Write(b)
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func runIn(t *testing.T, prog string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, prog, args...).CombinedOutput()
	return string(out), err
}

// TestUpdateFromOneToTwo: an installed idlepool 1.0.0 updates itself to
// 2.0.0 from a release server on 127.0.0.1, keeping its settings and
// pending receipts and the previous version for one rollback; a
// tampered release 3.0.0 is refused and 2.0.0 kept.
func TestUpdateFromOneToTwo(t *testing.T) {
	t.Parallel() // long (three builds): runs beside the package's other long tests
	if runtime.GOOS == "windows" {
		t.Skip("the tarball update is the Linux user install's")
	}
	tmp := t.TempDir()
	inst := filepath.Join(tmp, "inst") // where the donor installed idlepool
	for _, d := range []string{inst, filepath.Join(tmp, "v2"), filepath.Join(tmp, "v3")} {
		os.MkdirAll(d, 0o755)
	}
	progs := buildVersions(t, []string{inst, filepath.Join(tmp, "v2"), filepath.Join(tmp, "v3")}, []string{"1.0.0", "2.0.0", "3.0.0"})
	v1, v2, v3 := progs[0], progs[1], progs[2]

	// The release server with releases 1.0.0 and 2.0.0.
	keys, err := release.GenerateKeys(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(tmp, "repo")
	arch := runtime.GOARCH
	for _, r := range []struct{ v, prog string }{{"1.0.0", v1}, {"2.0.0", v2}} {
		tb := filepath.Join(tmp, "idlepool-"+r.v+"-linux-"+arch+".tar.gz")
		tarball(t, r.prog, tb)
		if err := release.Publish(repo, keys, []release.File{{Path: tb, Kind: release.KindTarball, OS: runtime.GOOS, Arch: arch}},
			release.PublishOptions{Version: r.v, Notes: "release " + r.v}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(repo)))
	defer srv.Close()
	root, err := os.ReadFile(filepath.Join(repo, "metadata", "1.root.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inst, release.RootFile), root, 0o644); err != nil {
		t.Fatal(err)
	}

	// The donor's settings and a pending receipt.
	h := filepath.Join(tmp, "home")
	if out, err := runIn(t, v1, "--home", h, "settings", "set", "update_url="+srv.URL, "idle_for=17m"); err != nil {
		t.Fatalf("settings set: %v\n%s", err, out)
	}
	dirs, err := home.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	l, err := store.OpenLocal(filepath.Join(dirs.Data, localDBFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.AddPending(context.Background(), store.Contribution{Pool: "http://pool.example", Lease: "lease-kept", Task: 7, Cost: 2}); err != nil {
		t.Fatal(err)
	}
	l.Close()

	out, err := runIn(t, v1, "--home", h, "update")
	if err != nil || !strings.Contains(out, "idlepool 2.0.0 is installed") {
		t.Fatalf("update from 1.0.0: %v\n%s", err, out)
	}
	for prog, want := range map[string]string{v1: "idlepool 2.0.0", v1 + release.PreviousSuffix: "idlepool 1.0.0"} {
		if got, err := runIn(t, prog, "version"); err != nil || strings.TrimSpace(got) != want {
			t.Errorf("%s version = %q, %v; want %q", filepath.Base(prog), got, err, want)
		}
	}
	if got, err := runIn(t, v1, "--home", h, "settings"); err != nil || !strings.Contains(got, "17m") {
		t.Errorf("settings after the update: %v\n%s", err, got)
	}
	l, err = store.OpenLocal(filepath.Join(dirs.Data, localDBFile))
	if err != nil {
		t.Fatal(err)
	}
	pending, err := l.Unacknowledged(context.Background(), "http://pool.example")
	l.Close()
	if err != nil || len(pending) != 1 || pending[0].Lease != "lease-kept" {
		t.Errorf("pending receipts after the update = %+v, %v; want lease-kept", pending, err)
	}
	if out, err := runIn(t, v1, "--home", h, "update"); err != nil || !strings.Contains(out, "2.0.0 is the newest") {
		t.Errorf("a second update: %v\n%s", err, out)
	}

	// Release 3.0.0, its file tampered with on the server: refused, 2.0.0 kept.
	tb := filepath.Join(tmp, "idlepool-3.0.0-linux-"+arch+".tar.gz")
	tarball(t, v3, tb)
	if err := release.Publish(repo, keys, []release.File{{Path: tb, Kind: release.KindTarball, OS: runtime.GOOS, Arch: arch}},
		release.PublishOptions{Version: "3.0.0", Notes: "release 3.0.0"}); err != nil {
		t.Fatal(err)
	}
	served, _ := filepath.Glob(filepath.Join(repo, "targets", "*.idlepool-3.0.0-linux-"+arch+".tar.gz"))
	b, err := os.ReadFile(served[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff // one byte changed on the server, the length kept
	if err := os.WriteFile(served[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runIn(t, v1, "--home", h, "update")
	if err == nil || !strings.Contains(out, "does not match its signed digest") || !strings.Contains(out, "keeps the version installed") {
		t.Errorf("a tampered release: %v\n%s", err, out)
	}
	if got, _ := runIn(t, v1, "version"); strings.TrimSpace(got) != "idlepool 2.0.0" {
		t.Errorf("after the refused update: %q, want idlepool 2.0.0", got)
	}

	// One rollback puts 1.0.0 back.
	if out, err := runIn(t, v1, "update", "--rollback"); err != nil {
		t.Fatalf("rollback: %v\n%s", err, out)
	}
	if got, _ := runIn(t, v1, "version"); strings.TrimSpace(got) != "idlepool 1.0.0" {
		t.Errorf("after the rollback: %q, want idlepool 1.0.0", got)
	}
}
