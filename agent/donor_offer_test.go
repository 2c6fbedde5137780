package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"runtime"
	"testing"

	"idlepool/idle"
	"idlepool/store"
)

// offerStore is a local store in a SQLite file of the test's, holding
// settings s; it is closed when the test ends.
func offerStore(t *testing.T, s idle.Settings) *store.Local {
	t.Helper()
	local, err := store.OpenLocal(filepath.Join(t.TempDir(), "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { local.Close() })
	if err := local.SaveSettings(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	return local
}

// TestAlwaysOffersAnyHour: a donor that computes --always ignores the
// owner's hours, so its offer must not carry them (a pool would refuse it
// work outside them, or near their end).
func TestAlwaysOffersAnyHour(t *testing.T) {
	ctx := context.Background()
	s := idle.Defaults()
	var err error
	if s.Schedule, err = idle.ParseSchedule("Mon-Fri 22:00-07:00"); err != nil {
		t.Fatal(err)
	}
	local := offerStore(t, s)
	for _, tc := range []struct {
		always bool
		want   string
	}{{false, "Mon-Fri 22:00-07:00"}, {true, "always"}} {
		o := &donorOffer{local: local, gpus: noGPUs{}, log: slog.New(slog.DiscardHandler), always: tc.always}
		if got := o.Capacity(ctx, idle.Signals{}).Schedule.String(); got != tc.want {
			t.Errorf("always=%v: offered hours %q, want %q", tc.always, got, tc.want)
		}
	}
}

// TestAlwaysOffersItsWorkers: a donor that computes --always leases on
// every worker whatever the owner's cores setting says, so its offer
// states the cores its workers use (at most the logical CPUs), not the
// settings' share; without always the settings' cores are offered.
func TestAlwaysOffersItsWorkers(t *testing.T) {
	ctx := context.Background()
	s := idle.Defaults()
	s.Cores = 1
	local := offerStore(t, s)
	cpus := runtime.NumCPU()
	for _, tc := range []struct {
		always  bool
		workers int
		want    int
	}{
		{false, 2, 1},
		{true, 2, min(2, cpus)},
		{true, cpus, cpus},
		{true, cpus + 3, cpus},
		{true, 0, 1}, // workers unknown: the settings' cores
	} {
		o := &donorOffer{local: local, gpus: noGPUs{}, log: slog.New(slog.DiscardHandler), always: tc.always, workers: tc.workers}
		if c := o.Capacity(ctx, idle.Signals{}); c.Cores != tc.want || c.LogicalCPUs != cpus {
			t.Errorf("always=%v with %d workers: offered %d of %d cores, want %d of %d", tc.always, tc.workers, c.Cores, c.LogicalCPUs, tc.want, cpus)
		}
	}
}
