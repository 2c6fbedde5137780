package agent

import (
	"context"
	"errors"
	"sync"
	"time"

	"idlepool/pool"
)

// queuedLeases keeps a slot's leases alive while they wait behind the
// one it computes (Config.LeaseAhead): each is extended like a running
// task's lease (POST /v1/leases/{lease}/heartbeat, a third of the time
// it has left) until its task starts, so that a lease waiting behind
// others does not expire and the pool does not lease its task again
// meanwhile. A lease the pool says is over while it waits (expired,
// its task decided by others' results, its job cancelled) is not
// computed. Its methods are safe for concurrent use.
type queuedLeases struct {
	mu      sync.Mutex
	stops   map[string]func()    // lease → stops its heartbeat and waits until it has
	ended   map[string]error     // lease → why the pool ended it while it waited
	extends map[string]time.Time // lease → its deadline as last extended
}

// holdQueued starts extending each of leases until start or stopAll
// names it; its heartbeats end with ctx.
func (a *Agent) holdQueued(ctx context.Context, leases []pool.Lease) *queuedLeases {
	q := &queuedLeases{stops: map[string]func(){}, ended: map[string]error{}, extends: map[string]time.Time{}}
	for _, l := range leases {
		hctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		// Started when its first extension is due: a lease whose task
		// starts sooner, as most do, costs no goroutine and no timer's
		// channel.
		t := time.AfterFunc(a.queuedWait(l.Deadline), func() {
			defer close(done)
			a.extendQueued(hctx, l, q)
		})
		q.stops[l.ID] = func() {
			cancel()
			if t.Stop() { // it never started
				close(done)
			}
			<-done
		}
	}
	return q
}

// start stops extending lease l, whose task starts now, and returns l
// with its deadline as last extended, or the error with which the pool
// ended it while it waited.
func (q *queuedLeases) start(l pool.Lease) (pool.Lease, error) {
	q.mu.Lock()
	stop := q.stops[l.ID]
	delete(q.stops, l.ID)
	q.mu.Unlock()
	if stop != nil {
		stop()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if dl, ok := q.extends[l.ID]; ok {
		l.Deadline = dl
	}
	return l, q.ended[l.ID]
}

// stopAll stops extending every lease still waiting.
func (q *queuedLeases) stopAll() {
	q.mu.Lock()
	stops := q.stops
	q.stops = map[string]func(){}
	q.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
}

// queuedRetry is the wait between heartbeats of a waiting lease whose
// deadline is unknown or past while the pool cannot be reached.
const queuedRetry = 10 * time.Second

// queuedWait is how long a waiting lease whose deadline is deadline
// waits for its next extension: a third of the time it has left, at
// least 100 ms, or queuedRetry when its deadline is unknown or past.
func (a *Agent) queuedWait(deadline time.Time) time.Duration {
	if left := deadline.Sub(a.cfg.Now()) / 3; left > 0 {
		return max(left, 100*time.Millisecond)
	}
	return queuedRetry
}

// extendQueued extends lease l at once and then every queuedWait until
// ctx ends or the pool says the lease is over (recorded in q): its
// caller starts it when the first extension is due. A pool that cannot
// be reached is asked again later; whether the task is then abandoned
// is decided once it runs (heartbeat).
func (a *Agent) extendQueued(ctx context.Context, l pool.Lease, q *queuedLeases) {
	deadline := l.Deadline
	for {
		if ctx.Err() != nil {
			return
		}
		dl, err := a.c.Heartbeat(ctx, l.ID)
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			if !dl.IsZero() {
				deadline = dl
				q.mu.Lock()
				q.extends[l.ID] = dl
				q.mu.Unlock()
			}
		case isTaskDecided(err), errors.Is(err, ErrLeaseExpired), errors.Is(err, ErrNotFound), errors.Is(err, ErrForbidden):
			q.mu.Lock()
			q.ended[l.ID] = err
			q.mu.Unlock()
			return
		default:
			a.log.Debug("Heartbeat of a waiting lease failed", "lease", l.ID, "err", err)
			deadline = time.Time{} // ask again after queuedRetry
		}
		if sleep(ctx, a.queuedWait(deadline)) != nil {
			return
		}
	}
}
