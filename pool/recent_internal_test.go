package pool

import (
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/google/go-cmp/cmp"

	"idlepool/job"
)

// signedBatches returns n entries from Seq first on, for peers p0, p1
// and p2 in turn, chained after prev and signed in batches of size (the
// last one shorter), as a Scheduler commits them, and the Hash of the
// last.
func signedBatches(t testing.TB, first uint64, n, size int, prev job.Digest) ([][]Entry, job.Digest) {
	t.Helper()
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	jobID := job.ID(sha256.Sum256([]byte("recent job")))
	var out [][]Entry
	for lo := 0; lo < n; lo += size {
		es := make([]Entry, min(size, n-lo))
		for i := range es {
			seq := first + uint64(lo+i)
			es[i] = Entry{Seq: seq, Kind: KindReceipt, Pool: "recent", Job: jobID, Task: int64(seq),
				Peer: fmt.Sprint("p", seq%3), Owner: fmt.Sprint("owner-", seq%3),
				Lease: fmt.Sprintf("%032x", seq), Digest: job.Digest(sha256.Sum256(fmt.Append(nil, seq))),
				Cost: 0.25, Work: seq * 7, Time: 1_767_000_000_000 + int64(seq)}
			if seq%5 == 0 {
				es[i].Kind, es[i].Reason, es[i].Cost, es[i].Work = KindDeviation, "other bytes", 0, 0
			}
		}
		prev = SignBatch(es, prev, func(b []byte) []byte { return ed25519.Sign(key, b) })
		out = append(out, es)
	}
	return out, prev
}

// A batch held gives back each of its entries as SignBatch signed it:
// Prev, Sig and the inclusion proof (Tree) read from the batch's tree,
// for trees of every shape up to 70 leaves.
func TestHeldBatchRebuildsEntries(t *testing.T) {
	for n := 1; n <= 70; n++ {
		batches, last := signedBatches(t, 100, n, n, job.Digest{1})
		es := batches[0]
		b := newHeldBatch(es, last)
		if b == nil {
			t.Fatalf("batch of %d not held", n)
		}
		if len(b.nodes) != treeNodes(n) {
			t.Errorf("batch of %d: %d tree nodes, want %d", n, len(b.nodes), treeNodes(n))
		}
		r := newRecentEntries(99)
		r.add(es, last)
		for _, p := range []string{"p0", "p1", "p2"} {
			got, ok := r.peer(p, 99, len(es))
			var want []Entry
			for _, e := range es {
				if e.Peer == p {
					want = append(want, e)
				}
			}
			if !ok || !cmp.Equal(want, got) {
				t.Fatalf("batch of %d, peer %s: ok %v (-want +got):\n%s", n, p, ok, cmp.Diff(want, got))
			}
		}
	}
}

// Entries that are not one signed batch are not held: the window is
// emptied and a query reaching them goes to the store.
func TestRecentEntriesNotABatch(t *testing.T) {
	batches, last := signedBatches(t, 11, 20, 10, job.Digest{})
	r := newRecentEntries(10)
	r.add(batches[0], batches[1][0].Prev)
	bad := append([]Entry(nil), batches[1]...)
	bad[3].Tree = nil
	r.add(bad, last)
	if got, ok := r.peer("p0", 10, 100); ok {
		t.Fatalf("a query from Seq 10 answered from memory after a malformed batch: %d entries", len(got))
	}
	if got, ok := r.peer("p0", 30, 100); !ok || len(got) != 0 {
		t.Fatalf("a query past the malformed batch: ok %v, %d entries", ok, len(got))
	}
	if r.count != 0 || r.bytes != 0 || len(r.byPeer) != 0 {
		t.Errorf("window not emptied: %d entries, %d bytes, %d peers", r.count, r.bytes, len(r.byPeer))
	}
}

// Past maxRecentEntries the oldest whole batches leave the tail, and a
// query that reaches before what it holds is not answered from it.
func TestRecentEntriesBounded(t *testing.T) {
	const size = 1000
	n := maxRecentEntries + 2*size + 100
	batches, last := signedBatches(t, 11, n, size, job.Digest{})
	r := newRecentEntries(10)
	for i, es := range batches {
		next := last
		if i+1 < len(batches) {
			next = batches[i+1][0].Prev
		}
		r.add(es, next)
	}
	// 65,536 entries fit: the three oldest batches (the last one held
	// being short) left.
	evicted := 3 * size
	if r.count != n-evicted || r.count > maxRecentEntries {
		t.Fatalf("%d entries held, want %d (at most %d)", r.count, n-evicted, maxRecentEntries)
	}
	if r.bytes > maxRecentBytes {
		t.Errorf("%d bytes held, above %d", r.bytes, maxRecentBytes)
	}
	from := uint64(10 + evicted)
	if r.from != from {
		t.Fatalf("tail from %d, want %d", r.from, from)
	}
	if got, ok := r.peer("p1", from-1, 10); ok {
		t.Fatalf("a query from before the tail (Seq %d) answered: %d entries", from-1, len(got))
	}
	got, ok := r.peer("p1", from, 4)
	var want []Entry
	for _, es := range batches[3:] {
		for _, e := range es {
			if e.Peer == "p1" && len(want) < 4 {
				want = append(want, e)
			}
		}
	}
	if !ok || !cmp.Equal(want, got) {
		t.Fatalf("peer p1 after %d: ok %v (-want +got):\n%s", from, ok, cmp.Diff(want, got))
	}
	held := 0
	for _, q := range r.byPeer {
		held += q.n
	}
	if held != r.count {
		t.Errorf("%d entries indexed by peer, %d counted", held, r.count)
	}
}

