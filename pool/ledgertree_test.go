package pool_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"

	"idlepool/identity"
	"idlepool/job"
	"idlepool/pool"
	"idlepool/pool/pooltest"
)

// treeEntries returns n receipts numbered from first, not yet signed.
func treeEntries(first uint64, n int) []pool.Entry {
	jobID := job.ID(sha256.Sum256([]byte("tree job")))
	out := make([]pool.Entry, n)
	for i := range out {
		out[i] = pool.Entry{Seq: first + uint64(i), Kind: pool.KindReceipt, Pool: "tree", Job: jobID, Task: int64(i),
			Peer: fmt.Sprint("peer-", i%3), Owner: fmt.Sprint("owner-", i%3), Lease: fmt.Sprint("lease-", first+uint64(i)),
			Cost: 0.5, Work: uint64(1000 + i), Time: 1_767_000_000_000}
	}
	return out
}

// signAlone signs entries one by one, chained after prev, as every entry
// was signed before batches were: returns the last one's Hash.
func signAlone(entries []pool.Entry, prev job.Digest, sign func([]byte) []byte) job.Digest {
	for i := range entries {
		entries[i].Prev = prev
		entries[i].Sig = sign(entries[i].Canonical(false))
		prev = entries[i].Hash()
	}
	return prev
}

// A batch's one signature covers each of its entries through an RFC 9162
// inclusion proof: the tree's root and every path are those of the
// reference implementation, each entry verifies on its own, and the
// batch's entries share one signature. TreeProofs rebuilds the same
// proofs from the entries' hashes.
func TestSignBatchMatchesRFC9162(t *testing.T) {
	key := pooltest.Key(t, "coordinator")
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 9, 16, 31, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			es := treeEntries(1, n)
			signs := 0
			sign := func(b []byte) []byte { signs++; return key.Sign(b) }
			last := pool.SignBatch(es, job.Digest{}, sign)
			if signs != 1 {
				t.Errorf("%d signatures for a batch of %d, want 1", signs, n)
			}
			ref := testonly.New(rfc6962.DefaultHasher)
			for _, e := range es {
				ref.AppendData(e.Canonical(false))
			}
			var root job.Digest
			copy(root[:], ref.Hash())
			if identity.Verify(key.Public(), pool.TreeHead{Size: uint64(n), Root: root}.Canonical(), es[0].Sig) != nil {
				t.Fatalf("the signature is not over the reference tree's head")
			}
			for i, e := range es {
				if e.Tree == nil || e.Tree.Size != uint64(n) || e.Tree.Index != uint64(i) {
					t.Fatalf("entry %d: tree %+v", i, e.Tree)
				}
				want, err := ref.InclusionProof(uint64(i), uint64(n))
				if err != nil {
					t.Fatal(err)
				}
				var got [][]byte
				for _, d := range e.Tree.Path {
					got = append(got, bytes.Clone(d[:]))
				}
				if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("entry %d: path (-reference +got):\n%s", i, diff)
				}
				if err := pool.VerifyEntry(e, key.Public()); err != nil {
					t.Errorf("VerifyEntry %d: %v", i, err)
				}
			}
			if err := pool.VerifyLedger(es, key.Public()); err != nil {
				t.Fatalf("VerifyLedger: %v", err)
			}
			leaves := make([]job.Digest, n)
			for i, e := range es {
				leaves[i] = e.Hash()
			}
			proofs := pool.TreeProofs(leaves)
			for i, e := range es {
				if diff := cmp.Diff(*e.Tree, proofs[i]); diff != "" {
					t.Errorf("entry %d: TreeProofs from the leaf hashes (-signed +rebuilt):\n%s", i, diff)
				}
			}
			if last != es[n-1].Hash() || last != es[n-1].LeafHash() {
				t.Errorf("SignBatch returned %s, want the last entry's leaf hash %s", last, es[n-1].LeafHash())
			}
		})
	}
}

