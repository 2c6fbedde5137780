package pool

import (
	"context"
	"errors"
	"fmt"

	"idlepool/job"
)

// KindAnchor is the ledger entry by which one shard's ledger names
// another's head, in a pool divided into shards (each keeps a hash chain
// of its own): Task is the other shard's number, Work the Seq of the
// entry of that shard's ledger it names, Digest that entry's Hash, and
// Reason says so in words ("shard 2's ledger at entry 1234"); Job, Peer,
// Owner and Lease are empty and Cost is 0. An anchor is never given to a
// device: it names no peer.
//
// The anchors tie the K chains together as a timestamping service's
// linking does (Haber and Stornetta, "How to time-stamp a digital
// document", 1991): a shard's past cannot be rewritten without breaking
// the anchors the other shards hold of it, and a head of any one chain
// that someone kept commits to every other chain's past up to the
// entries it anchors, since VerifyAnchors checks each anchor against the
// chain it names.
const KindAnchor = "anchor"

// ChainHead names one entry of a shard's ledger: its shard, its Seq and
// its Hash. The zero Seq names no entry (an empty ledger).
type ChainHead struct {
	Shard int
	Seq   uint64
	Hash  job.Digest
}

// AnchorHead returns the head the Scheduler's ledger offers the other
// shards to anchor: the newest committed entry that is not itself an
// anchor (anchors of anchors would make the shards anchor one another
// for ever while the pool is idle), or, until the first commit since the
// Scheduler loaded, the ledger's head as loaded. Its Shard is the
// Scheduler's (SchedulerConfig.Shard); Seq is 0 for an empty ledger.
func (s *Scheduler) AnchorHead() ChainHead {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ChainHead{Shard: s.cfg.Shard, Seq: s.workHead.Seq, Hash: s.workHead.Hash}
}

// Anchor appends one KindAnchor entry for each head of heads that names
// another shard of the pool (0 to Shards-1, not the Scheduler's own) at
// a Seq beyond the one this Scheduler anchored of that shard last, and
// returns once they are committed, with how many it appended. Heads it
// anchored before, of its own shard, or with Seq 0 are skipped; the
// Scheduler remembers what it anchored since it loaded, so the first call
// after a restart may anchor a head anchored before it. The caller
// vouches that each head names a committed entry of that shard's ledger
// (its scheduler's AnchorHead, passed on): an anchor naming anything
// else makes VerifyAnchors fail. Errors: ErrBadRequest in a pool not
// divided into shards or for a shard out of range (nothing appended);
// ErrStopped; the context's.
func (s *Scheduler) Anchor(ctx context.Context, heads []ChainHead) (int, error) {
	if s.cfg.Shards <= 1 {
		return 0, fmt.Errorf("anchor: %w: the pool is not divided into shards", ErrBadRequest)
	}
	for _, h := range heads {
		if h.Shard < 0 || h.Shard >= s.cfg.Shards {
			return 0, fmt.Errorf("anchor: %w: shard %d of a pool of %d shards", ErrBadRequest, h.Shard, s.cfg.Shards)
		}
	}
	s.mu.Lock()
	if s.stopped != nil {
		s.mu.Unlock()
		return 0, fmt.Errorf("anchor: %w", s.stopped)
	}
	if s.anchored == nil {
		s.anchored = make(map[int]uint64, s.cfg.Shards)
	}
	now := s.now().UnixMilli()
	n := 0
	for _, h := range heads {
		if h.Shard == s.cfg.Shard || h.Seq == 0 || h.Seq <= s.anchored[h.Shard] {
			continue
		}
		s.anchored[h.Shard] = h.Seq
		s.appendEntry(Entry{Kind: KindAnchor, Pool: s.cfg.Pool, Task: int64(h.Shard), Work: h.Seq, Digest: h.Hash,
			Time: now, Reason: fmt.Sprintf("shard %d's ledger at entry %d", h.Shard, h.Seq)})
		n++
	}
	if n == 0 {
		s.mu.Unlock()
		return 0, nil
	}
	w := s.pend
	s.mu.Unlock()
	if err := wait(ctx, w); err != nil {
		return n, fmt.Errorf("anchor: %w", err)
	}
	return n, nil
}

