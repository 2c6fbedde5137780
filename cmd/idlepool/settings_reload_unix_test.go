//go:build unix

package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/home"
	"idlepool/identity"
	"idlepool/idle"
	"idlepool/store"
	"idlepool/worker"
)

// noExec is an executor that is never asked: the donor joins no pool.
type noExec struct{}

func (noExec) Run(context.Context, worker.Request) (worker.Result, error) {
	return worker.Result{}, errors.New("no task expected")
}

// TestSettingsPauseReachesAgent: `idlepool settings set pause=1h` reaches
// the donor running on this machine (the tray's or `join`'s engine, with
// its local API in the data directory) at once, as the tray's own pause
// does: the donor here reads the store by itself only every hour, so only
// the command's reload through the local API can pause it.
func TestSettingsPauseReachesAgent(t *testing.T) {
	h := t.TempDir()
	dirs, err := home.Resolve(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := dirs.Create(); err != nil {
		t.Fatal(err)
	}
	local, err := store.OpenLocal(filepath.Join(dirs.Data, "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	dev, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dirs.Data, agent.LocalAPIFile)
	d, err := agent.NewDonor(agent.DonorConfig{
		Home: dirs, DeviceKey: dev, OwnerKey: dev, Executor: noExec{}, Store: local,
		LocalAPI: sock, SettingsReload: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	defer func() { cancel(); <-done }()

	status := func() agent.AgentStatus {
		st, _ := agent.ReadStatus(ctx, sock)
		return st
	}
	for deadline := time.Now().Add(30 * time.Second); status().DecidedAt.IsZero(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the donor served no decision")
		}
	}
	if st := status(); st.Decision.State == idle.StatePaused {
		t.Fatalf("paused before the pause: %+v", st.Decision)
	}

	out := idlepool(t, h, "settings", "set", "pause=1h")
	set := time.Now()
	if out.code != 0 || out.stderr != "" {
		t.Fatalf("settings set pause=1h: exit %d, stderr %q", out.code, out.stderr)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st := status()
		if st.Decision.State == idle.StatePaused && strings.HasPrefix(st.Decision.Reason, "paused by you until ") {
			t.Logf("paused %v after the command returned", time.Since(set).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running donor did not take the pause (its own reload is an hour away): %+v", st.Decision)
		}
	}
}
