package pool

import (
	"context"
	"fmt"

	"idlepool/job"
)

// Cancel withdraws job id on behalf of peer, a device of the job's owner,
// and returns once that is committed: the job leases nothing more, is no
// longer listed as seeking compute, and every replica of a task without
// an outcome is withdrawn (ReplicaWithdrawn): a live lease's next
// heartbeat or submission answers ErrJobCancelled, so its agent stops the
// task, and results returned for undecided tasks are dropped without
// ledger entries. Decided tasks keep their outcomes and receipts, and the
// merger may still read and acknowledge them. Cancelling a cancelled job
// is nil; AddJob refuses the job from then on. Errors: ErrUnknownPeer,
// ErrUnknownJob, ErrNotOwner, ErrStopped.
func (s *Scheduler) Cancel(ctx context.Context, peer string, id job.ID) error {
	s.mu.Lock()
	if s.stopped != nil {
		s.mu.Unlock()
		return fmt.Errorf("cancel job %s: %w", id, s.stopped)
	}
	p, ok := s.peers[peer]
	if !ok {
		s.mu.Unlock()
		return fmt.Errorf("cancel job %s: %w: %s", id, ErrUnknownPeer, peer)
	}
	js, ok := s.jobs[id]
	switch {
	case !ok:
		s.mu.Unlock()
		return fmt.Errorf("cancel job %s: %w", id, ErrUnknownJob)
	case p.Owner != js.rec.Owner:
		s.mu.Unlock()
		return fmt.Errorf("cancel job %s: %w: it belongs to owner %s, device %s to owner %s", id, ErrNotOwner, js.rec.Owner, peer, p.Owner)
	case !js.rec.Cancelled.IsZero():
		w := js.cancelBatch
		s.mu.Unlock()
		return wait(ctx, w)
	}
	js.rec.Cancelled = s.now()
	s.pend.b.Cancels = append(s.pend.b.Cancels, CancelRecord{Job: id, At: js.rec.Cancelled})
	var withdrawn int
	for _, ts := range js.active {
		for _, r := range append(append([]*replica(nil), ts.live...), ts.returned...) {
			if r.rec.State == ReplicaLeased {
				s.notLive(r)
			}
			r.rec.State, r.rec.Result, r.ts = ReplicaWithdrawn, nil, nil
			s.unclaim(r)
			s.putReplica(r)
			withdrawn++
		}
	}
	clear(js.active)
	js.want = nil
	js.touch()
	js.cancelBatch = s.changed()
	w, accepted, failed := js.cancelBatch, js.accepted, js.failed
	s.mu.Unlock()
	s.log.Info("Job cancelled", "job", id.String(), "peer", peer, "owner", p.Owner, "withdrawnReplicas", withdrawn,
		"accepted", accepted, "failed", failed)
	return wait(ctx, w)
}
