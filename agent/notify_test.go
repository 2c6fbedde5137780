package agent_test

import (
	"context"
	"testing"
	"time"

	"idlepool/agent"
	"idlepool/idle"
)

// TestDonorChangesFollowReload: the owner's pause and Resume (a settings
// change and Reload) make the donor decide at once and close Changes,
// although its agents would sample again only in an hour: the tray's
// line follows the decision instead of the next periodic sample and read.
func TestDonorChangesFollowReload(t *testing.T) {
	ctx := context.Background()
	co := startCoordinator(t, t.TempDir(), "127.0.0.1:0")
	dev := newDevice(t, nil)
	if err := dev.local.JoinPool(ctx, co.url, ""); err != nil {
		t.Fatal(err)
	}
	d, err := agent.NewDonor(agent.DonorConfig{
		Home: dev.dirs, DeviceKey: dev.key, OwnerKey: dev.owner, Name: "donor", Workers: 1,
		Executor: &fakeExec{}, Store: dev.local, HTTP: httpClient(t),
		PoolReload: time.Hour, RetryAfter: 100 * time.Millisecond, SettingsReload: time.Hour,
		Logger: quietLogger(t).With("side", "donor"),
		Adjust: func(c *agent.Config) {
			c.MaxBackoff, c.IdlePoll, c.ReceiptPoll = 200*time.Millisecond, 50*time.Millisecond, 50*time.Millisecond
			c.SamplePeriod, c.RestSamplePeriod = time.Hour, time.Hour
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Serve(sctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the pool's agent decides", func() bool {
		st := d.Status()
		return len(st.Pools) == 1 && st.Pools[0].Name != "" && st.Decision.State != ""
	})

	// waitChange waits (at most 2 minutes) for Changes to close with the
	// decision in state want.
	waitChange := func(what string, ch <-chan struct{}, want func(idle.State) bool) {
		t.Helper()
		deadline := time.After(2 * time.Minute)
		for {
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("%s: no change in 2 minutes; status %+v", what, d.Status().Decision)
			}
			if want(d.Status().Decision.State) {
				return
			}
			ch = d.Changes()
		}
	}
	setPause := func(until time.Time) {
		t.Helper()
		if _, err := dev.local.UpdateSettings(ctx, func(s *idle.Settings) error { s.PausedUntil = until; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	ch := d.Changes()
	setPause(time.Now().Add(time.Hour))
	d.Reload()
	waitChange("pause", ch, func(s idle.State) bool { return s == idle.StatePaused })
	if st := d.Status(); !st.Suspended && len(st.Pools) == 1 && st.ActiveSlots != 0 {
		t.Errorf("paused, yet %d slots may lease", st.ActiveSlots)
	}

	ch = d.Changes()
	setPause(time.Time{})
	d.Reload()
	waitChange("resume", ch, func(s idle.State) bool { return s != idle.StatePaused })
}
