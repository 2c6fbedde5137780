package pool

import (
	"context"
	"errors"
	"fmt"
)

// ReplicaArchive is a Store that also returns one committed replica by
// its lease ID (ErrUnknownLease when there is none). With such a Store
// the Scheduler keeps a replica in memory only while it is in play
// (leased, or returned and waiting for its task's decision): once a
// replica is settled (expired, released, failed on its machine,
// cancelled, withdrawn, agreed, deviated or unverified) and that change is
// committed, it leaves memory, and the rare request that names it later (a
// result sent again, a heartbeat of a task decided meanwhile) is answered
// from the store. So memory does not grow with the tasks a pool has
// decided (DESIGN.md invariant 7 for the coordinator). Both stores of the
// project implement it.
type ReplicaArchive interface {
	Replica(ctx context.Context, lease string) (ReplicaRecord, error)
}

// archive returns the store as a ReplicaArchive, or nil.
func (s *Scheduler) archive() ReplicaArchive {
	a, _ := s.store.(ReplicaArchive)
	return a
}

// settle notes that r is settled (r.ts == nil: its state never changes
// again): once the pending batch is committed it leaves memory, when the
// store can return it later. s.mu is held.
func (s *Scheduler) settle(r *replica) {
	if r.ts != nil || s.archive() == nil {
		return
	}
	p := s.pend
	p.settled = append(p.settled, r)
}

// forget drops the settled replicas of committed batch p from memory;
// s.mu is held.
func (s *Scheduler) forget(p *pending) {
	for _, r := range p.settled {
		if s.leases[r.rec.Lease] == r {
			delete(s.leases, r.rec.Lease)
		}
	}
	p.settled = nil
	s.compactDeadlines()
}

// archived returns replica lease from the store, for a lease that is not
// in memory; ok is false when the store has none (or keeps no archive).
// s.mu is not held (lookup releases it for the read): it reads only the
// store, which is safe for concurrent use.
func (s *Scheduler) archived(ctx context.Context, lease string) (rec ReplicaRecord, ok bool, err error) {
	a := s.archive()
	if a == nil {
		return ReplicaRecord{}, false, nil
	}
	rec, err = a.Replica(ctx, lease)
	if errors.Is(err, ErrUnknownLease) {
		return ReplicaRecord{}, false, nil
	}
	if err != nil {
		return ReplicaRecord{}, false, fmt.Errorf("read archived lease %s: %w", lease, err)
	}
	return rec, true, nil
}

// compactDeadlines rebuilds the deadline heap without its stale items
// (leases returned or ended since they were pushed, older deadlines of
// heartbeated leases) once they are most of it, so that it holds about
// the live leases rather than every lease of the last lease timeout.
// s.mu is held.
func (s *Scheduler) compactDeadlines() {
	if len(s.deadlines) <= 2*s.deadlinesKept+1024 {
		return
	}
	kept := s.deadlines[:0]
	for _, it := range s.deadlines {
		if it.r.rec.State == ReplicaLeased && it.r.rec.Deadline.Equal(it.at) {
			kept = append(kept, it)
		}
	}
	clear(s.deadlines[len(kept):])
	s.deadlines = kept
	s.deadlines.init()
	s.deadlinesKept = len(kept)
}

// Footprint counts what a Scheduler holds in memory, for tests and
// metrics: the point of the archive is that these follow the work in
// play, not the work done.
type Footprint struct {
	Replicas  int // replica records in memory (leased, returned, and settled ones not yet committed)
	Deadlines int // items of the lease deadline heap, stale ones included
	Outcomes  int // outcomes waiting for their merger's acknowledgement
	Active    int // undecided tasks that have or had replicas
	Open      int // jobs a lease looks at: those not complete, and those completed since the last lease
	// Visited counts the jobs leases looked at so far, to choose
	// candidates and to end stalls: what a lease costs follows it.
	Visited int64
}

// Footprint returns what s holds in memory now.
func (s *Scheduler) Footprint() Footprint {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := Footprint{Replicas: len(s.leases), Deadlines: len(s.deadlines)}
	if s.open != nil {
		f.Open, f.Visited = len(s.open.jobs), s.open.visited
	}
	for _, js := range s.queue {
		f.Outcomes += len(js.outcomes)
		f.Active += len(js.active)
	}
	return f
}
