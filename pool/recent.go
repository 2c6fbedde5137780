package pool

import (
	"slices"
	"sync"
)

// maxRecentEntries is how many of the newest committed ledger entries a
// Scheduler keeps in memory for PeerLedger: at 2,000 entries a second
// (1,000 accepted tasks at quorum 2) about 4 s of them, in about 8 MiB
// (an entry held, with its inclusion proof, is some 950 bytes:
// docs/benchmarks.md). A poll that reaches further back reads the store.
const maxRecentEntries = 1 << 13

// recentEntries is the tail of the ledger that this Scheduler committed
// since it loaded, indexed by peer, so that the receipts devices poll
// for (PeerLedger) are answered from memory instead of the store: that
// read was about half of answering a poll, and the polls about a tenth
// of the coordinator's CPU (docs/benchmarks.md). A query that reaches
// further back than the tail goes to the store. The Scheduler is the
// only writer of its store's ledger, so every committed entry with Seq
// above from is here. It is safe for concurrent use.
type recentEntries struct {
	mu     sync.Mutex
	from   uint64             // every committed entry with Seq > from is held
	byPeer map[string][]Entry // each peer's entries, in Seq order
	fifo   []string           // the peers of the entries held, oldest first
}

func newRecentEntries(from uint64) *recentEntries {
	return &recentEntries{from: from, byPeer: map[string][]Entry{}}
}

// add holds es, just committed, in Seq order and following what is
// held; the oldest entries beyond maxRecentEntries leave.
func (r *recentEntries) add(es []Entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range es {
		r.byPeer[e.Peer] = append(r.byPeer[e.Peer], e)
		r.fifo = append(r.fifo, e.Peer)
	}
	for len(r.fifo) > maxRecentEntries {
		p := r.fifo[0]
		r.fifo = r.fifo[1:]
		old := r.byPeer[p]
		r.from = old[0].Seq
		if len(old) == 1 {
			delete(r.byPeer, p)
		} else {
			r.byPeer[p] = old[1:]
		}
	}
}

// peer returns peer's entries with Seq > after, at most max, and
// whether the tail covers the query (after is not older than it).
func (r *recentEntries) peer(peer string, after uint64, max int) ([]Entry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if after < r.from {
		return nil, false
	}
	es := r.byPeer[peer]
	i, _ := slices.BinarySearchFunc(es, after+1, func(e Entry, seq uint64) int {
		switch {
		case e.Seq < seq:
			return -1
		case e.Seq > seq:
			return 1
		}
		return 0
	})
	es = es[i:]
	if len(es) > max {
		es = es[:max]
	}
	return slices.Clone(es), true
}
