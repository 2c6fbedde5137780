package pool_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// Settled replicas leave memory and are answered from the MemStore.
func TestArchive(t *testing.T) {
	h := newHarness(t, pool.NewMemStore(), nil)
	pooltest.RunArchive(h)
}

// A scheduler being rebuilt stops when its ctx ends (a coordinator told
// to stop while it loads many jobs), instead of finishing the load first.
func TestRestoreStops(t *testing.T) {
	st := pool.NewMemStore()
	h := newHarness(t, st, nil)
	merger := h.Device("alice", "alice-1")
	for i := range 3 {
		h.Job(fmt.Sprintf("job-%d", i), 2, pooltest.Policy{}, merger)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := pool.NewScheduler(ctx, pool.SchedulerConfig{Pool: "test", Key: h.Key, Store: st, Blobs: h.Blobs.Path, Now: h.Clock.Now})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("NewScheduler with an ended ctx: %v, want context.Canceled", err)
	}
}
