package store_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
	"idlepool/store"
)

// peerLedger is a signed ledger of batches whose entries name peers
// p0 to p5 at random, committed one batch at a time.
type peerLedger struct {
	key  func([]byte) []byte
	rng  *rand.Rand
	prev job.Digest
	all  []pool.Entry
	// kinds gives each entry a kind at random, not a receipt's.
	kinds bool
}

// next returns the next batch of n entries, signed whole.
func (l *peerLedger) next(n int) []pool.Entry {
	b := batchEntries(uint64(len(l.all))+1, n)
	for i := range b {
		b[i].Peer = fmt.Sprint("p", l.rng.IntN(6))
		if l.kinds {
			b[i].Kind = []string{pool.KindReceipt, pool.KindDeviation, pool.KindUnverified}[l.rng.IntN(3)]
		}
	}
	l.prev = pool.SignBatch(b, l.prev, l.key)
	l.all = append(l.all, b...)
	return b
}

// openAt opens the coordinator database at path, failing the test if it
// cannot; the caller closes it.
func openAt(t *testing.T, path string) *store.DB {
	t.Helper()
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// of returns the entries of l naming peer with Seq > after, at most max.
func (l *peerLedger) of(peer string, after uint64, max int) []pool.Entry {
	var out []pool.Entry
	for _, e := range l.all {
		if e.Peer == peer && e.Seq > after && len(out) < max {
			out = append(out, e)
		}
	}
	return out
}

// A peer's entries read the same whether their blocks are listed in
// ledger_block_peers or only in memory, across the bursts that write the
// list and across restarts that rebuild the memory's part; the table is
// written only in bursts.
func TestBlockPeersBursts(t *testing.T) {
	ctx := context.Background()
	store.SetBlockPeersFlush(t, 12)
	path := filepath.Join(t.TempDir(), "coordinator.db")
	open := func() *store.DB { return openAt(t, path) }
	db := open()
	defer func() { db.Close() }()
	l := &peerLedger{key: pooltest.Key(t, "coordinator").Sign, rng: rand.New(rand.NewPCG(1, 2))}
	opts := cmp.Options{cmp.Comparer(func(a, b job.Digest) bool { return a == b })}
	check := func(when string) {
		t.Helper()
		n := uint64(len(l.all))
		for p := range 7 { // p6 names no entry
			peer := fmt.Sprint("p", p)
			for _, q := range []pool.EntryQuery{{Max: 1000}, {After: n / 3, Max: 1000}, {After: n - 5, Max: 1000}, {After: n / 2, Max: 3}} {
				q.Peer = peer
				got, err := db.Entries(ctx, q)
				if err != nil {
					t.Fatalf("%s: Entries(%+v): %v", when, q, err)
				}
				// reflect.DeepEqual first: cmp's reflection on each of
				// the 1,680 reads took a quarter of the test's time.
				if want := l.of(peer, q.After, q.Max); !reflect.DeepEqual(want, got) {
					t.Fatalf("%s: Entries(%+v) (-want +got):\n%s", when, q, cmp.Diff(want, got, opts))
				}
			}
		}
	}
	rowsBefore := 0
	bursts := 0
	for i := range 60 {
		if err := db.Commit(ctx, &pool.Batch{Entries: l.next(1 + i%4)}); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if rows := rawCount(t, path, `SELECT COUNT(*) FROM ledger_block_peers`); rows != rowsBefore {
			bursts++
			if rows-rowsBefore < 12 {
				t.Errorf("commit %d wrote %d rows of ledger_block_peers, want a burst of 12 or more", i, rows-rowsBefore)
			}
			rowsBefore = rows
		}
		check(fmt.Sprintf("after commit %d", i))
		if i%7 == 6 {
			db.Close()
			db = open()
			check(fmt.Sprintf("after a restart at commit %d", i))
		}
	}
	if bursts < 5 {
		t.Errorf("%d bursts in 60 commits, want at least 5", bursts)
	}
}

// The ledger's entries counted by kind (CountEntries) are right after
// every commit and every restart, whether ledger_block_kinds counts their
// blocks or only the memory does, and the table is written only in the
// peers' bursts. A database that migration 0013 found with every block
// counted, its kinds' upto above the peers' upto, counts none twice.
func TestBlockKindsBursts(t *testing.T) {
	ctx := context.Background()
	store.SetBlockPeersFlush(t, 1000)
	path := filepath.Join(t.TempDir(), "coordinator.db")
	open := func() *store.DB { return openAt(t, path) }
	db := open()
	defer func() { db.Close() }()
	l := &peerLedger{key: pooltest.Key(t, "coordinator").Sign, rng: rand.New(rand.NewPCG(7, 8)), kinds: true}
	want := func() map[string]uint64 {
		n := map[string]uint64{}
		for _, e := range l.all {
			n[e.Kind]++
		}
		return n
	}
	check := func(when string) {
		t.Helper()
		got, err := db.CountEntries(ctx)
		if err != nil {
			t.Fatalf("%s: CountEntries: %v", when, err)
		}
		if diff := cmp.Diff(want(), got); diff != "" {
			t.Fatalf("%s: CountEntries (-want +got):\n%s", when, diff)
		}
	}
	for i := range 5 {
		if err := db.Commit(ctx, &pool.Batch{Entries: l.next(2 + i%3)}); err != nil {
			t.Fatal(err)
		}
	}
	check("before a burst")
	db.Close()
	// What migration 0013 leaves of a database the code before it
	// wrote: every block counted in ledger_block_kinds, as each commit
	// counted its block, and the kinds' upto at the newest block.
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`DELETE FROM ledger_block_kinds`); err != nil {
		t.Fatal(err)
	}
	for kind, n := range want() {
		if _, err := raw.Exec(`INSERT INTO ledger_block_kinds(kind, count) VALUES (?, ?)`, kind, n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := raw.Exec(`UPDATE ledger_block_kinds_upto SET upto = (SELECT max(last) FROM ledger_blocks)`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db = open()
	check("after the migration's state")
	store.SetBlockPeersFlush(t, 12)
	counted := rawCount(t, path, `SELECT coalesce(sum(count), 0) FROM ledger_block_kinds`)
	bursts := 0
	for i := range 40 {
		before := rawCount(t, path, `SELECT count(*) FROM ledger_block_peers`)
		if err := db.Commit(ctx, &pool.Batch{Entries: l.next(1 + i%4)}); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		burst := rawCount(t, path, `SELECT count(*) FROM ledger_block_peers`) != before
		if n := rawCount(t, path, `SELECT coalesce(sum(count), 0) FROM ledger_block_kinds`); burst {
			bursts++
			if n != len(l.all) {
				t.Fatalf("commit %d: a burst left ledger_block_kinds counting %d entries, want all %d", i, n, len(l.all))
			}
			counted = n
		} else if n != counted {
			t.Fatalf("commit %d, no burst: ledger_block_kinds went from %d entries to %d", i, counted, n)
		}
		check(fmt.Sprintf("after commit %d", i))
		if i%7 == 6 {
			db.Close()
			db = open()
			check(fmt.Sprintf("after a restart at commit %d", i))
		}
	}
	if bursts < 3 {
		t.Errorf("%d bursts in 40 commits, want at least 3", bursts)
	}
	// A second handle's commit is in neither handle's memory of the
	// other: the first counts it by decoding the blocks after upto.
	other := openAt(t, path)
	defer other.Close()
	if err := other.Commit(ctx, &pool.Batch{Entries: l.next(3)}); err != nil {
		t.Fatal(err)
	}
	check("after another handle's commit")
}

// Reads of a peer's entries while commits write ledger_block_peers in
// bursts see, each, the peer's entries of some prefix of the commits:
// never one with a gap (a block in neither the table the read sees nor
// the memory it reads).
func TestBlockPeersReadWhileWriting(t *testing.T) {
	ctx := context.Background()
	store.SetBlockPeersFlush(t, 3)
	db, err := store.Open(filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l := &peerLedger{key: pooltest.Key(t, "coordinator").Sign, rng: rand.New(rand.NewPCG(3, 4))}
	var batches [][]pool.Entry
	for range 200 {
		batches = append(batches, l.next(2))
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		for i, b := range batches {
			if err := db.Commit(ctx, &pool.Batch{Entries: b}); err != nil {
				t.Errorf("commit %d: %v", i, err)
				return
			}
		}
	})
	reads := 0
	for stop := false; !stop; reads++ {
		select {
		case <-done:
			stop = true
		default:
		}
		peer := fmt.Sprint("p", reads%6)
		got, err := db.Entries(ctx, pool.EntryQuery{Peer: peer, Max: 10000})
		if err != nil {
			t.Fatalf("read %d: %v", reads, err)
		}
		want := l.of(peer, 0, 10000)
		if len(got) > len(want) {
			t.Fatalf("read %d: %d entries of %s, more than the %d committed", reads, len(got), peer, len(want))
		}
		for i := range got {
			if got[i].Seq != want[i].Seq {
				t.Fatalf("read %d: entry %d of %s is seq %d, want %d: a gap", reads, i, peer, got[i].Seq, want[i].Seq)
			}
		}
	}
	wg.Wait()
	t.Logf("%d reads beside 200 commits", reads)
}

// A read of a peer's entries during which a commit writes the list (after
// the read's transaction saw the table's upto, before it read the
// memory's list) reads again: the blocks the burst listed are in neither
// the table as that transaction sees it nor the memory any more.
func TestBlockPeersBurstDuringRead(t *testing.T) {
	ctx := context.Background()
	store.SetBlockPeersFlush(t, 4)
	db, err := store.Open(filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l := &peerLedger{key: pooltest.Key(t, "coordinator").Sign, rng: rand.New(rand.NewPCG(7, 8))}
	for range 5 { // some blocks listed in the table, some in memory
		if err := db.Commit(ctx, &pool.Batch{Entries: l.next(1)}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]pool.Entry{}
	for p := range 6 {
		want[fmt.Sprint("p", p)] = l.of(fmt.Sprint("p", p), 0, 100)
	}
	store.SetBlockPeersFlush(t, 1) // the hook's commit writes the list
	for p := range 6 {
		peer := fmt.Sprint("p", p)
		calls := 0
		store.SetBeforePeerTail(t, func() {
			calls++
			if calls > 1 {
				return
			}
			// Enough pairs to write the list.
			if err := db.Commit(ctx, &pool.Batch{Entries: l.next(8)}); err != nil {
				t.Error(err)
			}
		})
		got, err := db.Entries(ctx, pool.EntryQuery{Peer: peer, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		if calls < 2 {
			t.Errorf("%s: read once: want a second read after the burst", peer)
		}
		if len(got) < len(want[peer]) || !cmp.Equal(seqs(got[:len(want[peer])]), seqs(want[peer])) {
			t.Errorf("%s: entries %v, want %v first", peer, seqs(got), seqs(want[peer]))
		}
		for p := range 6 {
			want[fmt.Sprint("p", p)] = l.of(fmt.Sprint("p", p), 0, 100)
		}
	}
}

// seqs returns the Seqs of es.
func seqs(es []pool.Entry) []uint64 {
	out := []uint64{}
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

// A block damaged on disk among those only in memory at a restart is
// read for every peer, so that a peer's read fails with ErrCorrupt (as
// it did before the list was written in bursts) instead of leaving its
// entries out; still so once a burst has written the list past it, and
// after another restart.
func TestBlockPeersDamagedTail(t *testing.T) {
	ctx := context.Background()
	store.SetBlockPeersFlush(t, 1000)
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	l := &peerLedger{key: pooltest.Key(t, "coordinator").Sign, rng: rand.New(rand.NewPCG(5, 6))}
	for range 3 {
		if err := db.Commit(ctx, &pool.Batch{Entries: l.next(3)}); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE ledger_blocks SET entries = substr(entries, 1, length(entries) - 3) WHERE last = 6`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	reads := func(when string) {
		t.Helper()
		for p := range 6 {
			q := pool.EntryQuery{Peer: fmt.Sprint("p", p), Max: 100}
			if got, err := db.Entries(ctx, q); !errors.Is(err, store.ErrCorrupt) {
				t.Errorf("%s: Entries(%+v) = %d entries, %v; want ErrCorrupt", when, q, len(got), err)
			}
			q.After = 6
			if got, err := db.Entries(ctx, q); err != nil || !cmp.Equal(len(got), len(l.of(q.Peer, 6, 100))) {
				t.Errorf("%s: Entries(%+v) past the damaged block = %d entries, %v; want %d", when, q, len(got), err, len(l.of(q.Peer, 6, 100)))
			}
		}
	}
	if db, err = store.Open(path); err != nil {
		t.Fatalf("Open with a damaged block among the newest: %v", err)
	}
	reads("after the restart")
	// The damaged block's entries are not counted, the others are.
	counts := func(when string) {
		t.Helper()
		n, err := db.CountEntries(ctx)
		if err != nil {
			t.Fatalf("%s: CountEntries: %v", when, err)
		}
		if n[pool.KindReceipt] != uint64(len(l.all)-3) {
			t.Errorf("%s: CountEntries = %v, want %d receipts: all but the damaged block's 3", when, n, len(l.all)-3)
		}
	}
	counts("after the restart")
	store.SetBlockPeersFlush(t, 1)
	if err := db.Commit(ctx, &pool.Batch{Entries: l.next(3)}); err != nil {
		t.Fatal(err)
	}
	reads("after a burst")
	counts("after a burst")
	db.Close()
	if db, err = store.Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reads("after a burst and a restart")
	counts("after a burst and a restart")
}

// A block that also names the empty peer (which the list uses for a
// damaged block, read for every peer) is read once, not twice.
func TestBlockPeersEmptyPeerOnce(t *testing.T) {
	ctx := context.Background()
	for _, flush := range []int{1, 1000} { // in the table, in memory
		t.Run(fmt.Sprint("flush ", flush), func(t *testing.T) {
			store.SetBlockPeersFlush(t, flush)
			db, err := store.Open(filepath.Join(t.TempDir(), "coordinator.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			es := batchEntries(1, 2)
			es[0].Peer, es[1].Peer = "p1", ""
			pool.SignBatch(es, job.Digest{}, pooltest.Key(t, "coordinator").Sign)
			if err := db.Commit(ctx, &pool.Batch{Entries: es}); err != nil {
				t.Fatal(err)
			}
			got, err := db.Entries(ctx, pool.EntryQuery{Peer: "p1", Max: 10})
			if err != nil || !cmp.Equal(seqs(got), []uint64{1}) {
				t.Errorf("Entries(p1) = %v, %v; want [1]", seqs(got), err)
			}
		})
	}
}

// A read just before a commit's transaction commits (the memory already
// lists its block) and one just after see none or all of a commit that
// holds a block and then a row of the same peer: never the row without
// the block, which a reader paging from the row's seq would skip.
func TestBlockPeersReadAtCommit(t *testing.T) {
	ctx := context.Background()
	db, err := store.Open(filepath.Join(t.TempDir(), "coordinator.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	key := pooltest.Key(t, "coordinator").Sign
	a, b := batchEntries(1, 2), batchEntries(3, 2)
	for i := range a {
		a[i].Peer, b[i].Peer = "p0", "p0"
	}
	pool.SignBatch(b, pool.SignBatch(a, job.Digest{}, key), key)
	got := map[bool][]uint64{}
	store.SetCommitSeam(t, func(committed bool) {
		es, err := db.Entries(ctx, pool.EntryQuery{Peer: "p0", Max: 10})
		if err != nil {
			t.Error(err)
		}
		got[committed] = seqs(es)
	})
	if err := db.Commit(ctx, &pool.Batch{Entries: append(a, b[:1]...)}); err != nil {
		t.Fatal(err)
	}
	if want := map[bool][]uint64{false: {}, true: {1, 2, 3}}; !cmp.Equal(got, want) {
		t.Errorf("reads before and after the commit: %v, want %v", got, want)
	}
}

// A second DB on the same file (another process) does not see the
// first's list in memory: its reads of a peer's entries see what is
// committed all the same, and end, before and after the first writes
// the list to the table.
func TestBlockPeersSecondHandle(t *testing.T) {
	ctx := context.Background()
	store.SetBlockPeersFlush(t, 1000)
	path := filepath.Join(t.TempDir(), "coordinator.db")
	d1, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d1.Close()
	d2, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	l := &peerLedger{key: pooltest.Key(t, "coordinator").Sign, rng: rand.New(rand.NewPCG(9, 10))}
	for i := range 6 {
		if i == 3 {
			store.SetBlockPeersFlush(t, 1)
		}
		if err := d1.Commit(ctx, &pool.Batch{Entries: l.next(3)}); err != nil {
			t.Fatal(err)
		}
		for p := range 6 {
			peer := fmt.Sprint("p", p)
			got, err := d2.Entries(ctx, pool.EntryQuery{Peer: peer, Max: 100})
			if err != nil || !cmp.Equal(seqs(got), seqs(l.of(peer, 0, 100))) {
				t.Errorf("commit %d: second handle's Entries(%s) = %v, %v; want %v", i, peer, seqs(got), err, seqs(l.of(peer, 0, 100)))
			}
		}
	}
}

// A block among the newest whose bytes were changed so that they still
// decode, but naming another peer, fails its hash check when the list is
// rebuilt at Open: it is listed for every peer, and reading it fails with
// ErrCorrupt rather than filing the entry under the wrong peer.
func TestBlockPeersDamagedPeerName(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "coordinator.db")
	db, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	es := batchEntries(1, 3) // peers p1, p2, p0
	pool.SignBatch(es, job.Digest{}, pooltest.Key(t, "coordinator").Sign)
	if err := db.Commit(ctx, &pool.Batch{Entries: es}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var blob []byte
	if err := raw.QueryRow(`SELECT entries FROM ledger_blocks WHERE last = 3`).Scan(&blob); err != nil {
		t.Fatal(err)
	}
	blob = bytes.Replace(blob, []byte("\x02p1"), []byte("\x02p9"), 1)
	if _, err := raw.Exec(`UPDATE ledger_blocks SET entries = ? WHERE last = 3`, blob); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	if db, err = store.Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, peer := range []string{"p1", "p9"} {
		if got, err := db.Entries(ctx, pool.EntryQuery{Peer: peer, Max: 10}); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("Entries(%s) after its block's peer was changed = %v, %v; want ErrCorrupt", peer, seqs(got), err)
		}
	}
}