// A ledger whose first entries were signed one by one, as before
// batches, and whose later entries were signed batch by batch verifies
// as a whole and entry by entry, in memory and through JSON; tampering
// with a batched entry, its proof or its signature is found.
func TestLedgerOldAndBatchedEntries(t *testing.T) {
	key, forger := pooltest.Key(t, "coordinator"), pooltest.Key(t, "forger")
	es := treeEntries(1, 12)
	prev := signAlone(es[:3], job.Digest{}, key.Sign)
	prev = pool.SignBatch(es[3:8], prev, key.Sign)
	pool.SignBatch(es[8:], prev, key.Sign)
	for i, e := range es {
		if (e.Tree != nil) != (i >= 3) {
			t.Fatalf("entry %d: tree %+v", i+1, e.Tree)
		}
	}
	clone := func() []pool.Entry {
		out := make([]pool.Entry, len(es))
		for i, e := range es {
			e.Sig = bytes.Clone(e.Sig)
			if e.Tree != nil {
				tr := *e.Tree
				tr.Path = append([]job.Digest(nil), tr.Path...)
				e.Tree = &tr
			}
			out[i] = e
		}
		return out
	}
	tests := []struct {
		name    string
		tamper  func([]pool.Entry) []pool.Entry
		wantSeq uint64 // 0: verifies
	}{
		{"untouched", func(l []pool.Entry) []pool.Entry { return l }, 0},
		{"old entries alone", func(l []pool.Entry) []pool.Entry { return l[:3] }, 0},
		{"raised cost in a batch", func(l []pool.Entry) []pool.Entry { l[5].Cost = 9; l[6].Prev = l[5].Hash(); return l }, 6},
		{"other peer in a batch", func(l []pool.Entry) []pool.Entry { l[9].Peer = "thief"; l[10].Prev = l[9].Hash(); return l }, 10},
		{"flipped path byte", func(l []pool.Entry) []pool.Entry { l[4].Tree.Path[0][3] ^= 1; return l }, 5},
		{"shortened path", func(l []pool.Entry) []pool.Entry { l[4].Tree.Path = l[4].Tree.Path[:1]; return l }, 5},
		{"other index", func(l []pool.Entry) []pool.Entry { l[4].Tree.Index = 0; return l }, 5},
		{"index past the size", func(l []pool.Entry) []pool.Entry { l[4].Tree.Index = 9; return l }, 5},
		{"flipped signature byte", func(l []pool.Entry) []pool.Entry { l[7].Sig[3] ^= 1; return l }, 8},
		{"proof removed", func(l []pool.Entry) []pool.Entry { l[3].Tree = nil; return l }, 4},
		{"forged batch", func(l []pool.Entry) []pool.Entry {
			pool.SignBatch(l[8:], l[7].Hash(), forger.Sign)
			return l
		}, 9},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// An EntryVerifier that has seen every batch's head, from the
			// untouched entries, judges each entry as VerifyEntry does: a
			// remembered head lets through only entries whose proof leads
			// to it.
			v := pool.NewEntryVerifier(key.Public())
			for _, e := range es {
				if err := v.Verify(e); err != nil {
					t.Fatalf("EntryVerifier, untouched entry %d: %v", e.Seq, err)
				}
			}
			for _, e := range tc.tamper(clone()) {
				want, got := pool.VerifyEntry(e, key.Public()), v.Verify(e)
				if (want == nil) != (got == nil) {
					t.Errorf("entry %d: EntryVerifier says %v, VerifyEntry %v", e.Seq, got, want)
				}
			}
			err := pool.VerifyLedger(tc.tamper(clone()), key.Public())
			if tc.wantSeq == 0 {
				if err != nil {
					t.Fatalf("VerifyLedger: %v", err)
				}
				return
			}
			var le *pool.LedgerError
			if !errors.As(err, &le) || le.Seq != tc.wantSeq {
				t.Fatalf("VerifyLedger: %v, want a *LedgerError at entry %d", err, tc.wantSeq)
			}
		})
	}
	for _, e := range es {
		if err := pool.VerifyEntry(e, key.Public()); err != nil {
			t.Errorf("VerifyEntry %d: %v", e.Seq, err)
		}
		if err := pool.VerifyEntry(e, forger.Public()); !errors.Is(err, pool.ErrLedger) {
			t.Errorf("VerifyEntry %d with another key: %v", e.Seq, err)
		}
	}

	// JSON (a download, an agent's receipts) and the store's binary
	// column keep the proof exactly.
	var back []pool.Entry
	for _, e := range es {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var got pool.Entry
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		back = append(back, got)
		if e.Tree != nil {
			bin, _ := e.Tree.MarshalBinary()
			var tr pool.TreeProof
			if err := tr.UnmarshalBinary(bin); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(*e.Tree, tr); diff != "" {
				t.Errorf("entry %d: binary proof (-want +got):\n%s", e.Seq, diff)
			}
		}
	}
	if diff := cmp.Diff(es, back); diff != "" {
		t.Errorf("JSON round trip (-want +got):\n%s", diff)
	}
	if err := pool.VerifyLedger(back, key.Public()); err != nil {
		t.Errorf("VerifyLedger after JSON: %v", err)
	}
	var tr pool.TreeProof
	if err := tr.UnmarshalBinary([]byte{5, 1, 7}); err == nil {
		t.Errorf("a path of 1 byte was read as a proof: %+v", tr)
	}
}

