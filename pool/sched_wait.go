package pool

import (
	"context"
	"time"

	"idlepool/job"
)

// MaxResultsWait is the longest WaitResults waits: well under the
// coordinator's shutdown grace, so that a waiting merger never holds a
// shutdown up.
const MaxResultsWait = 5 * time.Second

// commitSignal returns a channel that is closed when the next batch is
// committed; s.mu is held.
func (s *Scheduler) commitSignal() <-chan struct{} {
	if s.committedCh == nil {
		s.committedCh = make(chan struct{})
	}
	return s.committedCh
}

// signalCommit wakes every WaitResults waiting for a commit; s.mu is held.
func (s *Scheduler) signalCommit() {
	if s.committedCh != nil {
		close(s.committedCh)
		s.committedCh = nil
	}
}

// WaitResults is Results as a long poll: when no committed outcome with
// Seq > after is there yet, it waits until one is committed, the job is
// cancelled or complete, the scheduler is stopping, wait (at most
// MaxResultsWait) has passed, or ctx ends, and then answers as Results
// does (possibly nothing). A merger that follows a job with it asks once
// per batch of outcomes instead of polling. Errors are those of Results;
// an ended ctx is not one.
func (s *Scheduler) WaitResults(ctx context.Context, peer string, id job.ID, after int64, max int, wait time.Duration) ([]Verified, error) {
	wait = min(wait, MaxResultsWait)
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	for {
		s.mu.Lock()
		signal := s.commitSignal()
		js := s.jobs[id]
		idle := s.stopped != nil || js != nil && (!js.rec.Cancelled.IsZero() || js.complete() && js.committed == js.seq)
		s.mu.Unlock()
		out, err := s.Results(ctx, peer, id, after, max)
		if err != nil || len(out) > 0 || idle || timeout == nil {
			return out, err
		}
		select {
		case <-signal:
		case <-timeout:
			return s.Results(ctx, peer, id, after, max)
		case <-ctx.Done():
			return nil, nil
		}
	}
}
