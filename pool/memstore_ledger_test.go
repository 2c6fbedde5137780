package pool_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
	"idlepool/pool"
)

// ledgerBatches returns n batches of per chained ledger entries, after
// the entry (seq, head), naming five peers and every kind in turn.
func ledgerBatches(seq uint64, head job.Digest, n, per int) []*pool.Batch {
	kinds := []string{pool.KindReceipt, pool.KindReceipt, pool.KindDeviation, pool.KindUnverified}
	var out []*pool.Batch
	for range n {
		b := &pool.Batch{}
		for range per {
			seq++
			e := pool.Entry{Seq: seq, Prev: head, Kind: kinds[seq%4], Pool: "p", Task: int64(seq),
				Peer: fmt.Sprintf("peer-%d", seq%5), Lease: fmt.Sprintf("lease-%d", seq), Cost: 1, Sig: make([]byte, 64)}
			head = e.Hash()
			b.Entries = append(b.Entries, e)
		}
		out = append(out, b)
	}
	return out
}

// imageOf encodes and decodes img as a snapshot is stored and builds a
// MemStore from it.
func imageOf(t *testing.T, img *pool.MemImage) (*pool.MemStore, error) {
	t.Helper()
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(img); err != nil {
		t.Fatalf("encode image: %v", err)
	}
	var out pool.MemImage
	if err := gob.NewDecoder(&buf).Decode(&out); err != nil {
		t.Fatalf("decode image: %v", err)
	}
	return pool.NewMemStoreFrom(context.Background(), &out)
}

