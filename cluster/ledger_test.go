package cluster

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"idlepool/pool"
)

// signedHistory returns a history whose entries are signed as the
// scheduler signs them, committed to a reference MemStore too, and the
// key that checks them.
func signedHistory(t *testing.T) (*history, ed25519.PublicKey) {
	t.Helper()
	h, pub := newSignedHistory(t)
	h.ref = pool.NewMemStore()
	return h, pub
}

// ledgerBase returns the Seq up to which s's memory left the ledger to
// the archive, and how many entries it holds.
func ledgerBase(s *Store) (base, held uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	base, seq := s.mem.LedgerBase()
	return base, seq - base
}

// sameLedger fails the test unless s answers every ledger query and
// counts as ref, a MemStore that never archived, does, and the whole
// ledger read from s page by page (as ledger verify reads it) verifies
// from its first entry.
func sameLedger(t *testing.T, what string, ref *pool.MemStore, s *Store, key ed25519.PublicKey) {
	t.Helper()
	ctx := context.Background()
	_, last := ref.LedgerBase()
	peer := newHistory().peers[5].ID
	// Kept few: under the race detector each query that reads the
	// archive decodes ranges of 1,024 entries.
	for _, after := range []uint64{0, 1023, 2049, last - 1} {
		for _, who := range []string{"", peer, "nobody"} {
			for _, max := range []int{1, 10_000} {
				q := pool.EntryQuery{After: after, Max: max, Peer: who}
				want, err := ref.Entries(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				got, err := s.Entries(ctx, q)
				if err != nil {
					t.Fatalf("%s: Entries(%+v): %v", what, q, err)
				}
				// A cheap comparison first: cmp.Diff (and
				// reflect.DeepEqual) of thousands of entries, for each
				// query, took most of the test's time.
				if !sameEntries(want, got) {
					t.Fatalf("%s: Entries(%+v) (-never archived +store):\n%s", what, q, cmp.Diff(want, got))
				}
			}
		}
	}
	wc, _ := ref.CountEntries(ctx)
	gc, err := s.CountEntries(ctx)
	if err != nil || !cmp.Equal(wc, gc) {
		t.Fatalf("%s: CountEntries = %v, %v; want %v", what, gc, err, wc)
	}
	var all []pool.Entry
	for {
		page, err := s.Entries(ctx, pool.EntryQuery{After: uint64(len(all)), Max: 1000})
		if err != nil {
			t.Fatalf("%s: read the ledger after %d: %v", what, len(all), err)
		}
		all = append(all, page...)
		if len(page) < 1000 {
			break
		}
	}
	if uint64(len(all)) != last {
		t.Fatalf("%s: the ledger read page by page has %d entries, want %d", what, len(all), last)
	}
	if err := pool.VerifyLedger(all, key); err != nil {
		t.Fatalf("%s: the ledger read page by page: %v", what, err)
	}
}

// sameEntries reports whether a and b hold the same entries: the same
// signed encoding and the same Merkle proofs.
func sameEntries(a, b []pool.Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i].Canonical(true), b[i].Canonical(true)) || (a[i].Tree == nil) != (b[i].Tree == nil) {
			return false
		}
		if ta, tb := a[i].Tree, b[i].Tree; ta != nil && (ta.Size != tb.Size || ta.Index != tb.Index || !slices.Equal(ta.Path, tb.Path)) {
			return false
		}
	}
	return true
}