// The scheduler signs each batch it commits once: a job's entries
// committed together share one signature and carry inclusion proofs.
func TestSchedulerSignsBatches(t *testing.T) {
	es, h := sampleLedger(t)
	sigs := map[string]int{}
	for _, e := range es {
		if e.Tree == nil {
			t.Fatalf("entry %d was signed alone", e.Seq)
		}
		sigs[string(e.Sig)]++
	}
	if len(sigs) >= len(es) {
		t.Errorf("%d signatures for %d entries: no batch shares one", len(sigs), len(es))
	}
	if err := pool.VerifyLedger(es, h.S.PublicKey()); err != nil {
		t.Fatal(err)
	}
}

// leafStore is a MemStore that checks what each batch it is given says
// of its entries' hashes (Batch.SignedWhole, Batch.Hashes) against the
// entries.
type leafStore struct {
	*pool.MemStore
	t      *testing.T
	signed int // batches with entries, each SignedWhole with true hashes
}

func (s *leafStore) Commit(ctx context.Context, b *pool.Batch) error {
	if len(b.Entries) > 0 {
		if !b.SignedWhole() {
			s.t.Errorf("a batch of %d entries from entry %d is not SignedWhole", len(b.Entries), b.Entries[0].Seq)
		}
		hashes, _ := b.Hashes()
		for i, h := range hashes {
			if e := b.Entries[i]; h != e.Hash() {
				s.t.Errorf("entry %d: the batch says its hash is %s, it is %s", e.Seq, h, e.Hash())
			}
		}
		s.signed++
	}
	return s.MemStore.Commit(ctx, b)
}

// The Scheduler signs each batch with Batch.Sign, which keeps the leaf
// hashes that spare its store hashing the entries again: every batch it
// commits is SignedWhole, and its hashes are the entries'.
func TestSchedulerHandsItsStoreLeaves(t *testing.T) {
	st := &leafStore{MemStore: pool.NewMemStore(), t: t}
	sampleLedgerIn(t, st)
	if st.signed == 0 {
		t.Fatal("no batch with entries was committed")
	}
}

