//go:build unix

package app

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestInstanceSocketMode(t *testing.T) {
	dir := t.TempDir()
	in, err := ClaimInstance(dir, TrayInstance, Request{Command: CommandReload})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	fi, err := os.Stat(filepath.Join(dir, "tray.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("socket mode %v, want 0600", m)
	}
}

// TestInstanceStaleSocket leaves a socket nobody listens on, as a
// crashed instance does: the next launch replaces it.
func TestInstanceStaleSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tray.sock")
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	if _, err := os.Lstat(path); err != nil {
		t.Fatalf("the stale socket is gone: %v", err)
	}

	in, err := ClaimInstance(dir, TrayInstance, Request{Command: CommandReload})
	if err != nil {
		t.Fatalf("ClaimInstance over a stale socket = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- in.Serve(ctx, func(Request) error { return nil }) }()
	cancel()
	<-done
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket is still there after Serve ended: %v", err)
	}
}

func TestInstanceNotASocket(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tray.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ClaimInstance(dir, TrayInstance, Request{Command: CommandReload}); err == nil {
		t.Error("ClaimInstance over a plain file succeeded")
	}
}