// noteWorkHead records, after a commit of entries, the newest of them
// that is not an anchor as the head AnchorHead offers. s.mu is held.
func (s *Scheduler) noteWorkHead(entries []Entry) {
	for i := len(entries) - 1; i >= 0; i-- {
		if entries[i].Kind != KindAnchor {
			s.workHead = ChainHead{Shard: s.cfg.Shard, Seq: entries[i].Seq, Hash: entries[i].Hash()}
			return
		}
	}
}

// AnchorError says which anchor of a divided pool's ledgers does not
// hold: the shard whose ledger holds it, its Seq there, and what is
// wrong. It matches ErrLedger with errors.Is. Ahead is set when the
// anchor names an entry past the end of the other shard's ledger as
// given, which is no fault when that ledger was read before the entry
// was added: read it again from its end and check again.
type AnchorError struct {
	Shard   int    // the shard whose ledger holds the anchor
	Seq     uint64 // the anchor's Seq in that ledger
	Of      int    // the shard it names
	Ahead   bool   // it names an entry past the end of shard Of's ledger as given
	Problem string
}

// Error names the anchor and the problem.
func (e *AnchorError) Error() string {
	return fmt.Sprintf("pool: ledgers do not verify: shard %d entry %d: %s", e.Shard, e.Seq, e.Problem)
}

// Is makes an *AnchorError match ErrLedger.
func (e *AnchorError) Is(target error) bool { return target == ErrLedger }

// VerifyAnchors checks the anchors between the ledgers of a pool divided
// into len(chains) shards, chains[i] being shard i's ledger from its
// first entry (each checked on its own by VerifyLedger, which this does
// not repeat). Every KindAnchor entry of chains[i] must name another
// shard j of the pool (Task), an entry of chains[j] (Work, its Seq),
// and that entry's Hash (Digest); its Job, Peer, Owner and Lease must be
// empty and its Cost 0. It returns how many anchors each chain holds. The
// error is an *AnchorError (matching ErrLedger) naming the first anchor,
// in shard order and then Seq order, that does not hold; an anchor past
// the end of the ledger it names has Ahead set, and is reported only
// when no anchor is wrong otherwise.
func VerifyAnchors(chains [][]Entry) ([]int, error) {
	counts := make([]int, len(chains))
	var ahead *AnchorError
	for i, chain := range chains {
		for _, e := range chain {
			if e.Kind != KindAnchor {
				continue
			}
			counts[i]++
			bad := func(format string, args ...any) error {
				return &AnchorError{Shard: i, Seq: e.Seq, Of: int(e.Task), Problem: fmt.Sprintf(format, args...)}
			}
			switch {
			case e.Task < 0 || e.Task >= int64(len(chains)):
				return counts, bad("an anchor of shard %d, in a pool of %d shards", e.Task, len(chains))
			case e.Task == int64(i):
				return counts, bad("an anchor of its own ledger")
			case e.Work == 0:
				return counts, bad("an anchor of shard %d's entry 0", e.Task)
			case e.Job != (job.ID{}) || e.Peer != "" || e.Owner != "" || e.Lease != "" || e.Cost != 0:
				return counts, bad("an anchor naming a job, peer, owner, lease or cost")
			}
			j := int(e.Task)
			if e.Work > uint64(len(chains[j])) {
				if ahead == nil {
					ahead = &AnchorError{Shard: i, Seq: e.Seq, Of: j, Ahead: true,
						Problem: fmt.Sprintf("anchors shard %d's entry %d, past the %s given of it", j, e.Work, entriesWord(len(chains[j])))}
				}
				continue
			}
			if h := chains[j][e.Work-1].Hash(); h != e.Digest {
				return counts, bad("anchors shard %d's entry %d as %s, but that entry's hash is %s (one of the two ledgers was rewritten)",
					j, e.Work, e.Digest, h)
			}
		}
	}
	if ahead != nil {
		return counts, ahead
	}
	return counts, nil
}

// entriesWord says "1 entry", "2 entries".
func entriesWord(n int) string {
	if n == 1 {
		return "1 entry"
	}
	return fmt.Sprintf("%d entries", n)
}

// IsAnchorAhead reports whether err is an *AnchorError with Ahead set,
// and returns it.
func IsAnchorAhead(err error) (*AnchorError, bool) {
	var ae *AnchorError
	if errors.As(err, &ae) && ae.Ahead {
		return ae, true
	}
	return nil, false
}
