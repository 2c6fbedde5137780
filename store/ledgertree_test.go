package store_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

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

// A batch signed with pool.SignBatch and committed whole is stored as
// one row (ledger_blocks) with its signature once, with a row per peer
// it names and no row of ledger; a batch that a commit holds only part
// of keeps its entries as rows of ledger, each with its signature and
// proof. Read back whole, from the middle of a batch and by peer, every
// entry is as committed and the ledger verifies.
func TestDBLedgerBatchSignedOnce(t *testing.T) {
	ctx := context.Background()
	store.SetBlockPeersFlush(t, 1) // every commit writes its blocks' peers
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
	if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger_blocks`); n != 4 {
		t.Errorf("%d block rows, want 4 (batches 1-5, 6, 7-9, 14-15)", n)
	}
	if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger_block_peers`); n != 9 {
		t.Errorf("%d rows of blocks by peer, want 9 (3, 1, 3 and 2 peers)", n)
	}
	if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger`); n != 4 {
		t.Errorf("%d ledger rows, want 4 (the batch committed in parts, 10-13)", n)
	}
	if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger WHERE length(sig) > 0 AND tree IS NOT NULL`); n != 4 {
		t.Errorf("%d ledger rows hold a signature and a proof, want 4", n)
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

// A batch signed by pool.Batch.Sign, as the Scheduler signs it, whose
// leaf hashes spare the store hashing its entries again, is stored as
// one signed by pool.SignBatch: a block row each, the same entries read
// back, the same head.
func TestDBLedgerBatchSignedBySign(t *testing.T) {
	ctx := context.Background()
	key := pooltest.Key(t, "coordinator")
	var (
		read  [2][]pool.Entry
		heads [2]job.Digest
	)
	for i, bySign := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "coordinator.db")
		db, err := store.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		var prev job.Digest
		seq := uint64(1)
		for _, n := range []int{5, 1, 3} {
			b := &pool.Batch{Entries: batchEntries(seq, n)}
			if bySign {
				prev = b.Sign(prev, key.Sign)
				if !b.SignedWhole() {
					t.Fatalf("the batch from entry %d, signed by Batch.Sign, is not SignedWhole", seq)
				}
			} else {
				prev = pool.SignBatch(b.Entries, prev, key.Sign)
			}
			if err := db.Commit(ctx, b); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			seq += uint64(n)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger_blocks`); n != 3 {
			t.Errorf("Batch.Sign %v: %d block rows, want 3", bySign, n)
		}
		if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger`); n != 0 {
			t.Errorf("Batch.Sign %v: %d ledger rows, want none", bySign, n)
		}
		db, err = store.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if read[i], err = db.Entries(ctx, pool.EntryQuery{Max: 100}); err != nil {
			t.Fatal(err)
		}
		snap, err := db.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if heads[i] = snap.LedgerHash; heads[i] != prev {
			t.Errorf("Batch.Sign %v: the ledger's head is %s, want %s", bySign, heads[i], prev)
		}
		if err := pool.VerifyLedger(read[i], key.Public()); err != nil {
			t.Errorf("Batch.Sign %v: VerifyLedger: %v", bySign, err)
		}
		db.Close()
	}
	if diff := cmp.Diff(read[0], read[1]); diff != "" || heads[0] != heads[1] {
		t.Errorf("entries read back (-SignBatch +Batch.Sign):\n%s\nheads %s, %s", diff, heads[0], heads[1])
	}
}

