package coord

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"idlepool/job"
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

// DeviationBoard is where the schedulers of a pool divided into shards
// meet on deviations (cluster.Deviations, on a replicated JetStream
// bucket): a deviation one shard's Scheduler decides counts on every
// shard's (ClusterHooks.Deviations).
type DeviationBoard interface {
	// Publish stores d for every shard; storing it again changes
	// nothing. An error matching pool.ErrStoreUnavailable means the
	// board did not answer: publish again later.
	Publish(ctx context.Context, d pool.Deviation) error
	// Watch calls f with every deviation stored, those stored before it
	// was called first, then each new one, until ctx ends, and then
	// returns nil; f may be handed one deviation several times. An
	// error means the watch could not start or was ended (one matching
	// pool.ErrStoreUnavailable: watch again).
	Watch(ctx context.Context, f func(pool.Deviation)) error
}

// SecretBoard is where the schedulers of a pool divided into shards meet
// on the digests of their jobs' known-answers files (cluster.Secrets, on
// a replicated JetStream bucket): shard 0 serves every shard's files,
// and must refuse those (ClusterHooks.Secrets).
type SecretBoard interface {
	// Publish stores d for every shard; storing it again changes
	// nothing. An error matching pool.ErrStoreUnavailable means the
	// board did not answer: publish again later.
	Publish(ctx context.Context, d job.Digest) error
	// Watch calls f with every digest stored, those stored before it
	// was called first, then each new one, until ctx ends, and then
	// returns nil. An error means the watch could not start or was
	// ended (one matching pool.ErrStoreUnavailable: watch again).
	Watch(ctx context.Context, f func(job.Digest)) error
}

// Backoff of publishing an exclusion or deviation, and of watching a
// board again, while the board does not answer.
const (
	exclusionRetryMin = 100 * time.Millisecond
	exclusionRetryMax = 5 * time.Second
)

// outbox holds what this Server's scheduler decided (exclusions,
// deviations) and the board has not taken yet, in the order decided.
// Its add is the scheduler's OnExclude or OnDeviate: it returns at once.
type outbox[T any] struct {
	mu    sync.Mutex
	queue []T
	ready chan struct{} // holds a token while queue may be non-empty
}

func newOutbox[T any]() *outbox[T] { return &outbox[T]{ready: make(chan struct{}, 1)} }

// add queues e; called with the scheduler's lock held, it never blocks.
func (o *outbox[T]) add(e T) {
	o.mu.Lock()
	o.queue = append(o.queue, e)
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// take returns and empties the queue.
func (o *outbox[T]) take() []T {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queue
	o.queue = nil
	return q
}

// shared names what a board carries between the shards, for publishAll
// and applyAll: what, in the logs ("Exclusion", "Deviation"), and the
// log attributes of one.
type shared[T any] struct {
	what  string
	attrs func(T) []any
}

var (
	sharedExclusion = shared[pool.Exclusion]{what: "Exclusion", attrs: func(e pool.Exclusion) []any {
		return []any{"peer", e.Device, "owner", e.Owner, "until", e.Until.UTC().Format(time.RFC3339)}
	}}
	sharedDeviation = shared[pool.Deviation]{what: "Deviation", attrs: func(d pool.Deviation) []any {
		return []any{"peer", d.Device, "owner", d.Owner, "at", d.At.UTC().Format(time.RFC3339Nano)}
	}}
	sharedSecret = shared[job.Digest]{what: "Known-answers digest", attrs: func(d job.Digest) []any {
		return []any{"digest", d.String()}
	}}
)

// publishAll hands each item the scheduler decides (out) to the board
// (publish), in order, until ctx ends (the Server stops). One the board
// does not take because it did not answer is tried again with backoff,
// and those after it wait; one it refuses otherwise is logged and
// dropped. Items still waiting when ctx ends are logged and lost to the
// other shards (this shard keeps them in its store).
func publishAll[T any](ctx context.Context, s *Server, kind shared[T], publish func(context.Context, T) error, out *outbox[T]) {
	var pending []T
	defer func() {
		for _, e := range append(pending, out.take()...) {
			s.log.Warn(kind.what+" not published to the other shards: the coordinator stopped first", kind.attrs(e)...)
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
				err := publish(ctx, e)
				if err == nil {
					s.log.Info(kind.what+" published to the other shards", kind.attrs(e)...)
					break
				}
				if ctx.Err() != nil {
					return
				}
				if !errors.Is(err, pool.ErrStoreUnavailable) {
					s.log.Error(kind.what+" not published to the other shards", append(kind.attrs(e), "err", err)...)
					break
				}
				if tries == 1 || tries%10 == 0 {
					s.log.Warn(kind.what+"s board unavailable; publishing again", append(kind.attrs(e), "tries", tries, "err", err)...)
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

// applyAll watches the board (watch) until ctx ends (the Server stops)
// and applies each item stored there to the scheduler (apply:
// pool.Scheduler.Exclude or Deviated, for which those it already has,
// its own among them, change nothing). A watch that ends or does not
// start is started again with backoff; an item the scheduler does not
// take is logged.
func applyAll[T any](ctx context.Context, s *Server, kind shared[T], watch func(context.Context, func(T)) error, apply func(context.Context, T) error) {
	f := func(e T) {
		if err := apply(ctx, e); err != nil && ctx.Err() == nil {
			s.log.Error(kind.what+" from another shard not applied", append(kind.attrs(e), "err", err)...)
		}
	}
	wait := exclusionRetryMin
	for {
		start := time.Now()
		err := watch(ctx, f)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the watch ended") // before ctx did, against its contract
		}
		if time.Since(start) > exclusionRetryMax {
			wait = exclusionRetryMin // it ran a while: a new fault
		}
		s.log.Warn("Watch of the "+strings.ToLower(kind.what)+"s board ended; watching again", "err", err, "in", wait)
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
