package pool

import (
	"bytes"
	"math/bits"
	"slices"
	"sort"
	"sync"
	"unsafe"

	"idlepool/job"
)

// The window of recent ledger entries a Scheduler keeps in memory for
// PeerLedger holds the newest whole batches within two bounds:
//
//   - maxRecentEntries (2^16 = 65,536 entries). At about 9,400 entries a
//     second (the benchmark of docs/benchmarks.md: 4,700 accepted tasks
//     a second at quorum 2) that is some 7 s of them, several of a
//     device's one-second receipt polls, so that a poll that comes late
//     still finds its entries here. A poll that reaches further back
//     reads the store.
//   - maxRecentBytes (24 MiB) bounds what the held entries take, as
//     heldBytes estimates it, when entries are larger than usual (long
//     reasons or lease names).
//
// An entry held is its own fields (a heldEntry, 176 bytes, and its lease
// name), its share of its batch's Merkle tree (the tree's nodes, about
// two hashes an entry: 64 bytes) and its peer's name in its batch's list
// (16 bytes): about 300 bytes measured on the heap besides its lease
// name (TestRecentEntryBytes), some 330 with a 32-digit one, 360
// estimated, where an Entry with its own inclusion path took some 950
// (docs/benchmarks.md). The batch's
// signature, pool and tree head are held once, not per entry, and each
// entry's inclusion path and Prev are read from the tree when asked for.
// The full window is thus about 21 MiB (65,536 × 330 bytes), 24 MiB at
// most by the byte bound.
const (
	maxRecentBytes   = 24 << 20
	maxRecentEntries = 1 << 16
)

// heldEntry is one ledger entry held in recentEntries: the fields that
// are its own. Its Seq is its batch's first plus idx, its Pool, Sig and
// tree are its batch's, its Peer the key it is held under, and its Prev
// and inclusion path are read from its batch's tree.
type heldEntry struct {
	batch  *heldBatch
	idx    uint32 // its leaf's index in its batch's tree
	Kind   string
	Job    job.ID
	Task   int64
	Owner  string
	Lease  string
	Digest job.Digest
	Cost   float64
	Work   uint64
	Time   int64
	Reason string
}

// heldBatch is what the entries of one committed batch share: its
// signature and its Merkle tree (SignBatch).
type heldBatch struct {
	first uint64     // the Seq of its first entry
	prev  job.Digest // its first entry's Prev
	pool  string
	sig   []byte // over the tree's head; shared with the Entries built from it
	// nodes holds the tree's levels one after another, leaves (the
	// entries' leaf hashes, in Seq order) first, the root last: each
	// level pairs the one below from the left, a lone last node going
	// up as it is (RFC 9162's tree, section 2.1.1, built bottom up).
	nodes []job.Digest
	peers []string // each entry's peer, in Seq order, for eviction
	bytes int      // what heldBytes counted for its entries
}

// heldEntrySize is what heldBytes counts for an entry besides its
// strings' bytes: the heldEntry, two tree nodes and its peer's name.
const heldEntrySize = int(unsafe.Sizeof(heldEntry{})) + 2*len(job.Digest{}) + int(unsafe.Sizeof(""))

// heldBytes estimates the memory an entry held takes: heldEntrySize,
// the bytes of the strings that are its own (the lease and the reason;
// the kind, owner and peer are shared with the Scheduler's own), and a
// quarter more for the slack of the slices that hold it.
func heldBytes(e *Entry) int {
	return (heldEntrySize + len(e.Lease) + len(e.Reason)) * 5 / 4
}

// recentEntries is the tail of the ledger that this Scheduler committed
// since it loaded, indexed by peer, so that the receipts devices poll
// for (PeerLedger) are answered from memory instead of the store: that
// read was about half of answering a poll, and the polls about a tenth
// of the coordinator's CPU (docs/benchmarks.md). It holds the newest
// whole batches within maxRecentBytes and maxRecentEntries. A query that
// reaches further back than the tail goes to the store. The Scheduler
// is the only writer of its store's ledger, so every committed entry
// with Seq above from is here. It is safe for concurrent use.
type recentEntries struct {
	mu      sync.Mutex
	from    uint64                // every committed entry with Seq > from is held
	byPeer  map[string]*heldQueue // each peer's entries, in Seq order
	batches []*heldBatch          // the batches held, oldest first
	count   int                   // entries held
	bytes   int                   // heldBytes of the entries held
}

