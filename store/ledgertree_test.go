package store_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// A ledger whose first entries were signed one by one (as before
// batches) and whose later ones carry a batch's Merkle inclusion proof
// is kept exactly across a reopen: read back, it verifies as a whole,
// and the chain's head is the last entry's leaf hash.
func TestDBLedgerOldAndBatchedEntries(t *testing.T) {
	ctx := context.Background()
	st, reopen := openDB(t)
	key := pooltest.Key(t, "coordinator")
	jobID := job.ID(sha256.Sum256([]byte("job")))
	entries := func(first uint64, n int) []pool.Entry {
		out := make([]pool.Entry, n)
		for i := range out {
			out[i] = pool.Entry{Seq: first + uint64(i), Kind: pool.KindReceipt, Pool: "test", Job: jobID, Task: int64(i),
				Peer: "p", Owner: "o", Lease: fmt.Sprint("l", first+uint64(i)), Cost: 1, Work: 7, Time: 1_767_000_000_000}
		}
		return out
	}
	old := entries(1, 3)
	var prev job.Digest
	for i := range old {
		old[i].Prev = prev
		old[i].Sig = key.Sign(old[i].Canonical(false))
		prev = old[i].Hash()
	}
	batched := entries(4, 5)
	head := pool.SignBatch(batched, prev, key.Sign)
	for _, b := range [][]pool.Entry{old, batched} {
		if err := st.Commit(ctx, &pool.Batch{Entries: b}); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	st = reopen(st)
	got, err := st.(*store.DB).Entries(ctx, pool.EntryQuery{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append(old, batched...), got); diff != "" {
		t.Errorf("entries read back (-committed +read):\n%s", diff)
	}
	if err := pool.VerifyLedger(got, key.Public()); err != nil {
		t.Errorf("VerifyLedger: %v", err)
	}
	snap, err := st.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if snap.LedgerSeq != 8 || snap.LedgerHash != head {
		t.Errorf("ledger head %d %s, want 8 %s", snap.LedgerSeq, snap.LedgerHash, head)
	}
}
