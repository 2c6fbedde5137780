package pool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// peerReadsStore is a pool.Store that counts the reads of one peer's
// ledger entries (EntryQuery.Peer set).
type peerReadsStore struct {
	pool.Store
	peerReads atomic.Int64
}

func (s *peerReadsStore) Entries(ctx context.Context, q pool.EntryQuery) ([]pool.Entry, error) {
	if q.Peer != "" {
		s.peerReads.Add(1)
	}
	return s.Store.Entries(ctx, q)
}

// A device's receipts (PeerLedger) committed since the scheduler loaded
// are answered from memory, the same entries as the store holds, page by
// page; after a restart, the entries from before it come from the store
// and the new ones from memory again.
func TestPeerLedgerFromMemory(t *testing.T) {
	st := &peerReadsStore{Store: pool.NewMemStore()}
	h := pooltest.NewHarness(t, st, nil)
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	run := func(name string, tasks int64) {
		t.Helper()
		h.Job(name, tasks, pooltest.Policy{LeaseTimeout: time.Minute}, alice)
		for _, dev := range []string{bob, carol} {
			for _, l := range h.Lease(dev, int(tasks)) {
				h.Submit(l, pooltest.Good(l.Task))
			}
		}
	}
	check := func(after uint64, wantReads int64) {
		t.Helper()
		st.peerReads.Store(0)
		for _, dev := range []string{bob, carol} {
			want, err := st.Store.Entries(context.Background(), pool.EntryQuery{After: after, Max: 1000, Peer: dev})
			if err != nil {
				t.Fatal(err)
			}
			var got []pool.Entry
			for cur := after; ; {
				page, err := h.S.PeerLedger(dev, cur, 3)
				if err != nil {
					t.Fatal(err)
				}
				if len(page) == 0 {
					break
				}
				got = append(got, page...)
				cur = page[len(page)-1].Seq
			}
			if len(want) == 0 || !cmp.Equal(want, got) {
				t.Errorf("PeerLedger(%s, %d) in pages of 3 (-store +scheduler):\n%s", dev, after, cmp.Diff(want, got))
			}
		}
		if n := st.peerReads.Load(); n > wantReads {
			t.Errorf("PeerLedger read the store %d times, want at most %d", n, wantReads)
		}
	}
	run("first", 5)
	check(0, 0)
	head := uint64(len(h.Ledger()))

	h.Restart()
	run("second", 4)
	check(head, 0)
	check(0, 4) // the pages that start before the restart (two of 3 entries per device) come from the store
}
