//go:build unix

package agent_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
)

// TestLocalAPIReload: a pause saved by another program (`idlepool
// settings set pause=1h`) reaches a running donor as soon as that program
// asks it through the local API to reload, not at its periodic read
// (here an hour, so that only the reload can explain the pause).
func TestLocalAPIReload(t *testing.T) {
	dev := newDevice(t, nil)
	sock := filepath.Join(dev.dirs.Data, agent.LocalAPIFile)
	d, err := agent.NewDonor(agent.DonorConfig{
		Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Executor: &fakeExec{}, Store: dev.local,
		LocalAPI: sock, SettingsReload: time.Hour, Logger: quietLogger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	eventually(t, 20*time.Second, "a first decision served", func() bool {
		st, err := agent.ReadStatus(ctx, sock)
		return err == nil && !st.DecidedAt.IsZero()
	})
	if _, err := dev.local.UpdateSettings(ctx, func(s *idle.Settings) error {
		s.PausedUntil = time.Now().Add(time.Hour)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := agent.AskReload(ctx, sock); err != nil {
		t.Fatalf("AskReload: %v", err)
	}
	eventually(t, 20*time.Second, "the pause in force", func() bool {
		st, err := agent.ReadStatus(ctx, sock)
		return err == nil && st.Decision.State == idle.StatePaused && strings.HasPrefix(st.Decision.Reason, "paused by you until ")
	})

	cancel()
	<-done
	done <- nil // for the cleanup
	if err := agent.AskReload(context.Background(), sock); !errors.Is(err, agent.ErrNoAgent) {
		t.Errorf("AskReload with no agent: %v, want ErrNoAgent", err)
	}
}
