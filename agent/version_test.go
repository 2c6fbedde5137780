package agent_test

import (
	"context"
	"testing"

	"idlepool/agent"
	"idlepool/coord"
	"idlepool/idle"
	"idlepool/store"
	"idlepool/version"
)

// TestDonorTooOldForThePool: a device older than its pool accepts says
// so in words in its status (never a bare HTTP error), keeps computing
// for nothing but keeps its pending receipts, keeps retrying, and joins
// once it runs a version the pool accepts (after its update and restart).
func TestDonorTooOldForThePool(t *testing.T) {
	was := version.Version
	t.Cleanup(func() { version.Version = was })
	version.Version = "1.3.0"

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := coord.New(ctx, coord.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Pool: "test",
		MinAgentVersion: "1.4.0", Logger: quietLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-served })
	url := srv.URL()

	dev := newDevice(t, nil)
	if err := dev.local.AddPending(context.Background(), store.Contribution{Pool: url, Lease: "kept", Task: 3, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := dev.local.UpdateSettings(context.Background(), func(s *idle.Settings) error {
		s.UpdateURL = "http://127.0.0.1:1/releases"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	poolError := func(d *agent.Donor) string {
		for _, p := range d.Status().Pools {
			return p.Error
		}
		return "(no pool)"
	}

	// With fixed pools (idlepool join URL), as with followed ones: the
	// donor does not end, it says why and retries.
	d, done, stop := startDonor(t, dev, &fakeExec{}, []store.JoinedPool{{URL: url}})
	const want = "this pool needs idlepool 1.4 or newer (this is 1.3.0): updating"
	waitFor(t, "the status says the pool needs a newer idlepool", func() bool { return poolError(d) == want })
	select {
	case err := <-done:
		t.Fatalf("the donor stopped: %v", err)
	default:
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	pending, err := dev.local.Unacknowledged(context.Background(), url)
	if err != nil || len(pending) != 1 || pending[0].Lease != "kept" {
		t.Fatalf("pending receipts = %+v, %v; want the one kept", pending, err)
	}

	// Updated and restarted: the same device joins.
	version.Version = "1.4.0"
	d, _, _ = startDonor(t, dev, &fakeExec{}, []store.JoinedPool{{URL: url}})
	waitFor(t, "the updated device joins", func() bool {
		st := d.Status()
		return len(st.Pools) == 1 && st.Pools[0].Error == "" && st.Pools[0].Name == "test"
	})
}