// A store written before blocks (schema version 9), whose ledger holds
// entries signed alone, a batch whose rows each hold the signature and
// the proof, and a batch stored with its signature once
// (ledger_batches), opens with migration 0010 and reads back the same:
// its head, its counts by kind, its entries whole, from the middle and
// by peer. New batches are blocks after it, and the whole verifies.
func TestDBLedgerRowsBeforeBlocksStillRead(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	raw := schemaAt(t, path, 9)
	key := pooltest.Key(t, "coordinator")
	insert := func(e pool.Entry, sig, tree []byte) {
		t.Helper()
		h := e.Hash()
		if _, err := raw.Exec(`INSERT INTO ledger
			(seq, prev, hash, kind, pool, job, task, peer, owner, lease, digest, cost, work, time, reason, sig, tree)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			int64(e.Seq), e.Prev[:], h[:], e.Kind, e.Pool, e.Job[:], e.Task, e.Peer, e.Owner, e.Lease, e.Digest[:],
			e.Cost, int64(e.Work), e.Time, e.Reason, sig, tree); err != nil {
			t.Fatal(err)
		}
	}
	alone := batchEntries(1, 3) // signed one by one, before 0007
	alone[1].Kind, alone[1].Cost = pool.KindDeviation, 0
	var prev job.Digest
	for i := range alone {
		alone[i].Prev = prev
		alone[i].Sig = key.Sign(alone[i].Canonical(false))
		prev = alone[i].Hash()
		insert(alone[i], alone[i].Sig, nil)
	}
	proofs := batchEntries(4, 6) // before 0008: signature and proof in each row
	prev = pool.SignBatch(proofs, prev, key.Sign)
	for _, e := range proofs {
		tree, _ := e.Tree.MarshalBinary()
		insert(e, e.Sig, tree)
	}
	once := batchEntries(10, 5) // before 0010: a row of ledger_batches
	once[4].Kind, once[4].Cost = pool.KindUnverified, 0
	prev = pool.SignBatch(once, prev, key.Sign)
	for _, e := range once {
		insert(e, []byte{}, nil)
	}
	if _, err := raw.Exec(`INSERT INTO ledger_batches(last, first, sig) VALUES (14, 10, ?)`, once[0].Sig); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	old := slices.Concat(alone, proofs, once)

	db, err := store.Open(path)
	if err != nil {
		t.Fatalf("Open of a database before 0010: %v", err)
	}
	defer func() { db.Close() }()
	head := func(want job.Digest, seq uint64) {
		t.Helper()
		snap, err := db.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if snap.LedgerSeq != seq || snap.LedgerHash != want {
			t.Errorf("ledger head %d %s, want %d %s", snap.LedgerSeq, snap.LedgerHash, seq, want)
		}
	}
	counts := func(want map[string]uint64) {
		t.Helper()
		got, err := db.CountEntries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("counts by kind (-want +got):\n%s", diff)
		}
	}
	read := func(q pool.EntryQuery, want []pool.Entry) {
		t.Helper()
		got, err := db.Entries(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Entries(%+v) (-want +got):\n%s", q, diff)
		}
	}
	head(prev, 14)
	counts(map[string]uint64{pool.KindReceipt: 12, pool.KindDeviation: 1, pool.KindUnverified: 1})
	read(pool.EntryQuery{Max: 100}, old)

	next := batchEntries(15, 6)
	prev = pool.SignBatch(next, prev, key.Sign)
	if err := db.Commit(ctx, &pool.Batch{Entries: next}); err != nil {
		t.Fatal(err)
	}
	if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger`); n != 14 {
		t.Errorf("%d ledger rows after a batch committed whole, want the 14 of before", n)
	}
	all := slices.Concat(old, next)
	read(pool.EntryQuery{Max: 100}, all)
	read(pool.EntryQuery{After: 12, Max: 5}, all[12:17])
	read(pool.EntryQuery{After: 20, Max: 5}, nil)
	var p1 []pool.Entry
	for _, e := range all {
		if e.Peer == "p1" {
			p1 = append(p1, e)
		}
	}
	read(pool.EntryQuery{Peer: "p1", Max: 100}, p1)
	read(pool.EntryQuery{Peer: "p1", After: 10, Max: 2}, p1[4:6]) // 13 (a row) and 16 (a block)
	got, err := db.Entries(ctx, pool.EntryQuery{Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.VerifyLedger(got, key.Public()); err != nil {
		t.Errorf("VerifyLedger: %v", err)
	}
	counts(map[string]uint64{pool.KindReceipt: 18, pool.KindDeviation: 1, pool.KindUnverified: 1})
	db.Close()
	if db, err = store.Open(path); err != nil {
		t.Fatal(err)
	}
	head(prev, 20)
}

// schemaAt creates the coordinator database at path as an idlepool of
// schema version n left it (migrations 0001 to n) and returns a plain
// connection to it.
func schemaAt(t *testing.T, path string, n int) *sql.DB {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("migrations", "coordinator", "*.sql"))
	if err != nil || len(files) < n {
		t.Fatalf("migrations: %v, %v", files, err)
	}
	slices.Sort(files)
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	if _, err := raw.Exec(`CREATE TABLE schema_version (
		version INTEGER PRIMARY KEY,
		name    TEXT NOT NULL,
		applied INTEGER NOT NULL DEFAULT (unixepoch())
	)`); err != nil {
		t.Fatal(err)
	}
	for i, name := range files[:n] {
		body, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.Exec(string(body)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := raw.Exec(`INSERT INTO schema_version(version, name) VALUES (?, ?)`, i+1, filepath.Base(name)); err != nil {
			t.Fatal(err)
		}
	}
	return raw
}

// The tables a group commit writes for every task carry only the
// indexes that a query or a conflict check needs, since each costs
// every insert a B-tree insert of its own: replicas only their lease
// (Replica, the compare-and-set), outcomes their (job, seq) and their
// (job, task) (an outcome for a task twice is a conflict), the ledger
// its seq and its peer's entries (PeerLedger's reads), its blocks their
// last seq and the blocks of a peer.
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
	for _, table := range []string{"replicas", "outcomes", "ledger", "ledger_batches", "ledger_blocks", "ledger_block_peers", "ledger_block_kinds"} {
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
		// Their primary keys, which are the tables (WITHOUT ROWID).
		"ledger_block_peers": {"sqlite_autoindex_ledger_block_peers_1"},
		"ledger_block_kinds": {"sqlite_autoindex_ledger_block_kinds_1"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("indexes (-want +got):\n%s", diff)
	}
}

// A scheduler on SQLite stores each group commit's ledger entries as one
// block, not as a row per entry: a job of 12 tasks at quorum 2 leaves no
// row of ledger and a block per decided task (each submission its own
// commit here), and its ledger reads back whole and verified, before and
// after a restart.
func TestDBSchedulerLedgerInBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	h := pooltest.NewHarness(t, db, nil)
	h.Reopen = func(old pool.Store) pool.Store {
		if err := old.(*store.DB).Close(); err != nil {
			t.Fatal(err)
		}
		db, err := store.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	alice := h.Device("alice", "alice-1")
	bob, carol := h.Device("bob", "bob-1"), h.Device("carol", "carol-1")
	const tasks = 12
	h.Job("blocks", tasks, pooltest.Policy{}, alice)
	for round := 0; len(h.Ledger()) < 2*tasks; round++ {
		if round == 100 {
			t.Fatalf("%d of %d entries after %d rounds", len(h.Ledger()), 2*tasks, round)
		}
		for _, dev := range []string{bob, carol} {
			for _, l := range h.Lease(dev, 4) {
				h.Submit(l, pooltest.Good(l.Task))
			}
		}
	}
	before := h.Ledger()
	if len(before) != 2*tasks {
		t.Fatalf("%d entries, want %d", len(before), 2*tasks)
	}
	h.Restart()
	if diff := cmp.Diff(before, h.Ledger()); diff != "" {
		t.Errorf("ledger after a restart (-before +after):\n%s", diff)
	}
	if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger`); n != 0 {
		t.Errorf("%d rows of ledger, want none", n)
	}
	if n := rawCount(t, path, `SELECT COUNT(*) FROM ledger_blocks`); n != tasks {
		t.Errorf("%d blocks, want %d (one per decided task)", n, tasks)
	}
	if n := rawCount(t, path, `SELECT SUM(last - first + 1) FROM ledger_blocks`); n != 2*tasks {
		t.Errorf("blocks hold %d entries, want %d", n, 2*tasks)
	}
}

// A block whose bytes were damaged on disk (cut short, a byte changed,
// bytes added) is refused when read, with an error wrapping ErrCorrupt,
// rather than read as other entries.
func TestDBLedgerBlockDamaged(t *testing.T) {
	ctx := context.Background()
	key := pooltest.Key(t, "coordinator")
	for _, tc := range []struct {
		name   string
		damage string
	}{
		{"cut short", `UPDATE ledger_blocks SET entries = substr(entries, 1, length(entries) - 3)`},
		{"a byte changed", `UPDATE ledger_blocks SET entries = CAST(substr(entries, 1, 20) || x'ff' || substr(entries, 22) AS BLOB)`},
		{"bytes added", `UPDATE ledger_blocks SET entries = CAST(entries || x'00' AS BLOB)`},
		{"another format", `UPDATE ledger_blocks SET entries = CAST(x'02' || substr(entries, 2) AS BLOB)`},
		{"a count that does not fit", `UPDATE ledger_blocks SET last = last + 1; UPDATE ledger_block_peers SET last = last + 1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "coordinator.db")
			db, err := store.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			entries := batchEntries(1, 4)
			pool.SignBatch(entries, job.Digest{}, key.Sign)
			if err := db.Commit(ctx, &pool.Batch{Entries: entries}); err != nil {
				t.Fatal(err)
			}
			db.Close()
			raw, err := sql.Open("sqlite", path)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := raw.Exec(tc.damage); err != nil {
				t.Fatal(err)
			}
			raw.Close()
			if db, err = store.Open(path); err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			for _, q := range []pool.EntryQuery{{Max: 10}, {Peer: "p1", Max: 10}} {
				if got, err := db.Entries(ctx, q); !errors.Is(err, store.ErrCorrupt) {
					t.Errorf("Entries(%+v) = %d entries, %v; want an error wrapping ErrCorrupt", q, len(got), err)
				}
			}
		})
	}
}
