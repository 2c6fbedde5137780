package pooltest

import (
	"context"
	"sync/atomic"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
)

// EntryCounter is a MemStore that counts the ledger entries read from
// it through Entries, for a test to show that a path reads none.
type EntryCounter struct {
	*pool.MemStore
	read atomic.Int64
}

// NewEntryCounter returns an empty EntryCounter.
func NewEntryCounter() *EntryCounter { return &EntryCounter{MemStore: pool.NewMemStore()} }

// Entries returns the MemStore's entries for q and adds their number to
// Read's count.
func (r *EntryCounter) Entries(ctx context.Context, q pool.EntryQuery) ([]pool.Entry, error) {
	es, err := r.MemStore.Entries(ctx, q)
	r.read.Add(int64(len(es)))
	return es, err
}

// Read returns how many ledger entries Entries has returned so far.
func (r *EntryCounter) Read() int64 { return r.read.Load() }

// RunLedgerCounts decides tasks with receipts, a deviation and an
// unverified task, and checks that Scheduler.LedgerCounts equals the
// ledger's entries counted by kind, before and after a restart (of the
// store too, when h.Reopen is set).
func RunLedgerCounts(h *Harness) {
	t := h.T
	t.Helper()
	alice := h.Device("alice", "alice-1")
	bob, carol, dave := h.Device("bob", "bob-1"), h.Device("carol", "carol-1"), h.Device("dave", "dave-1")
	liar := h.Device("mallory", "mallory-1")
	h.Job("counted", 2, Policy{}, alice)
	// Task 0: bob and carol agree (two receipts). Task 1: the liar
	// disagrees with bob, then carol and dave side with bob (three
	// receipts and a deviation).
	lb, lc := h.Lease(bob, 2), h.Lease(carol, 1)
	h.Submit(lb[0], Good(0))
	h.Submit(lc[0], Good(0))
	lm := h.Lease(liar, 1)
	h.Submit(lb[1], Good(1))
	h.Submit(lm[0], Bad(1))
	for _, dev := range []string{carol, dave} {
		for _, l := range h.Lease(dev, 1) {
			h.Submit(l, Good(l.Task))
		}
	}
	// An unverified task: every replica says something else.
	h.Job("split", 1, Policy{Redundancy: 2, Quorum: 2}, alice)
	devices := []string{bob, carol, dave, liar}
	for i := 0; ; i++ {
		if i == 100 {
			t.Fatal("the split job was never decided")
		}
		ls := h.Lease(devices[i%len(devices)], 1)
		if len(ls) == 0 {
			if ledgerKinds(h.Ledger())[pool.KindUnverified] > 0 {
				break
			}
			continue
		}
		h.Submit(ls[0], Result([]byte(devices[i%len(devices)])))
	}
	want := ledgerKinds(h.Ledger())
	for _, kind := range []string{pool.KindReceipt, pool.KindDeviation, pool.KindUnverified} {
		if want[kind] == 0 {
			t.Fatalf("no %s entry in the ledger: %v", kind, want)
		}
	}
	if diff := cmp.Diff(want, h.S.LedgerCounts()); diff != "" {
		t.Fatalf("counts (-ledger +counted):\n%s", diff)
	}
	h.Restart()
	if diff := cmp.Diff(want, h.S.LedgerCounts()); diff != "" {
		t.Fatalf("counts after a restart (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(want, ledgerKinds(h.Ledger())); diff != "" {
		t.Fatalf("ledger after a restart (-before +after):\n%s", diff)
	}
}

func ledgerKinds(es []pool.Entry) map[string]uint64 {
	n := map[string]uint64{}
	for _, e := range es {
		n[e.Kind]++
	}
	return n
}
