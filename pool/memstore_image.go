package pool

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"

	"idlepool/job"
)

// MemImage is everything a MemStore holds: the snapshot Load returns and
// the ledger. A clustered Store writes one as its snapshot, so that
// a node starting from nothing rebuilds its state from the image and the
// few batches after it (NewMemStoreFrom) instead of replaying every
// batch ever committed.
//
// An image written before LedgerBase and Kinds existed decodes (gob)
// with both zero: its Ledger is every entry, from which the counts
// follow. One written before Summaries existed decodes with none: its
// Outcomes are every outcome.
type MemImage struct {
	Snapshot
	// Ledger is every ledger entry after LedgerBase, in Seq order from
	// LedgerBase+1 to LedgerSeq.
	Ledger []Entry
	// LedgerBase is the Seq up to which the entries are left out (the
	// Store that wrote the image archived them; MemStore.ForgetEntries);
	// 0 when Ledger holds them all.
	LedgerBase uint64
	// Kinds counts every ledger entry up to LedgerSeq by kind, those
	// left out included (MemStore.CountEntries); nil in an image
	// written before it existed, whose LedgerBase is 0.
	Kinds map[string]uint64
}

// Image returns what m holds. The records are copies, but the byte
// slices in them (results, keys, signatures, canonical jobs) are shared
// with m: m never changes such bytes in place (it copies what it is
// given and only ever replaces or drops them), so the image stays as it
// was while m goes on committing. The copy is taken under m's lock and
// takes time linear in what m holds, with no encoding; encode the image
// after Image returns.
func (m *MemStore) Image() *MemImage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.imageLocked(nil, 0)
}

// imageLocked is Image without the replicas named in skip and without
// the ledger entries up to ledgerUpto (nor those forgotten); m.mu is
// held.
func (m *MemStore) imageLocked(skip map[string]bool, ledgerUpto uint64) *MemImage {
	img := &MemImage{Snapshot: Snapshot{LedgerSeq: m.ledgerSeq(), LedgerHash: m.head}}
	s := &img.Snapshot
	s.Peers = make([]Peer, 0, len(m.peerSeq))
	for _, id := range m.peerSeq {
		s.Peers = append(s.Peers, m.peers[id])
	}
	s.Jobs = make([]JobRecord, 0, len(m.jobSeq))
	for _, id := range m.jobSeq {
		s.Jobs = append(s.Jobs, *m.jobs[id])
	}
	sort.SliceStable(s.Jobs, func(i, k int) bool { return s.Jobs[i].Order < s.Jobs[k].Order })
	s.Replicas = make([]ReplicaRecord, 0, len(m.repSeq)-len(skip))
	for _, l := range m.repSeq {
		if !skip[l] {
			s.Replicas = append(s.Replicas, *m.replicas[l])
		}
	}
	for _, k := range m.trustSeq {
		s.Trust = append(s.Trust, m.trust[k])
	}
	s.Summaries = m.summaries(s.Jobs)
	for _, j := range s.Jobs {
		s.Outcomes = append(s.Outcomes, m.outcomes[j.ID]...)
	}
	// Entries are never changed once appended: the image shares them
	// up to the current length when they lie in one block (those after
	// the last whole range, as a snapshot's image holds), and copies
	// them otherwise.
	base := max(m.ledgerBase, min(ledgerUpto, m.ledgerSeq()))
	pieces := m.ledger.pieces(int(base-m.ledgerBase), m.ledger.len())
	if len(pieces) == 1 {
		img.Ledger = pieces[0]
	} else {
		img.Ledger = slices.Concat(pieces...)
	}
	img.LedgerBase = base
	img.Kinds = maps.Clone(m.kinds)
	return img
}

