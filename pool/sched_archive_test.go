package pool_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

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

// slowArchive is a MemStore whose reads of one replica by lease wait
// until released: a store far away, or slow.
type slowArchive struct {
	*pool.MemStore
	reading chan string   // the lease being read
	release chan struct{} // closed to let reads go on
}

func (s *slowArchive) Replica(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	s.reading <- lease
	select {
	case <-s.release:
	case <-ctx.Done():
		return pool.ReplicaRecord{}, ctx.Err()
	}
	return s.MemStore.Replica(ctx, lease)
}

// TestArchiveReadHoldsNothingUp: while the store is read for a lease no
// longer in memory (a heartbeat of a task decided meanwhile), the
// scheduler answers other requests; the late request is then answered
// as before.
func TestArchiveReadHoldsNothingUp(t *testing.T) {
	st := &slowArchive{MemStore: pool.NewMemStore(), reading: make(chan string, 1), release: make(chan struct{})}
	h := newHarness(t, st, nil)
	ctx := context.Background()
	merger := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	j := h.Job("slow", 1, pooltest.Policy{}, merger)
	lb, lc := h.Lease(bob, 1), h.Lease(carol, 1)
	if len(lb) != 1 || len(lc) != 1 {
		t.Fatalf("leases %v and %v, want one each", lb, lc)
	}
	h.Submit(lb[0], pooltest.Good(0))
	h.Submit(lc[0], pooltest.Good(0))
	if s, err := h.S.Status(j.ID); err != nil || !s.Complete {
		t.Fatalf("status %+v, %v: want the job complete", s, err)
	}
	if f := h.S.Footprint(); f.Replicas != 0 {
		t.Fatalf("footprint %+v: the settled replicas are still in memory", f)
	}

	late := make(chan error, 1)
	go func() { _, err := h.S.Heartbeat(ctx, bob, lb[0].ID); late <- err }()
	if got := <-st.reading; got != lb[0].ID {
		t.Fatalf("the store is asked for lease %s, want %s", got, lb[0].ID)
	}
	// The store is being read: another request is answered meanwhile.
	other := make(chan pool.Footprint, 1)
	go func() { other <- h.S.Footprint() }()
	select {
	case <-other:
	case <-time.After(2 * time.Minute): // patience, not a verdict: it answers at once
		close(st.release)
		<-late
		t.Fatal("the scheduler answered nothing else while the store was read for a late request")
	}
	close(st.release)
	if err := <-late; !errors.Is(err, pool.ErrConflict) {
		t.Errorf("heartbeat of a lease already returned: %v, want ErrConflict", err)
	}
}