// SignedWhole holds for a batch as Batch.Sign signs it, and for no batch
// signed otherwise or changed after in a way it checks; Hashes gives the
// entries' hashes either way, and Sign signs as SignBatch does.
func TestBatchSignedWhole(t *testing.T) {
	key := pooltest.Key(t, "coordinator")
	signed := func() *pool.Batch {
		b := &pool.Batch{Entries: treeEntries(5, 7)}
		b.Sign(job.Digest{1}, key.Sign)
		return b
	}
	b := signed()
	if _, whole := b.Hashes(); !b.SignedWhole() || !whole {
		t.Fatal("a batch signed by Batch.Sign is not SignedWhole")
	}
	bySignBatch := treeEntries(5, 7)
	pool.SignBatch(bySignBatch, job.Digest{1}, key.Sign)
	if d := cmp.Diff(bySignBatch, b.Entries); d != "" {
		t.Fatalf("Batch.Sign and SignBatch sign differently (-SignBatch +Sign):\n%s", d)
	}
	if b := (&pool.Batch{}); b.SignedWhole() {
		t.Error("an empty batch is SignedWhole")
	}
	twoBatches := &pool.Batch{Entries: treeEntries(5, 7)}
	prev := pool.SignBatch(twoBatches.Entries[:3], job.Digest{}, key.Sign)
	pool.SignBatch(twoBatches.Entries[3:], prev, key.Sign)
	alone := &pool.Batch{Entries: treeEntries(5, 2)}
	for i := range alone.Entries {
		alone.Entries[i].Sig = key.Sign(alone.Entries[i].Canonical(false))
	}
	for _, c := range []struct {
		what string
		b    *pool.Batch
	}{
		{"signed by SignBatch, no leaves kept", &pool.Batch{Entries: bySignBatch}},
		{"an entry added after Sign", func() *pool.Batch { b := signed(); b.Entries = append(b.Entries, treeEntries(12, 1)...); return b }()},
		{"a Prev changed after Sign", func() *pool.Batch { b := signed(); b.Entries[3].Prev[0] ^= 1; return b }()},
		{"no leaves", func() *pool.Batch { b := signed(); b.Leaves = nil; return b }()},
		{"a leaf short", func() *pool.Batch { b := signed(); b.Leaves = b.Leaves[1:]; return b }()},
		{"a leaf that is not the next entry's Prev", func() *pool.Batch { b := signed(); b.Leaves[2][0] ^= 1; return b }()},
		{"a last leaf that is not the last entry's hash", func() *pool.Batch { b := signed(); b.Leaves[6][0] ^= 1; return b }()},
		{"the last entry changed after Sign", func() *pool.Batch { b := signed(); b.Entries[6].Cost++; return b }()},
		{"a gap in Seq", func() *pool.Batch { b := signed(); b.Entries[4].Seq++; return b }()},
		{"an entry of another tree", func() *pool.Batch { b := signed(); b.Entries[3].Tree = &pool.TreeProof{Size: 8, Index: 3}; return b }()},
		{"an entry out of place in the tree", func() *pool.Batch { b := signed(); b.Entries[3].Tree.Index = 4; return b }()},
		{"another signature", func() *pool.Batch {
			b := signed()
			b.Entries[6].Sig = bytes.Clone(b.Entries[6].Sig)
			b.Entries[6].Sig[0] ^= 1
			return b
		}()},
		{"two batches", twoBatches},
		{"entries signed alone", alone},
	} {
		if c.b.SignedWhole() {
			t.Errorf("%s: SignedWhole", c.what)
		}
		hashes, whole := c.b.Hashes()
		if whole {
			t.Errorf("%s: Hashes says SignedWhole", c.what)
		}
		for i, h := range hashes {
			if h != c.b.Entries[i].Hash() {
				t.Errorf("%s: Hashes()[%d] is not entry %d's hash", c.what, i, c.b.Entries[i].Seq)
			}
		}
	}
}

// BenchmarkEntryVerifier checks receipts one at a time as a device does,
// 8 per batch of 64: each with VerifyEntry (one Ed25519 verification
// each) and with an EntryVerifier (one per batch).
func BenchmarkEntryVerifier(b *testing.B) {
	key := pooltest.Key(b, "coordinator")
	es := treeEntries(1, 64*16)
	var prev job.Digest
	for i := 0; i < len(es); i += 64 {
		prev = pool.SignBatch(es[i:i+64], prev, key.Sign)
	}
	var mine []pool.Entry
	for i, e := range es {
		if i%8 == 0 {
			mine = append(mine, e)
		}
	}
	b.Run("VerifyEntry", func(b *testing.B) {
		for i := range b.N {
			if err := pool.VerifyEntry(mine[i%len(mine)], key.Public()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("EntryVerifier", func(b *testing.B) {
		v := pool.NewEntryVerifier(key.Public())
		for i := range b.N {
			if err := v.Verify(mine[i%len(mine)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
