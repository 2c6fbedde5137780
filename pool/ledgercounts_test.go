package pool_test

import (
	"context"
	"sync/atomic"
	"testing"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// readCounter is a MemStore that counts the ledger entries read from it.
type readCounter struct {
	*pool.MemStore
	read atomic.Int64
}

func (r *readCounter) Entries(ctx context.Context, q pool.EntryQuery) ([]pool.Entry, error) {
	es, err := r.MemStore.Entries(ctx, q)
	r.read.Add(int64(len(es)))
	return es, err
}

// LedgerCounts equals the ledger counted by kind, across a restart, and
// reads no entry of the store to say so.
func TestLedgerCounts(t *testing.T) {
	st := &readCounter{MemStore: pool.NewMemStore()}
	h := pooltest.NewHarness(t, st, nil)
	pooltest.RunLedgerCounts(h)
	before := st.read.Load()
	for range 3 {
		h.S.LedgerCounts()
	}
	if n := st.read.Load() - before; n != 0 {
		t.Errorf("LedgerCounts read %d ledger entries, want 0", n)
	}
}

// A store that cannot count by kind is read page by page once, at start.
func TestLedgerCountsPaged(t *testing.T) {
	h := pooltest.NewHarness(t, struct{ pool.Store }{pool.NewMemStore()}, nil)
	pooltest.RunLedgerCounts(h)
}
