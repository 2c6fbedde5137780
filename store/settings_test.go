package store_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/idle"
	"idlepool/store"
)

func TestSettings(t *testing.T) {
	ctx := context.Background()
	l, path := openLocal(t)
	got, err := l.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(idle.Defaults(), got); diff != "" {
		t.Errorf("nothing saved: want the defaults (-want +got):\n%s", diff)
	}

	s := idle.Defaults()
	s.Schedule, _ = idle.ParseSchedule("Mon-Fri 22:00-07:00; Sat,Sun")
	s.TimeZone = "Europe/Berlin"
	s.Cores = 6
	s.IdleFor = 90 * time.Second
	s.PauseFor = []string{"game.exe"}
	s.GPUs = map[string]idle.GPUSettings{"GPU-a": {Use: true, MemoryShare: 0.8, MaxOtherShare: 0.2}}
	s.PausedUntil = time.Date(2026, 3, 10, 14, 5, 0, 0, time.UTC)
	if err := l.SaveSettings(ctx, s); err != nil {
		t.Fatal(err)
	}
	bad := s
	bad.CoresShare = 0.5 // with Cores too
	if err := l.SaveSettings(ctx, bad); err == nil || !strings.Contains(err.Error(), "cores and cores_share") {
		t.Errorf("SaveSettings of invalid settings = %v, want an error naming the fields", err)
	}

	// Reopen: the settings survive, the invalid ones were not saved.
	l.Close()
	l2, err := store.OpenLocal(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	got, err = l2.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(s, got); diff != "" {
		t.Errorf("after reopening (-want +got):\n%s", diff)
	}
}

func TestUpdateSettings(t *testing.T) {
	ctx := context.Background()
	l, _ := openLocal(t)
	// Concurrent read-modify-writes of different fields lose nothing.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := l.UpdateSettings(ctx, func(s *idle.Settings) error {
				s.PauseFor = append(s.PauseFor, "p"+string(rune('a'+i)))
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	got, err := l.Settings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.PauseFor) != 8 {
		t.Errorf("PauseFor = %v, want 8 programs", got.PauseFor)
	}

	stop := errors.New("changed my mind")
	if _, err := l.UpdateSettings(ctx, func(s *idle.Settings) error { s.Cores = 2; return stop }); !errors.Is(err, stop) {
		t.Errorf("UpdateSettings = %v, want the change's error", err)
	}
	if _, err := l.UpdateSettings(ctx, func(s *idle.Settings) error { s.MemoryShare = 2; return nil }); err == nil || !strings.Contains(err.Error(), "memory_share") {
		t.Errorf("UpdateSettings to invalid = %v, want an error naming memory_share", err)
	}
	if got2, _ := l.Settings(ctx); !cmp.Equal(got, got2) {
		t.Errorf("a failed update changed the settings: %+v", got2)
	}
}
