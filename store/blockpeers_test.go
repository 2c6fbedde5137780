package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
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
}

// next returns the next batch of n entries, signed whole.
func (l *peerLedger) next(n int) []pool.Entry {
	b := batchEntries(uint64(len(l.all))+1, n)
	for i := range b {
		b[i].Peer = fmt.Sprint("p", l.rng.IntN(6))
	}
	l.prev = pool.SignBatch(b, l.prev, l.key)
	l.all = append(l.all, b...)
	return b
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
	open := func() *store.DB {
		t.Helper()
		db, err := store.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		return db
	}
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
				if diff := cmp.Diff(l.of(peer, q.After, q.Max), got, opts); diff != "" {
					t.Fatalf("%s: Entries(%+v) (-want +got):\n%s", when, q, diff)
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
	store.SetBlockPeersFlush(t, 1)
	if err := db.Commit(ctx, &pool.Batch{Entries: l.next(3)}); err != nil {
		t.Fatal(err)
	}
	reads("after a burst")
	db.Close()
	if db, err = store.Open(path); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	reads("after a burst and a restart")
}