// The bytes bound holds when entries are larger than heldEntrySize
// counts for (long reasons): fewer of them are held.
func TestRecentEntriesBytesBound(t *testing.T) {
	batches, last := signedBatches(t, 1, 40_000, 500, job.Digest{})
	r := newRecentEntries(0)
	long := string(make([]byte, 1000))
	for i, es := range batches {
		for j := range es {
			es[j].Reason = long // not re-signed: held as it is
		}
		next := last
		if i+1 < len(batches) {
			next = batches[i+1][0].Prev
		}
		r.add(es, next)
	}
	if r.bytes > maxRecentBytes || r.count >= 40_000 {
		t.Fatalf("%d entries held in %d bytes, want at most %d bytes", r.count, r.bytes, maxRecentBytes)
	}
	if r.bytes+batches[0][0].heldSizeForTest()*500 <= maxRecentBytes {
		t.Errorf("%d bytes held: a batch more would have fit", r.bytes)
	}
}

func (e Entry) heldSizeForTest() int { return heldBytes(&e) }

// What an entry held takes, measured on the heap, is within heldBytes'
// estimate (and far below the ~950 bytes of an Entry with its own
// inclusion path).
func TestRecentEntryBytes(t *testing.T) {
	const n = 50_000
	batches, last := signedBatches(t, 1, n, 400, job.Digest{})
	estimate := 0
	for _, es := range batches {
		for i := range es {
			estimate += heldBytes(&es[i])
		}
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := newRecentEntries(0)
	for i, es := range batches {
		next := last
		if i+1 < len(batches) {
			next = batches[i+1][0].Prev
		}
		r.add(es, next)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
	t.Logf("an entry held: %.0f bytes on the heap, %d estimated", per, estimate/n)
	if r.count != n {
		t.Fatalf("%d entries held, want %d", r.count, n)
	}
	if per > 1.5*float64(estimate/n) {
		t.Errorf("an entry held takes %.0f bytes, over 1.5 times the %d estimated", per, estimate/n)
	}
	runtime.KeepAlive(r)
	runtime.KeepAlive(batches)
}

// A heldQueue gives its entries back oldest first across its buffer's
// wrap, growth and shrinking, as a slice appended at the back and cut at
// the front would; it shrinks back once most entries left, and pop
// clears what it lets go.
func TestHeldQueue(t *testing.T) {
	var q heldQueue
	var want []int64 // the Tasks held, oldest first
	rng := rand.New(rand.NewPCG(1, 2))
	task := int64(0)
	check := func(step int) {
		t.Helper()
		if q.n != len(want) {
			t.Fatalf("step %d: %d entries, want %d", step, q.n, len(want))
		}
		for i, w := range want {
			if got := q.at(i).Task; got != w {
				t.Fatalf("step %d: entry %d is task %d, want %d", step, i, got, w)
			}
		}
		if len(q.buf) != 0 && (len(q.buf)&(len(q.buf)-1) != 0 || len(q.buf) < q.n) {
			t.Fatalf("step %d: buffer of %d for %d entries: want a power of two at least as large", step, len(q.buf), q.n)
		}
		for i := q.n; i < len(q.buf); i++ {
			if e := q.buf[(q.head+i)&(len(q.buf)-1)]; e != (heldEntry{}) {
				t.Fatalf("step %d: a free place holds %+v", step, e)
			}
		}
	}
	push := func() {
		q.push(heldEntry{Task: task, Kind: "receipt"})
		want = append(want, task)
		task++
	}
	pop := func() {
		q.pop()
		want = want[1:]
	}
	// Growth while the ring is wrapped: 8 places, the oldest at 4.
	for range 6 {
		push()
	}
	for range 4 {
		pop()
	}
	for range 7 {
		push()
		check(0)
	}
	// Rises and falls through many sizes, with the oldest anywhere:
	// entries come more often than they go until there are up to 2,000,
	// then go more often until there are a few.
	step := 1
	for range 30 {
		high, low := 8+rng.IntN(2000), rng.IntN(8)
		for _, rising := range []bool{true, false} {
			for rising && len(want) < high || !rising && len(want) > low {
				size := len(q.buf)
				if rng.IntN(10) < 7 == rising || len(want) == 0 {
					push()
				} else {
					pop()
				}
				if len(q.buf) != size || step%53 == 0 {
					check(step)
				}
				step++
			}
		}
	}
	for len(want) > 0 {
		pop()
	}
	check(step)
	if len(q.buf) > 2*minHeldQueue {
		t.Errorf("a buffer of %d entries after draining, want it shrunk to about %d", len(q.buf), minHeldQueue)
	}
}