// sameEntries fails the test unless got answers every query as want
// does, where it can: queries after its LedgerBase get the same
// entries, the others ErrEntriesArchived; and counts the same.
func sameEntries(t *testing.T, what string, want, got *pool.MemStore) {
	t.Helper()
	ctx := context.Background()
	base, _ := got.LedgerBase()
	wantSeq, wantHead := mustLoad(t, want)
	if seq, head := mustLoad(t, got); seq != wantSeq || head != wantHead {
		t.Fatalf("%s: head %d %s, want %d %s", what, seq, head, wantSeq, wantHead)
	}
	for _, after := range []uint64{0, 127, 128, 129, 255, 256, 299, 300} {
		for _, peer := range []string{"", "peer-3", "nobody"} {
			for _, max := range []int{1, 7, 1000} {
				q := pool.EntryQuery{After: after, Max: max, Peer: peer}
				es, err := got.Entries(ctx, q)
				if after < base {
					if !errors.Is(err, pool.ErrEntriesArchived) {
						t.Fatalf("%s: Entries(%+v) = %d entries, %v; want ErrEntriesArchived (base %d)", what, q, len(es), err, base)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: Entries(%+v): %v", what, q, err)
				}
				ref, _ := want.Entries(ctx, q)
				// reflect.DeepEqual first: cmp.Diff for every query took
				// seconds under the race detector.
				if !reflect.DeepEqual(ref, es) {
					t.Fatalf("%s: Entries(%+v) (-never forgot +forgot):\n%s", what, q, cmp.Diff(ref, es))
				}
			}
		}
	}
	wc, _ := want.CountEntries(ctx)
	gc, err := got.CountEntries(ctx)
	if err != nil || !cmp.Equal(wc, gc) {
		t.Fatalf("%s: CountEntries = %v, %v; want %v", what, gc, err, wc)
	}
}

func mustLoad(t *testing.T, m *pool.MemStore) (uint64, job.Digest) {
	t.Helper()
	s, err := m.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.LedgerSeq, s.LedgerHash
}

// A MemStore that forgot the ledger's oldest entries answers every
// query after them, counts, and chains new entries exactly as one that
// never forgot; an image that leaves them out (LiveImage) rebuilds such
// a MemStore, even one that holds no entry; an image without counts
// (written before they existed) still loads.
func TestMemStoreForgetEntries(t *testing.T) {
	ctx := context.Background()
	full, m := pool.NewMemStore(), pool.NewMemStore()
	for _, b := range ledgerBatches(0, job.Digest{}, 10, 30) {
		for _, s := range []*pool.MemStore{full, m} {
			if err := s.Commit(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	sameEntries(t, "nothing forgotten", full, m)
	if n, err := m.ForgetEntries(128); n != 128 || err != nil {
		t.Fatalf("ForgetEntries(128) = %d, %v", n, err)
	}
	if n, err := m.ForgetEntries(100); n != 0 || err != nil {
		t.Fatalf("ForgetEntries(100) after 128 = %d, %v; want nothing", n, err)
	}
	if _, err := m.ForgetEntries(301); err == nil {
		t.Fatal("ForgetEntries past the ledger's end: no error")
	}
	sameEntries(t, "forgot up to 128", full, m)
	if es := slices.Concat(m.LedgerBlocks(100, 140)...); len(es) != 12 || es[0].Seq != 129 {
		t.Fatalf("LedgerBlocks(100, 140) = %d entries from %v, want 12 from 129", len(es), es)
	}

	img, _ := m.LiveImage(256)
	if img.LedgerBase != 256 || len(img.Ledger) != 44 {
		t.Fatalf("LiveImage(256): base %d, %d entries; want 256, 44", img.LedgerBase, len(img.Ledger))
	}
	cold, err := imageOf(t, img)
	if err != nil {
		t.Fatalf("image without the entries up to 256: %v", err)
	}
	sameEntries(t, "image from 256", full, cold)
	all, _ := m.LiveImage(300)
	empty, err := imageOf(t, all)
	if err != nil {
		t.Fatalf("image without any entry: %v", err)
	}
	sameEntries(t, "image from 300", full, empty)
	// The chain goes on from the head, whatever is forgotten.
	seq, head := mustLoad(t, full)
	for _, b := range ledgerBatches(seq, head, 2, 30) {
		for _, s := range []*pool.MemStore{full, m, cold, empty} {
			if err := s.Commit(ctx, b); err != nil {
				t.Fatalf("commit after forgetting: %v", err)
			}
		}
	}
	for name, s := range map[string]*pool.MemStore{"forgot": m, "image from 256": cold, "image from 300": empty} {
		sameEntries(t, name+", then committed", full, s)
	}
	if err := empty.Commit(ctx, ledgerBatches(seq, head, 1, 1)[0]); !errors.Is(err, pool.ErrConflict) {
		t.Fatalf("an entry that does not follow the head: %v, want ErrConflict", err)
	}

	// An image as written before LedgerBase and Kinds: every entry, no
	// counts.
	old := full.Image()
	old.LedgerBase, old.Kinds = 0, nil
	loaded, err := imageOf(t, old)
	if err != nil {
		t.Fatalf("an image without counts: %v", err)
	}
	sameEntries(t, "old image", full, loaded)
	bad, _ := m.LiveImage(256)
	bad.Kinds = nil
	if _, err := imageOf(t, bad); !errors.Is(err, pool.ErrConflict) {
		t.Fatalf("an image that leaves entries out without counts: %v, want ErrConflict", err)
	}
	bad, _ = m.LiveImage(256)
	bad.Kinds[pool.KindReceipt]++
	if _, err := imageOf(t, bad); !errors.Is(err, pool.ErrConflict) {
		t.Fatalf("an image whose counts do not add up: %v, want ErrConflict", err)
	}
}

// A MemStore keeps its ledger in blocks of EntryBlock entries aligned on
// Seq: LedgerBlocks hands whole blocks over for whole ranges, and a
// part of a block at either end; forgetting up to a Seq inside a block,
// an image taken across blocks, and the image's store going on
// committing keep every entry as one that never forgot.
func TestMemStoreLedgerBlocks(t *testing.T) {
	ctx := context.Background()
	full, m := pool.NewMemStore(), pool.NewMemStore()
	for _, b := range ledgerBatches(0, job.Digest{}, 100, 30) { // 3,000 entries, 3 blocks
		for _, s := range []*pool.MemStore{full, m} {
			if err := s.Commit(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	blocks := m.LedgerBlocks(pool.EntryBlock, 2*pool.EntryBlock)
	if len(blocks) != 1 || len(blocks[0]) != pool.EntryBlock || blocks[0][0].Seq != pool.EntryBlock+1 {
		t.Fatalf("LedgerBlocks of the second block: %d pieces", len(blocks))
	}
	if _, err := m.ForgetEntries(1500); err != nil {
		t.Fatal(err)
	}
	pieces := m.LedgerBlocks(0, 3000)
	var seqs []uint64
	for _, p := range pieces {
		if (p[0].Seq-1)/pool.EntryBlock != (p[len(p)-1].Seq-1)/pool.EntryBlock {
			t.Fatalf("a piece from %d to %d spans two blocks", p[0].Seq, p[len(p)-1].Seq)
		}
		for _, e := range p {
			seqs = append(seqs, e.Seq)
		}
	}
	if len(pieces) != 2 || len(seqs) != 1500 || seqs[0] != 1501 || seqs[len(seqs)-1] != 3000 {
		t.Fatalf("LedgerBlocks after forgetting up to 1500: %d pieces, %d entries", len(pieces), len(seqs))
	}
	sameEntries(t, "forgot up to 1500", full, m)
	img, _ := m.LiveImage(1700) // an image across the third block's start
	cold, err := imageOf(t, img)
	if err != nil {
		t.Fatal(err)
	}
	sameEntries(t, "image from 1700", full, cold)
	seq, head := mustLoad(t, full)
	for _, b := range ledgerBatches(seq, head, 60, 30) { // into a fourth block and a fifth
		for _, s := range []*pool.MemStore{full, m, cold} {
			if err := s.Commit(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
	}
	sameEntries(t, "forgot, then committed", full, m)
	sameEntries(t, "image, then committed", full, cold)
	if _, err := cold.ForgetEntries(4096); err != nil {
		t.Fatal(err)
	}
	sameEntries(t, "image, committed, forgot up to 4096", full, cold)
	if p := cold.LedgerBlocks(4096, 8192); len(p) != 1 || p[0][0].Seq != 4097 || len(p[0]) != 4800-4096 {
		t.Fatalf("LedgerBlocks of the last block: %d pieces", len(p))
	}
}
