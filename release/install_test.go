package release_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"

	"idlepool/release"
)

// writeTarball writes a gzip tarball with the programs of progs (name:
// body) under idlepool-tray/usr/local/bin, as make package lays it out.
func writeTarball(t *testing.T, progs map[string]string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idlepool.tar.gz")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for name, body := range progs {
		if err := tw.WriteHeader(&tar.Header{Name: "idlepool-tray/usr/local/bin/" + name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestInstallTarballAddsTheWindowProgram: an install of a version before
// the tray app's window program (idlepool and idlepool-tray) gets
// idlepool-window from a tarball that carries it, beside idlepool-tray;
// a tarball without it (an older version) still installs. A CLI-only
// install gets no window program.
func TestInstallTarballAddsTheWindowProgram(t *testing.T) {
	bin := t.TempDir()
	for name, body := range map[string]string{"idlepool": script("1.0.0"), "idlepool-tray": "tray 1"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	two := writeTarball(t, map[string]string{"idlepool": script("2.0.0"), "idlepool-tray": "tray 2", "idlepool-window": "window 2"})
	if err := release.InstallTarball(ctx, two, bin, "2.0.0"); err != nil {
		t.Fatalf("install 2.0.0: %v", err)
	}
	for name, want := range map[string]string{"idlepool-tray": "tray 2", "idlepool-window": "window 2"} {
		if b, err := os.ReadFile(filepath.Join(bin, name)); err != nil || string(b) != want {
			t.Errorf("%s after the update = %q, %v; want %q", name, b, err, want)
		}
	}
	if got := says(t, filepath.Join(bin, "idlepool")); got != "idlepool 2.0.0" {
		t.Errorf("idlepool after the update says %q", got)
	}

	old := writeTarball(t, map[string]string{"idlepool": script("1.5.0"), "idlepool-tray": "tray 1.5"})
	if err := release.InstallTarball(ctx, old, bin, "1.5.0"); err != nil {
		t.Fatalf("install a tarball without idlepool-window: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(bin, "idlepool-tray")); string(b) != "tray 1.5" {
		t.Errorf("idlepool-tray = %q, want tray 1.5", b)
	}

	cli := t.TempDir()
	if err := os.WriteFile(filepath.Join(cli, "idlepool"), []byte(script("1.0.0")), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := release.InstallTarball(ctx, two, cli, "2.0.0"); err != nil {
		t.Fatalf("install into a CLI-only directory: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cli, "idlepool-window")); err == nil {
		t.Error("a CLI-only install got idlepool-window")
	}
}