// A snapshot moves the ledger's older entries, in whole ranges, to the
// ledger archive: the writer's memory, the snapshot and a node that
// loads it hold only the newest, a node that follows the stream drops
// its own once the archive's mark covers them, and every one of them
// answers every ledger query and count exactly as a store that never
// archived, the whole ledger verifying from its first entry. The next
// snapshot moves only the ranges completed since.
func TestStoreArchivesLedger(t *testing.T) {
	t.Parallel()
	node, w := oneNodeStore(t)
	ctx := context.Background()
	h, key := signedHistory(t)
	h.write(t, w, 100, 50)
	follower := openStore(t, node, 1) // follows from here on
	if _, err := follower.Load(ctx); err != nil {
		t.Fatal(err)
	}
	follower.Release()
	h.write(t, w, 1300, 50) // 2,600 entries: two whole ranges
	sameLedger(t, "before the snapshot", h.ref, w, key)
	st, err := w.WriteSnapshot(ctx)
	if err != nil || st.Entries != 2*LedgerRange {
		t.Fatalf("snapshot: %+v, %v; want %d entries archived", st, err, 2*LedgerRange)
	}
	if base, held := ledgerBase(w); base != 2*LedgerRange || held != 2600-2*LedgerRange {
		t.Fatalf("the writer holds %d entries after %d, want %d after %d", held, base, 2600-2*LedgerRange, 2*LedgerRange)
	}
	sameLedger(t, "the writer", h.ref, w, key)
	h.write(t, w, 1400, 50) // a tail

	cold := openStore(t, node, 1)
	if _, err := cold.Load(ctx); err != nil {
		t.Fatalf("load from nothing: %v", err)
	}
	if base, held := ledgerBase(cold); cold.loads != 1 || base != 2*LedgerRange || held != 2800-2*LedgerRange {
		t.Fatalf("the cold store loaded %d snapshots and holds %d entries after %d, want 1 and %d after %d",
			cold.loads, held, base, 2800-2*LedgerRange, 2*LedgerRange)
	}
	sameLedger(t, "from the snapshot", h.ref, cold, key)
	if _, err := follower.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if base, _ := ledgerBase(follower); follower.loads != 0 || base != 2*LedgerRange {
		t.Fatalf("the follower loaded %d snapshots and forgot up to %d, want none and %d", follower.loads, base, 2*LedgerRange)
	}

	cold.Release()
	h.write(t, w, 1600, 50) // 3,200 entries: a third range
	st, err = w.WriteSnapshot(ctx)
	if err != nil || st.Entries != LedgerRange {
		t.Fatalf("second snapshot: %+v, %v; want the third range (%d entries) archived", st, err, LedgerRange)
	}
	// The cold store follows on and forgets the third range too.
	if _, err := cold.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if base, _ := ledgerBase(cold); base != 3*LedgerRange {
		t.Fatalf("the cold store forgot up to %d after following, want %d", base, 3*LedgerRange)
	}
	sameLedger(t, "cold, then followed", h.ref, cold, key)

	// A damaged range is an error that names it, whatever it holds.
	kv, err := node.JetStream().KeyValue(ctx, LedgerBucket)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{{0x80}, []byte("not CBOR"), {0x81, 0xa0}} { // [], junk, [{}]
		if _, err := kv.Put(ctx, rangeKey(0), bad); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Entries(ctx, pool.EntryQuery{Max: 10}); err == nil || !strings.Contains(err.Error(), "ledger range 0") {
			t.Fatalf("range 0 holding %x: %v, want an error naming it", bad, err)
		}
	}
}

// A ledger archive that does not answer leaves every entry in memory:
// the snapshot fails and is written again later, Entries and the counts
// answer as before meanwhile, and a node that follows keeps its entries
// while it cannot read the archive's mark.
func TestStoreLedgerArchiveDown(t *testing.T) {
	t.Parallel()
	node, w := oneNodeStore(t)
	ctx := context.Background()
	h, key := signedHistory(t)
	h.write(t, w, 1100, 50)
	if err := node.JetStream().DeleteKeyValue(ctx, LedgerBucket); err != nil {
		t.Fatal(err)
	}
	if st, err := w.WriteSnapshot(ctx); err == nil {
		t.Fatalf("snapshot without the ledger archive: %+v, no error", st)
	}
	if base, held := ledgerBase(w); base != 0 || held != 2200 {
		t.Fatalf("after a failed snapshot the writer holds %d entries after %d, want all 2200", held, base)
	}
	sameLedger(t, "after a failed snapshot", h.ref, w, key)
	if seqs, err := w.snaps.list(ctx); err != nil || len(seqs) != 0 {
		t.Fatalf("snapshots after a failed one: %v, %v; want none", seqs, err)
	}

	// The archive back (a store opened makes the bucket again): the
	// snapshot goes through.
	follower := openStore(t, node, 1)
	if _, err := follower.Load(ctx); err != nil {
		t.Fatal(err)
	}
	follower.Release()
	st, err := w.WriteSnapshot(ctx)
	if err != nil || st.Entries != 2*LedgerRange {
		t.Fatalf("snapshot once the archive is back: %+v, %v; want %d entries archived", st, err, 2*LedgerRange)
	}
	// A follower that cannot read the mark keeps what it holds.
	if err := node.JetStream().DeleteKeyValue(ctx, LedgerBucket); err != nil {
		t.Fatal(err)
	}
	h.write(t, w, 1200, 50)
	follower.mu.Lock()
	err = follower.catchUp(ctx)
	follower.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if base, held := ledgerBase(follower); base != 0 || held != 2400 {
		t.Fatalf("a follower without the archive's mark holds %d entries after %d, want all 2400", held, base)
	}
	if _, err := w.Entries(ctx, pool.EntryQuery{Max: 10}); !errors.Is(err, pool.ErrStoreUnavailable) {
		t.Fatalf("entries archived, archive gone: %v, want ErrStoreUnavailable", err)
	}
}

