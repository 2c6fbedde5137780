package store_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
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

// batchEntries returns n receipts from seq first on, each with its own
// peer p0, p1, ... cycling over three.
func batchEntries(first uint64, n int) []pool.Entry {
	jobID := job.ID(sha256.Sum256([]byte("job")))
	out := make([]pool.Entry, n)
	for i := range out {
		seq := first + uint64(i)
		out[i] = pool.Entry{Seq: seq, Kind: pool.KindReceipt, Pool: "test", Job: jobID, Task: int64(seq),
			Peer: fmt.Sprint("p", seq%3), Owner: "o", Lease: fmt.Sprint("l", seq), Cost: 1, Work: 7, Time: 1_767_000_000_000}
	}
	return out
}

// rawCount runs query on the database file at path through a connection
// of its own and returns its one integer.
func rawCount(t *testing.T, path, query string) int {
	t.Helper()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var n int
	if err := raw.QueryRow(query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// A batch signed with pool.SignBatch is stored with its signature once
// (ledger_batches) and no signature or proof in its rows; a batch that
// a commit holds only part of keeps them in its rows. Read back whole,
// from the middle of a batch and by peer, every entry is as committed
// and the ledger verifies.
func TestDBLedgerBatchSignedOnce(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	key := pooltest.Key(t, "coordinator")
	var (
		all  []pool.Entry
		prev job.Digest
	)
	sign := func(first uint64, n int) []pool.Entry {
		b := batchEntries(first, n)
		prev = pool.SignBatch(b, prev, key.Sign)
		all = append(all, b...)
		return b
	}
	// Two whole batches (5 entries and 1) in one commit, one of 3 in the next.
	a, b := sign(1, 5), sign(6, 1)
	commits := [][]pool.Entry{append(slices.Clip(a), b...), sign(7, 3)}
	// A batch of 4 committed in two parts: 2 entries, then 2 with a whole batch of 2.
	part := sign(10, 4)
	commits = append(commits, part[:2], append(slices.Clip(part[2:]), sign(14, 2)...))
	for _, c := range commits {
		if err := db.Commit(ctx, &pool.Batch{Entries: c}); err != nil {
			t.Fatalf("Commit: %v", err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger_batches`); n != 4 {
		t.Errorf("%d batch rows, want 4 (batches 1-5, 6, 7-9, 14-15)", n)
	}
	if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger WHERE length(sig) > 0 OR tree IS NOT NULL`); n != 4 {
		t.Errorf("%d ledger rows hold a signature or a proof, want 4 (the batch committed in parts, 10-13)", n)
	}
	db, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.Entries(ctx, pool.EntryQuery{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all, got); diff != "" {
		t.Errorf("entries read back (-committed +read):\n%s", diff)
	}
	if err := pool.VerifyLedger(got, key.Public()); err != nil {
		t.Errorf("VerifyLedger: %v", err)
	}
	got, err = db.Entries(ctx, pool.EntryQuery{After: 3, Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(all[3:8], got); diff != "" {
		t.Errorf("entries 4-8 read back (-committed +read):\n%s", diff)
	}
	got, err = db.Entries(ctx, pool.EntryQuery{Peer: "p1", Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	var want []pool.Entry
	for _, e := range all {
		if e.Peer == "p1" {
			want = append(want, e)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("p1's entries read back (-committed +read):\n%s", diff)
	}
	for _, e := range got {
		if err := pool.VerifyEntry(e, key.Public()); err != nil {
			t.Errorf("entry %d alone: %v", e.Seq, err)
		}
	}
}

// A store written before batches were stored once, its batches' rows
// each holding the signature and the proof, reads back the same and
// verifies, and new batches follow it.
func TestDBLedgerRowsWithProofsStillRead(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	key := pooltest.Key(t, "coordinator")
	old := batchEntries(1, 6)
	prev := pool.SignBatch(old, job.Digest{}, key.Sign)
	if err := db.Commit(ctx, &pool.Batch{Entries: old}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	// Rewrite the rows as the store wrote them before.
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range old {
		tree, _ := e.Tree.MarshalBinary()
		if _, err := raw.Exec(`UPDATE ledger SET sig = ?, tree = ? WHERE seq = ?`, e.Sig, tree, int64(e.Seq)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Exec(`DELETE FROM ledger_batches`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db, err = store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	next := batchEntries(7, 3)
	pool.SignBatch(next, prev, key.Sign)
	if err := db.Commit(ctx, &pool.Batch{Entries: next}); err != nil {
		t.Fatal(err)
	}
	got, err := db.Entries(ctx, pool.EntryQuery{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(append(old, next...), got); diff != "" {
		t.Errorf("entries read back (-committed +read):\n%s", diff)
	}
	if err := pool.VerifyLedger(got, key.Public()); err != nil {
		t.Errorf("VerifyLedger: %v", err)
	}
}

// The tables a group commit writes for every task carry only the
// indexes that a query or a conflict check needs, since each costs
// every insert a B-tree insert of its own: replicas only their lease
// (Replica, the compare-and-set), outcomes their (job, seq) and their
// (job, task) (an outcome for a task twice is a conflict), the ledger
// its seq and its peer's entries (PeerLedger's reads).
func TestDBHotTablesIndexes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	got := map[string][]string{}
	for _, table := range []string{"replicas", "outcomes", "ledger", "ledger_batches"} {
		rows, err := raw.Query(`SELECT name FROM pragma_index_list(?) ORDER BY name`, table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			got[table] = append(got[table], name)
		}
		rows.Close()
	}
	want := map[string][]string{
		"replicas": {"sqlite_autoindex_replicas_1"},
		"outcomes": {"sqlite_autoindex_outcomes_1", "sqlite_autoindex_outcomes_2"},
		"ledger":   {"ledger_peer"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("indexes (-want +got):\n%s", diff)
	}
}
