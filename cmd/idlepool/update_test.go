package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"idlepool/home"
	"idlepool/release"
	"idlepool/release/releasetest"
	"idlepool/store"
)

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
	for _, d := range []string{inst, filepath.Join(tmp, "v2")} {
		os.MkdirAll(d, 0o755)
	}
	progs := releasetest.Builds(t, releasetest.Spec{Dir: inst, Pkg: ".", Name: "idlepool", V: "1.0.0"},
		releasetest.Spec{Dir: filepath.Join(tmp, "v2"), Pkg: ".", Name: "idlepool", V: "2.0.0"})
	v1, v2 := progs[0], progs[1]

	// The release server with releases 1.0.0 and 2.0.0.
	keys, err := release.GenerateKeys(2, 2)
	if err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(tmp, "repo")
	arch := runtime.GOARCH
	for _, r := range []struct{ v, prog string }{{"1.0.0", v1}, {"2.0.0", v2}} {
		tb := releasetest.Tarball(t, filepath.Join(tmp, "idlepool-"+r.v+"-linux-"+arch+".tar.gz"), r.prog)
		releasetest.Publish(t, repo, keys, r.v, tb)
	}
	srv := httptest.NewServer(http.FileServer(http.Dir(repo)))
	defer srv.Close()
	releasetest.TrustRoot(t, repo, inst)

	// The donor's settings and a pending receipt. The download's cap is
	// set high: at the default 1 MiB/s each of the two tarballs this test
	// downloads (about 25 MiB) takes 25 s, and what is checked here does
	// not depend on the pace (the paced reader still runs).
	h := filepath.Join(tmp, "home")
	if out, err := runIn(t, v1, "--home", h, "settings", "set", "update_url="+srv.URL, "idle_for=17m", "update_download=1GiB/s"); err != nil {
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

	// Release 3.0.0, its file tampered with on the server: refused, 2.0.0
	// kept. The program in it is never run (it is refused first), so it
	// is 2.0.0's build, which saves a third.
	releasetest.Publish(t, repo, keys, "3.0.0", releasetest.Tarball(t, filepath.Join(tmp, "idlepool-3.0.0-linux-"+arch+".tar.gz"), v2))
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