func newRecentEntries(from uint64) *recentEntries {
	return &recentEntries{from: from, byPeer: map[string]*heldQueue{}}
}

// heldQueue is one peer's held entries in Seq order, in a ring buffer:
// entries join at the back and leave from the front without moving the
// others, and the buffer is allocated anew only when it is full (twice
// the size) or a quarter full (half the size, down to minHeldQueue), so
// a peer whose entries come and go at a steady rate allocates nothing.
// Its size is a power of two. The zero heldQueue is empty.
type heldQueue struct {
	buf  []heldEntry
	head int // index in buf of the oldest entry
	n    int // entries held
}

// minHeldQueue is the smallest buffer of a heldQueue.
const minHeldQueue = 8

// push adds e at the back.
func (q *heldQueue) push(e heldEntry) {
	if q.n == len(q.buf) {
		q.resize(max(2*q.n, minHeldQueue))
	}
	q.buf[(q.head+q.n)&(len(q.buf)-1)] = e
	q.n++
}

// pop lets the oldest entry go; q is not empty.
func (q *heldQueue) pop() {
	q.buf[q.head] = heldEntry{} // its batch and strings may leave memory
	q.head = (q.head + 1) & (len(q.buf) - 1)
	q.n--
	if len(q.buf) > minHeldQueue && q.n <= len(q.buf)/4 {
		q.resize(len(q.buf) / 2)
	}
}

// at returns the i-th oldest entry, 0 ≤ i < q.n.
func (q *heldQueue) at(i int) *heldEntry { return &q.buf[(q.head+i)&(len(q.buf)-1)] }

// resize moves the entries, oldest first, into a new buffer of size
// entries (a power of two, at least q.n).
func (q *heldQueue) resize(size int) {
	buf := make([]heldEntry, size)
	k := copy(buf, q.buf[q.head:min(q.head+q.n, len(q.buf))])
	copy(buf[k:], q.buf[:q.n-k])
	q.buf, q.head = buf, 0
}

// add holds es, just committed, following what is held: one batch,
// chained and signed by SignBatch, in Seq order; last is the Hash of its
// last entry (what SignBatch returned). The oldest batches beyond the
// bounds leave. Entries that are not one such batch (never from a
// Scheduler) are not held: the window is emptied, and the store answers
// for them.
func (r *recentEntries) add(es []Entry, last job.Digest) {
	if len(es) == 0 {
		return
	}
	b := newHeldBatch(es, last)
	r.mu.Lock()
	defer r.mu.Unlock()
	if b == nil {
		r.from = es[len(es)-1].Seq
		clear(r.byPeer)
		r.batches, r.count, r.bytes = nil, 0, 0
		return
	}
	for i := range es {
		e := &es[i]
		q := r.byPeer[e.Peer]
		if q == nil {
			q = &heldQueue{}
			r.byPeer[e.Peer] = q
		}
		q.push(heldEntry{
			batch: b, idx: uint32(i), Kind: e.Kind, Job: e.Job, Task: e.Task, Owner: e.Owner, Lease: e.Lease,
			Digest: e.Digest, Cost: e.Cost, Work: e.Work, Time: e.Time, Reason: e.Reason,
		})
	}
	r.batches = append(r.batches, b)
	r.count += len(es)
	r.bytes += b.bytes
	for len(r.batches) > 1 && (r.bytes > maxRecentBytes || r.count > maxRecentEntries) {
		r.evict()
	}
}

// evict lets the oldest batch go.
func (r *recentEntries) evict() {
	old := r.batches[0]
	r.batches[0] = nil
	r.batches = r.batches[1:]
	for _, p := range old.peers {
		q := r.byPeer[p]
		if q.n <= 1 {
			delete(r.byPeer, p)
		} else {
			q.pop()
		}
	}
	r.count -= len(old.peers)
	r.bytes -= old.bytes
	r.from = old.first + uint64(len(old.peers)) - 1
}

