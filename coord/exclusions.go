package coord

import (
	"context"
	"errors"
	"sync"
	"time"

	"idlepool/pool"
)

// ExclusionBoard is where the schedulers of a pool divided into shards
// meet on exclusions (cluster.Exclusions, on a replicated JetStream
// bucket): a device excluded by one shard's Scheduler is excluded by
// every shard's (ClusterHooks.Exclusions).
type ExclusionBoard interface {
	// Publish stores e for every shard, never shortening an exclusion
	// stored before of the same device or owner. An error matching
	// pool.ErrStoreUnavailable means the board did not answer: publish
	// again later.
	Publish(ctx context.Context, e pool.Exclusion) error
	// Watch calls f with every exclusion stored, those stored before
	// it was called first, then each new one, until ctx ends, and then
	// returns nil; f may be handed one exclusion several times. An
	// error means the watch could not start or was ended (one matching
	// pool.ErrStoreUnavailable: watch again).
	Watch(ctx context.Context, f func(pool.Exclusion)) error
}

// Backoff of publishing an exclusion, and of watching the board again,
// while the board does not answer.
const (
	exclusionRetryMin = 100 * time.Millisecond
	exclusionRetryMax = 5 * time.Second
)

// outbox holds the exclusions this Server's scheduler decided and the
// board has not taken yet, in the order they were decided. Its add is
// the scheduler's OnExclude: it returns at once.
type outbox struct {
	mu    sync.Mutex
	queue []pool.Exclusion
	ready chan struct{} // holds a token while queue may be non-empty
}

func newOutbox() *outbox { return &outbox{ready: make(chan struct{}, 1)} }

// add queues e; called with the scheduler's lock held, it never blocks.
func (o *outbox) add(e pool.Exclusion) {
	o.mu.Lock()
	o.queue = append(o.queue, e)
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// take returns and empties the queue.
func (o *outbox) take() []pool.Exclusion {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queue
	o.queue = nil
	return q
}

// publishExclusions hands each exclusion the scheduler decides to the
// board, in order, until ctx ends (the Server stops). One the board does
// not take because it did not answer is tried again with backoff, and
// those after it wait; one it refuses otherwise is logged and dropped.
// Exclusions still waiting when ctx ends are logged and lost to the
// other shards (this shard keeps them in its store).
func (s *Server) publishExclusions(ctx context.Context, board ExclusionBoard, out *outbox) {
	var pending []pool.Exclusion
	defer func() {
		for _, e := range append(pending, out.take()...) {
			s.log.Warn("Exclusion not published to the other shards: the coordinator stopped first",
				"peer", e.Device, "owner", e.Owner, "until", e.Until.UTC().Format(time.RFC3339))
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-out.ready:
		}
		pending = append(pending, out.take()...)
		for len(pending) > 0 {
			e := pending[0]
			wait := exclusionRetryMin
			for tries := 1; ; tries++ {
				err := board.Publish(ctx, e)
				if err == nil {
					s.log.Info("Exclusion published to the other shards", "peer", e.Device, "owner", e.Owner,
						"until", e.Until.UTC().Format(time.RFC3339))
					break
				}
				if ctx.Err() != nil {
					return
				}
				if !errors.Is(err, pool.ErrStoreUnavailable) {
					s.log.Error("Exclusion not published to the other shards", "peer", e.Device, "owner", e.Owner, "err", err)
					break
				}
				if tries == 1 || tries%10 == 0 {
					s.log.Warn("Exclusions board unavailable; publishing again", "peer", e.Device, "tries", tries, "err", err)
				}
				if !sleep(ctx, wait) {
					return
				}
				wait = min(2*wait, exclusionRetryMax)
			}
			pending = pending[1:]
		}
	}
}

// applyExclusions watches the board until ctx ends (the Server stops)
// and applies each exclusion stored there to the scheduler
// (pool.Scheduler.Exclude: those it already has, its own among them,
// change nothing). A watch that ends or does not start is started again
// with backoff; an exclusion the scheduler does not take is logged.
func (s *Server) applyExclusions(ctx context.Context, board ExclusionBoard) {
	apply := func(e pool.Exclusion) {
		if err := s.sched.Exclude(ctx, e); err != nil && ctx.Err() == nil {
			s.log.Error("Exclusion from another shard not applied", "peer", e.Device, "owner", e.Owner, "err", err)
		}
	}
	wait := exclusionRetryMin
	for {
		start := time.Now()
		err := board.Watch(ctx, apply)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the watch ended") // before ctx did, against its contract
		}
		if time.Since(start) > exclusionRetryMax {
			wait = exclusionRetryMin // it ran a while: a new fault
		}
		s.log.Warn("Watch of the exclusions board ended; watching again", "err", err, "in", wait)
		if !sleep(ctx, wait) {
			return
		}
		wait = min(2*wait, exclusionRetryMax)
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
