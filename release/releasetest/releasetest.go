// Package releasetest builds versioned idlepool programs and signed
// release repositories for tests that update a real installation from a
// release server on 127.0.0.1 (cmd/idlepool's TestUpdateFromOneToTwo,
// cmd/idlepool-tray's TestTrayUpdatesItself).
//
//	prog := releasetest.Build(t, dir, "idlepool/cmd/idlepool", "idlepool", "2.0.0")
//	tb := releasetest.Tarball(t, filepath.Join(dir, "idlepool-2.0.0-linux-amd64.tar.gz"), prog)
//	releasetest.Publish(t, repo, keys, "2.0.0", tb)
//
// Its functions call t.Fatal on failure; they are safe for concurrent
// use on distinct paths.
package releasetest

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"idlepool/release"
)

// Build builds the Go package pkg (an import path, or "." for the test's
// own directory) as make does, with version v (-X
// idlepool/version.Version=v), into dir/name, and returns that path.
// Building a cgo program (the tray app) the first time takes tens of
// seconds; a second version only links again.
func Build(t testing.TB, dir, pkg, name, v string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-ldflags", "-X idlepool/version.Version="+v, "-o", out, pkg)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s %s: %v\n%s", pkg, v, err, b)
	}
	return out
}

// Spec names one program for Builds: the Go package Pkg built with
// version V into Dir/Name (Build's arguments).
type Spec struct{ Dir, Pkg, Name, V string }

// Builds builds each program as Build does, all at once (the links are
// the slow part and each runs on a core of its own), and returns their
// paths in the order of specs. It calls t.Fatal with every build's error
// when any fails.
func Builds(t testing.TB, specs ...Spec) []string {
	t.Helper()
	out := make([]string, len(specs))
	errs := make([]error, len(specs))
	var wg sync.WaitGroup
	for i, s := range specs {
		out[i] = filepath.Join(s.Dir, s.Name)
		wg.Go(func() {
			if err := os.MkdirAll(s.Dir, 0o755); err != nil {
				errs[i] = err
				return
			}
			cmd := exec.Command("go", "build", "-ldflags", "-X idlepool/version.Version="+s.V, "-o", out[i], s.Pkg)
			if b, err := cmd.CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("build %s %s: %w\n%s", s.Pkg, s.V, err, b)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return out
}

// Tarball writes a release tarball at path as make release does (the
// package's layout, idlepool-tray/usr/local/bin/NAME, gzip) holding each
// of progs under its base name, and returns path. Its gzip stream stores
// the bytes uncompressed: the tests that publish releases run under the
// race detector, where compressing a program of tens of MiB takes most of
// a minute, and an installation reads a stored stream as any other.
func Tarball(t testing.TB, path string, progs ...string) string {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw, err := gzip.NewWriterLevel(f, gzip.NoCompression)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "idlepool-tray/usr/local/bin/", Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	for _, p := range progs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h := &tar.Header{Name: "idlepool-tray/usr/local/bin/" + filepath.Base(p), Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// Publish publishes tarball as release v for this machine's OS and
// architecture into the repository repo, signed with keys (creating the
// repository, root version 1, when it is new).
func Publish(t testing.TB, repo string, keys release.Keys, v, tarball string) {
	t.Helper()
	f := release.File{Path: tarball, Kind: release.KindTarball, OS: runtime.GOOS, Arch: runtime.GOARCH}
	if err := release.Publish(repo, keys, []release.File{f}, release.PublishOptions{Version: v, Notes: "release " + v}); err != nil {
		t.Fatalf("publish %s: %v", v, err)
	}
}

// TrustRoot writes the repository's first root (metadata/1.root.json)
// beside the programs in binDir (release.RootFile), as an installation
// made from that repository has it.
func TrustRoot(t testing.TB, repo, binDir string) {
	t.Helper()
	root, err := os.ReadFile(filepath.Join(repo, "metadata", "1.root.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(binDir, release.RootFile), root, 0o644); err != nil {
		t.Fatal(err)
	}
}