// newHeldBatch returns the held form of es, one batch signed by
// SignBatch whose last entry's Hash is last, or nil when es is not
// such a batch.
func newHeldBatch(es []Entry, last job.Digest) *heldBatch {
	n := len(es)
	if uint64(n) > maxTreeSize {
		return nil
	}
	sig := es[0].Sig
	for i := range es {
		e := &es[i]
		t := e.Tree
		if t == nil || t.Size != uint64(n) || t.Index != uint64(i) || e.Seq != es[0].Seq+uint64(i) ||
			e.Pool != es[0].Pool || !bytes.Equal(e.Sig, sig) {
			return nil
		}
	}
	// The leaves: each entry's leaf hash is the next one's Prev.
	nodes := make([]job.Digest, n, treeNodes(n))
	for i := range n - 1 {
		nodes[i] = es[i+1].Prev
	}
	nodes[n-1] = last
	for lo, w := 0, n; w > 1; lo, w = lo+w, (w+1)/2 {
		for j := 0; j < w; j += 2 {
			if j+1 < w {
				nodes = append(nodes, hashChildren(nodes[lo+j][:], nodes[lo+j+1][:]))
			} else {
				nodes = append(nodes, nodes[lo+j])
			}
		}
	}
	b := &heldBatch{first: es[0].Seq, prev: es[0].Prev, pool: es[0].Pool, sig: sig, nodes: nodes, peers: make([]string, n)}
	for i := range es {
		b.peers[i] = es[i].Peer
		b.bytes += heldBytes(&es[i])
	}
	// The proofs SignBatch gave must be the ones the tree gives back.
	if last := &es[n-1]; !slices.Equal(b.path(uint32(n-1), nil), last.Tree.Path) {
		return nil
	}
	return b
}

// treeNodes is how many nodes newHeldBatch's tree of n leaves has.
func treeNodes(n int) int {
	t := 0
	for w := n; ; w = (w + 1) / 2 {
		t += w
		if w == 1 {
			return t
		}
	}
}

// path appends the inclusion path of leaf i (RFC 9162 section 2.1.3.1,
// leaf to root) to dst: at each level its sibling, where it has one.
func (b *heldBatch) path(i uint32, dst []job.Digest) []job.Digest {
	idx := int(i)
	for lo, w := 0, len(b.peers); w > 1; lo, w = lo+w, (w+1)/2 {
		if s := idx ^ 1; s < w {
			dst = append(dst, b.nodes[lo+s])
		}
		idx /= 2
	}
	return dst
}

// depth is the most hashes an inclusion path of the batch's tree has.
func (b *heldBatch) depth() int { return bits.Len(uint(len(b.peers) - 1)) }

// seq is the Seq of the entry h holds.
func (h *heldEntry) seq() uint64 { return h.batch.first + uint64(h.idx) }

// entry rebuilds the Entry h holds for peer, with its own TreeProof in
// *proof and its path appended to *paths.
func (h *heldEntry) entry(peer string, proof *TreeProof, paths *[]job.Digest) Entry {
	b := h.batch
	prev := b.prev
	if h.idx > 0 {
		prev = b.nodes[h.idx-1]
	}
	*proof = TreeProof{Size: uint64(len(b.peers)), Index: uint64(h.idx)}
	if n := len(*paths); b.depth() > 0 {
		*paths = b.path(h.idx, *paths)
		proof.Path = (*paths)[n:len(*paths):len(*paths)]
	}
	return Entry{
		Seq: h.seq(), Prev: prev, Kind: h.Kind, Pool: b.pool, Job: h.Job, Task: h.Task,
		Peer: peer, Owner: h.Owner, Lease: h.Lease, Digest: h.Digest, Cost: h.Cost, Work: h.Work,
		Time: h.Time, Reason: h.Reason, Sig: b.sig, Tree: proof,
	}
}

// peer returns peer's entries with Seq > after, at most max, and
// whether the tail covers the query (after is not older than it). The
// entries of one batch share their Sig slice, which the caller must not
// change.
func (r *recentEntries) peer(peer string, after uint64, max int) ([]Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if after < r.from {
		return nil, false
	}
	q := r.byPeer[peer]
	if q == nil {
		return nil, true
	}
	i := sort.Search(q.n, func(i int) bool {
		return q.at(i).seq() > after
	})
	n := min(q.n-i, max)
	if n <= 0 {
		return nil, true
	}
	depth := 0
	for k := range n {
		depth += q.at(i + k).batch.depth()
	}
	out := make([]Entry, n)
	proofs := make([]TreeProof, n)
	paths := make([]job.Digest, 0, depth)
	for k := range n {
		out[k] = q.at(i+k).entry(peer, &proofs[k], &paths)
	}
	return out, true
}