// A snapshot written before the ledger archive (format v2: every ledger
// entry, no counts) still loads and answers every query; the next
// snapshot, written by the node that loaded it, archives the ledger's
// whole ranges, and a node that loads that one answers the same.
func TestStoreLoadsSnapshotV2Ledger(t *testing.T) {
	t.Parallel()
	node, w := oneNodeStore(t)
	ctx := context.Background()
	h, key := signedHistory(t)
	h.write(t, w, 1100, 50)
	w.mu.Lock()
	seq := w.applied.Load()
	img, _ := w.mem.LiveImage(0)
	w.mu.Unlock()
	img.Kinds = nil // as v2 wrote it
	if err := w.snaps.writeFormat(ctx, seq, img, snapFormatV2); err != nil {
		t.Fatal(err)
	}
	w.Release()

	old := openStore(t, node, 1)
	if _, err := old.Load(ctx); err != nil {
		t.Fatalf("load a v2 snapshot: %v", err)
	}
	if base, held := ledgerBase(old); old.loads != 1 || base != 0 || held != 2200 {
		t.Fatalf("loaded %d snapshots, %d entries after %d; want 1, 2200 after 0", old.loads, held, base)
	}
	sameLedger(t, "v2 snapshot", h.ref, old, key)
	h.write(t, old, 1200, 50)
	st, err := old.WriteSnapshot(ctx)
	if err != nil || st.Entries != 2*LedgerRange {
		t.Fatalf("snapshot after a v2 one: %+v, %v; want %d entries archived", st, err, 2*LedgerRange)
	}
	old.Release()
	fresh := openStore(t, node, 1)
	if _, err := fresh.Load(ctx); err != nil {
		t.Fatalf("load the v3 snapshot: %v", err)
	}
	if base, _ := ledgerBase(fresh); base != 2*LedgerRange {
		t.Fatalf("the v3 snapshot left out the ledger up to %d, want %d", base, 2*LedgerRange)
	}
	sameLedger(t, "v3 snapshot", h.ref, fresh, key)
}

// BenchmarkLedgerArchivePut stores whole ranges of receipts (as a
// snapshot archives them, 1, 16 or 64 ranges at a time) in a one-node
// cluster's ledger archive, the entries naming 8 devices (as
// bench-cluster's agents) or 2,048 (a large pool, each range naming
// about a thousand); ns/op is per entry, the JetStream server's work
// included, and values/entry counts the values stored (the ranges and
// their index by device: one value per device and epoch a put names,
// and a device's summary where it names an epoch of it for the first
// time).
func BenchmarkLedgerArchivePut(b *testing.B) {
	for _, devices := range []int{8, 2048} {
		for _, per := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("devices-%d/ranges-%d", devices, per), func(b *testing.B) {
				_, s := oneNodeStore(b)
				ctx := context.Background()
				n := (b.N + LedgerRange - 1) / LedgerRange * LedgerRange
				es := make([]pool.Entry, n)
				for i := range es {
					es[i] = pool.Entry{Seq: uint64(i + 1), Kind: pool.KindReceipt, Peer: fmt.Sprintf("device-%04d", (i*7919)%devices),
						Owner: fmt.Sprintf("owner-%04d", (i*7919)%devices), Lease: fmt.Sprintf("%032x", i), Cost: 1, Time: int64(i), Sig: make([]byte, 64)}
				}
				values := 0
				var puts [][][]pool.Entry
				summarised := map[string]bool{} // device and epoch in its summary
				for i := 0; i < n; i += per * LedgerRange {
					var put [][]pool.Entry
					keys := map[string]bool{}
					for j := i; j < min(i+per*LedgerRange, n); j += LedgerRange {
						put = append(put, es[j:j+LedgerRange])
						for _, e := range es[j : j+LedgerRange] {
							key := indexKey(e.Peer, uint64(j/LedgerRange)/indexEpoch)
							keys[key] = true
							if !summarised[key] {
								summarised[key] = true
								keys["e."+key] = true
							}
						}
					}
					puts = append(puts, put)
					values += len(put) + len(keys)
				}
				b.ResetTimer()
				for _, put := range puts {
					if err := s.ledger.put(ctx, put, time.Minute); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(values)/float64(n), "values/entry")
			})
		}
	}
}
