package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"idlepool/idle"
	"idlepool/store"
)

// TestAlwaysOffersAnyHour: a donor that computes --always ignores the
// owner's hours, so its offer must not carry them (a pool would refuse it
// work outside them, or near their end).
func TestAlwaysOffersAnyHour(t *testing.T) {
	ctx := context.Background()
	local, err := store.OpenLocal(filepath.Join(t.TempDir(), "local.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	s := idle.Defaults()
	if s.Schedule, err = idle.ParseSchedule("Mon-Fri 22:00-07:00"); err != nil {
		t.Fatal(err)
	}
	if err := local.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
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
