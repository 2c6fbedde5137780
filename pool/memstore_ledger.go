package pool

import (
	"fmt"
	"slices"
)

// A MemStore keeps every ledger entry it was given, so its memory grows
// with the pool's history (two receipts per decided task). A clustered
// Store that keeps its state in a MemStore moves the oldest entries out
// of it: an entry never changes once committed, and the Scheduler loads
// none (it needs only the ledger's head, LedgerSeq and LedgerHash, which
// stay). MemStore hands entries over (LedgerEntries), leaves those the
// Store archived out of an image (LiveImage) and forgets them
// (ForgetEntries); the Store answers Entries for a forgotten one from
// where it put it (Entries says ErrEntriesArchived). CountEntries counts
// forgotten entries too.

// EntryBlock is how many ledger entries one block of a MemStore's
// memory holds: block k holds the entries with Seq k*EntryBlock+1 to
// (k+1)*EntryBlock (LedgerBlocks hands them over so). A clustered
// pool's ledger archive stores ranges of as many (cluster.LedgerRange):
// part of its format, so it never changes.
const EntryBlock = 1024

// entryLog is a MemStore's ledger entries after its base, in blocks of
// EntryBlock aligned on Seq that are never copied as the log grows. One
// slice of every entry was copied at each doubling, the largest of a
// JetStream node's allocations (a tenth of them) and 7% of a scheduler
// benchmark's CPU on a MemStore. Entries are never changed once pushed:
// a block's filled part may be shared.
type entryLog struct {
	blocks [][]Entry // blocks[0][skip] is the first entry; each full but the last
	skip   int
	n      int
}

// newEntryLog returns an empty log whose first entry will have Seq
// base+1.
func newEntryLog(base uint64) entryLog {
	return entryLog{skip: int(base % EntryBlock)}
}

func (l *entryLog) len() int { return l.n }

// at returns the i-th entry (from 0).
func (l *entryLog) at(i int) *Entry {
	i += l.skip
	return &l.blocks[i/EntryBlock][i%EntryBlock]
}

// push appends e.
func (l *entryLog) push(e Entry) {
	if k := l.skip + l.n; k/EntryBlock == len(l.blocks) {
		// A new block; only the first starts past its beginning (skip).
		l.blocks = append(l.blocks, make([]Entry, k%EntryBlock, EntryBlock))
	}
	last := &l.blocks[len(l.blocks)-1]
	*last = append(*last, e)
	l.n++
}

// drop forgets the first n entries (n at most len): the blocks they
// fill leave, so that their memory goes once nothing else shares them.
func (l *entryLog) drop(n int) {
	k := l.skip + n
	l.blocks = append([][]Entry(nil), l.blocks[k/EntryBlock:]...)
	l.skip, l.n = k%EntryBlock, l.n-n
}

// pieces returns entries i to j-1 (from 0) as slices that share the
// log's, each within one block, in order; nil when j <= i.
func (l *entryLog) pieces(i, j int) [][]Entry {
	var out [][]Entry
	for i < j {
		a := i + l.skip
		blk, off := a/EntryBlock, a%EntryBlock
		end := min(EntryBlock, off+j-i)
		out = append(out, l.blocks[blk][off:end:end])
		i += end - off
	}
	return out
}

// ledgerSeq is the Seq of the newest entry; m.mu is held.
func (m *MemStore) ledgerSeq() uint64 { return m.ledgerBase + uint64(m.ledger.len()) }

// LedgerBase returns the Seq up to which m forgot the ledger's entries
// (ForgetEntries; 0: it holds them all), and LedgerSeq the newest
// entry's Seq.
func (m *MemStore) LedgerBase() (base, seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ledgerBase, m.ledgerSeq()
}

// LedgerBlocks returns the entries with Seq from after+1 to upto that m
// holds, in Seq order, as slices that each lie within one block of
// EntryBlock (so, with after and upto multiples of EntryBlock, each is a
// whole block): those it forgot and those past its newest are left out.
// The slices share m's entries (an entry never changes once committed):
// read them, never change them.
func (m *MemStore) LedgerBlocks(after, upto uint64) [][]Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	after, upto = max(after, m.ledgerBase), min(upto, m.ledgerSeq())
	if upto <= after {
		return nil
	}
	return m.ledger.pieces(int(after-m.ledgerBase), int(upto-m.ledgerBase))
}

// ForgetEntries drops the ledger entries with Seq up to upto from m:
// Entries no longer returns them (ErrEntriesArchived), nor Image. The
// ledger's head, CountEntries and what Commit checks are as before. It
// returns how many it dropped; forgetting what is forgotten does
// nothing, and upto past the newest entry is an error.
func (m *MemStore) ForgetEntries(upto uint64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if upto > m.ledgerSeq() {
		return 0, fmt.Errorf("forget ledger entries up to %d: the ledger ends at %d", upto, m.ledgerSeq())
	}
	if upto <= m.ledgerBase {
		return 0, nil
	}
	n := upto - m.ledgerBase
	m.ledger.drop(int(n))
	m.ledgerBase = upto
	for p, seqs := range m.byPeer {
		i, _ := slices.BinarySearch(seqs, upto+1)
		switch {
		case i == len(seqs):
			delete(m.byPeer, p)
		case i > 0:
			m.byPeer[p] = append([]uint64(nil), seqs[i:]...)
		}
	}
	return int(n), nil
}