// NewMemStoreFrom returns a MemStore that holds what img holds, as if
// every batch that made it had been committed to it. It takes img's
// records and bytes over (img must not be used afterwards). It checks
// what makes the image hang together: unique keys, records of known
// jobs, outcomes numbered 1, 2, ... per job, a ledger whose entries
// are numbered LedgerBase+1, LedgerBase+2, ... up to LedgerSeq, the last
// of which hashes to LedgerHash, and counts by kind that add up to
// LedgerSeq; an error wrapping ErrConflict names what does not. The
// MemStore holds the entries after LedgerBase (as after ForgetEntries):
// whoever wrote the image keeps the others. It does
// not hash every entry again: each was checked against its predecessor
// when it was committed, and an image travels with a digest of its bytes
// (cluster.Store's snapshots), so the time it takes is that of building
// the maps, not of hashing millions of entries.
func NewMemStoreFrom(ctx context.Context, img *MemImage) (*MemStore, error) {
	m := NewMemStore()
	s := &img.Snapshot
	for _, p := range s.Peers {
		if _, ok := m.peers[p.ID]; ok {
			return nil, fmt.Errorf("%w: image: peer %s twice", ErrConflict, p.ID)
		}
		m.peers[p.ID] = p
		m.peerSeq = append(m.peerSeq, p.ID)
	}
	for i := range s.Jobs {
		j := s.Jobs[i]
		if _, ok := m.jobs[j.ID]; ok {
			return nil, fmt.Errorf("%w: image: job %s twice", ErrConflict, j.ID)
		}
		m.jobs[j.ID] = &j
		m.jobSeq = append(m.jobSeq, j.ID)
	}
	for i := range s.Replicas {
		r := s.Replicas[i]
		if _, ok := m.replicas[r.Lease]; ok {
			return nil, fmt.Errorf("%w: image: replica %s twice", ErrConflict, r.Lease)
		}
		if _, ok := m.jobs[r.Job]; !ok {
			return nil, fmt.Errorf("%w: image: replica %s of unknown job %s", ErrConflict, r.Lease, r.Job)
		}
		r.Prev = 0
		m.replicas[r.Lease] = &r
		m.repSeq = append(m.repSeq, r.Lease)
	}
	for i := range s.Summaries {
		sum := s.Summaries[i]
		j := m.jobs[sum.Job]
		switch {
		case j == nil:
			return nil, fmt.Errorf("%w: image: outcome summary of unknown job %s", ErrConflict, sum.Job)
		case m.sums[sum.Job] != nil:
			return nil, fmt.Errorf("%w: image: outcome summary of job %s twice", ErrConflict, sum.Job)
		case sum.Upto > j.Acked:
			return nil, fmt.Errorf("%w: image: outcome summary of job %s up to %d, past its acknowledged %d", ErrConflict, sum.Job, sum.Upto, j.Acked)
		}
		if err := sum.Check(); err != nil {
			return nil, fmt.Errorf("image: %w", err)
		}
		if m.sums == nil {
			m.sums = map[job.ID]*OutcomeSummary{}
		}
		m.sums[sum.Job] = &sum
	}
	for _, o := range s.Outcomes {
		if _, ok := m.jobs[o.Job]; !ok {
			return nil, fmt.Errorf("%w: image: outcome of unknown job %s", ErrConflict, o.Job)
		}
		if o.Seq != m.outcomeBase(o.Job)+int64(len(m.outcomes[o.Job]))+1 || m.decidedSeq(o.Job, o.Task) != 0 {
			return nil, fmt.Errorf("%w: image: outcome %d of job %s out of order or twice for task %d", ErrConflict, o.Seq, o.Job, o.Task)
		}
		m.outcomes[o.Job] = append(m.outcomes[o.Job], o)
		m.outcomeSeqs[key{o.Job, o.Seq}], m.outcomeTasks[key{o.Job, o.Task}] = true, o.Seq
	}
	for _, t := range s.Trust {
		k := trustKey{t.Kind, t.ID}
		if _, ok := m.trust[k]; ok {
			return nil, fmt.Errorf("%w: image: trust record %s %s twice", ErrConflict, t.Kind, t.ID)
		}
		t.Prev = 0
		m.trust[k] = t
		m.trustSeq = append(m.trustSeq, k)
	}
	base := img.LedgerBase
	if base+uint64(len(img.Ledger)) != s.LedgerSeq {
		return nil, fmt.Errorf("%w: image: %d ledger entries after %d, head says %d", ErrConflict, len(img.Ledger), base, s.LedgerSeq)
	}
	for i, e := range img.Ledger {
		if i%4096 == 0 && ctx.Err() != nil {
			return nil, fmt.Errorf("image: %w", ctx.Err())
		}
		if e.Seq != base+uint64(i)+1 {
			return nil, fmt.Errorf("%w: image: ledger entry %d does not follow entry %d", ErrConflict, e.Seq, base+uint64(i))
		}
		m.byPeer[e.Peer] = append(m.byPeer[e.Peer], e.Seq)
	}
	switch {
	case img.Kinds != nil:
		var sum uint64
		for _, n := range img.Kinds {
			sum += n
		}
		if sum != s.LedgerSeq {
			return nil, fmt.Errorf("%w: image: ledger counts add up to %d entries, head says %d", ErrConflict, sum, s.LedgerSeq)
		}
		m.kinds = img.Kinds
	case base > 0:
		return nil, fmt.Errorf("%w: image: leaves out the ledger up to %d without counting it", ErrConflict, base)
	default:
		for _, e := range img.Ledger {
			m.kinds[e.Kind]++
		}
	}
	if n := len(img.Ledger); n > 0 {
		m.head = img.Ledger[n-1].Hash()
	} else if base > 0 {
		// Every entry is archived: the image's head is all there is.
		m.head = s.LedgerHash
	}
	if m.head != s.LedgerHash {
		return nil, fmt.Errorf("%w: image: the ledger's head is %s, the image says %s", ErrConflict, m.head, s.LedgerHash)
	}
	m.ledger, m.ledgerBase = newEntryLog(base), base
	for _, e := range img.Ledger {
		m.ledger.push(e)
	}
	for id, j := range m.jobs {
		if j.Acked > m.outcomeBase(id) && len(m.outcomes[id]) > 0 {
			if m.toSum == nil {
				m.toSum = map[job.ID]bool{}
			}
			m.toSum[id] = true // ForgetAcked folds them
		}
	}
	for _, l := range m.repSeq {
		m.noteReplica(l)
	}
	return m, nil
}
