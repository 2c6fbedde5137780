package pool_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
	"time"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

func TestSchedMemStoreConformance(t *testing.T) {
	pooltest.StoreConformance(t, func(t *testing.T) (pool.Store, func(pool.Store) pool.Store) {
		return pool.NewMemStore(), func(s pool.Store) pool.Store { return s }
	})
}

// The conformance suite waits out a store that does not answer at first
// (pool.ErrStoreUnavailable: nothing applied, the same call may be made
// again), as the Scheduler does a Commit: a replicated store whose
// stream leader is not elected yet on a busy machine. Here every call
// of the Store and the ReplicaArchive fails once before it is made, so
// the whole suite, the parts for a MemStore's optional interfaces
// included, runs on its second tries.
func TestSchedStoreConformanceWaitsOut(t *testing.T) {
	pooltest.StoreConformance(t, func(t *testing.T) (pool.Store, func(pool.Store) pool.Store) {
		return &hesitantStore{MemStore: pool.NewMemStore()}, func(s pool.Store) pool.Store { return s }
	})
}

// hesitantStore fails every other call of Load, Commit, Entries and
// Replica with pool.ErrStoreUnavailable, before doing anything, and
// makes the others on MemStore, whose other methods (ForgetAcked) it
// keeps.
type hesitantStore struct {
	*pool.MemStore
	mu    sync.Mutex
	calls int
}

var (
	_ pool.ReplicaArchive       = (*hesitantStore)(nil)
	_ pooltest.OutcomeForgetter = (*hesitantStore)(nil)
)

// refuse reports whether this call fails, counting it.
func (h *hesitantStore) refuse() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if h.calls%2 == 1 {
		return fmt.Errorf("hesitant store, call %d: %w", h.calls, pool.ErrStoreUnavailable)
	}
	return nil
}

func (h *hesitantStore) Load(ctx context.Context) (*pool.Snapshot, error) {
	if err := h.refuse(); err != nil {
		return nil, err
	}
	return h.MemStore.Load(ctx)
}

func (h *hesitantStore) Commit(ctx context.Context, b *pool.Batch) error {
	if err := h.refuse(); err != nil {
		return err
	}
	return h.MemStore.Commit(ctx, b)
}

func (h *hesitantStore) Entries(ctx context.Context, q pool.EntryQuery) ([]pool.Entry, error) {
	if err := h.refuse(); err != nil {
		return nil, err
	}
	return h.MemStore.Entries(ctx, q)
}

func (h *hesitantStore) Replica(ctx context.Context, lease string) (pool.ReplicaRecord, error) {
	if err := h.refuse(); err != nil {
		return pool.ReplicaRecord{}, err
	}
	return h.MemStore.Replica(ctx, lease)
}

// A MemStore keeps copies of its own of what a batch carries: a record
// whose result and work equal its lease's stored record shares the
// store's copies, never the batch's, so that changing the batch after
// Commit changes nothing stored; a result that is empty stays empty,
// not nil, and one that differs is copied anew.
func TestMemStoreKeepsItsOwnCopies(t *testing.T) {
	ctx := context.Background()
	m := pool.NewMemStore()
	id := job.ID(sha256.Sum256([]byte("copies")))
	at := time.UnixMilli(1_767_000_000_000)
	rec := func(lease, state string, version, prev int64, result []byte, work uint64) pool.ReplicaRecord {
		r := pool.ReplicaRecord{Lease: lease, Job: id, Task: 1, Peer: "p", Owner: "o", State: state, Created: at,
			Deadline: at.Add(time.Minute), Result: result, Version: version, Prev: prev}
		if work > 0 {
			r.Work = &pool.Work{Rule: 1, Count: work}
		}
		return r
	}
	commit := func(b *pool.Batch) {
		t.Helper()
		if err := m.Commit(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	const lease, other = "0123456789abcdef0123456789abcdef", "l-other"
	commit(&pool.Batch{Jobs: []pool.JobRecord{{ID: id, Canonical: []byte("c"), Owner: "o", Merger: "m", Order: 1, Added: at}},
		Replicas: []pool.ReplicaRecord{rec(lease, pool.ReplicaLeased, 1, 0, nil, 0), rec(other, pool.ReplicaLeased, 1, 0, nil, 0)}})
	returned := []*pool.Batch{{Replicas: []pool.ReplicaRecord{rec(lease, pool.ReplicaReturned, 2, 1, []byte("result"), 7),
		rec(other, pool.ReplicaReturned, 2, 1, nil, 7)}}}
	commit(returned[0])
	settled := &pool.Batch{Replicas: []pool.ReplicaRecord{rec(lease, pool.ReplicaAgreed, 3, 2, []byte("result"), 7),
		rec(other, pool.ReplicaAgreed, 3, 2, []byte{}, 8)}}
	commit(settled)
	for _, b := range []*pool.Batch{returned[0], settled} { // the caller's bytes and work change
		for i := range b.Replicas {
			r := &b.Replicas[i]
			for k := range r.Result {
				r.Result[k] = 'x'
			}
			if r.Work != nil {
				r.Work.Count = 99
			}
		}
	}
	got, err := m.Replica(ctx, lease)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Result) != "result" || got.Work == nil || got.Work.Count != 7 || got.State != pool.ReplicaAgreed {
		t.Errorf("replica %s: result %q, work %+v, state %s; want \"result\", count 7, agreed", lease, got.Result, got.Work, got.State)
	}
	got, err = m.Replica(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if got.Result == nil || len(got.Result) != 0 || got.Work == nil || got.Work.Count != 8 {
		t.Errorf("replica %s: result %#v, work %+v; want an empty, not nil, result and count 8", other, got.Result, got.Work)
	}
}
