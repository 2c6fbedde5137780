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

// ledgerSeq is the Seq of the newest entry; m.mu is held.
func (m *MemStore) ledgerSeq() uint64 { return m.ledgerBase + uint64(len(m.ledger)) }

// LedgerBase returns the Seq up to which m forgot the ledger's entries
// (ForgetEntries; 0: it holds them all), and LedgerSeq the newest
// entry's Seq.
func (m *MemStore) LedgerBase() (base, seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ledgerBase, m.ledgerSeq()
}

// LedgerEntries returns the entries with Seq from after+1 to upto that m
// holds, in Seq order: those it forgot and those past its newest are
// left out. The slice shares m's entries (an entry never changes once
// committed): read them, never change them.
func (m *MemStore) LedgerEntries(after, upto uint64) []Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	after, upto = max(after, m.ledgerBase), min(upto, m.ledgerSeq())
	if upto <= after {
		return nil
	}
	return m.ledger[after-m.ledgerBase : upto-m.ledgerBase : upto-m.ledgerBase]
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
	// A new slice, so that the memory of the forgotten entries goes (an
	// image taken before may still share the old one).
	m.ledger = append([]Entry(nil), m.ledger[n:]...)
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
