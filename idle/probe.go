package idle

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// probe runs one source off the caller's path, at most one copy at a time.
//
// Ownership: the Sampler owns every probe goroutine. A goroutine runs the
// source once with a context that ends after the probe timeout or when the
// Sampler is closed, stores the answer in its flight and exits. Callers only
// wait on a flight's done channel, each up to its own deadline, so a source
// that ignores its context delays nobody: its goroutine is left to finish on
// its own, and meanwhile every Sample reports the probe as still running
// instead of starting a second copy, until the run has lasted its give-up
// time. Then the run is given up (its goroutine still finishes on its own)
// and the next Sample starts a new one: a source that hung once (a stuck
// X server, a D-Bus call that never returns) is tried again. The give-up
// time starts at giveUpFirst (at least 20 probe timeouts) and doubles with
// each run given up in a row, up to giveUpMax; a run that answers resets
// it. At most maxAbandoned runs given up may be still running at once;
// beyond that the probe waits for one of them to return.
type probe[T any] struct {
	name string
	run  func(ctx context.Context) (T, string, error)

	mu        sync.Mutex
	cur       *flight[T]    // the run in progress, nil when none
	abandoned int           // runs given up whose goroutines still run
	giveUp    time.Duration // how long the run in progress may take before it is given up; 0: first
}

// The give-up times of a probe whose source ignores its context (see
// probe).
const (
	giveUpFirst  = 10 * time.Second
	giveUpMax    = 5 * time.Minute
	maxAbandoned = 2
)

// flight is one run of a probe. val, src and err are written before done is
// closed and read only after.
type flight[T any] struct {
	since     time.Time // wall clock, for messages
	started   time.Time // the Sampler's clock, for giving up
	abandoned bool      // given up; guarded by the probe's mu
	done      chan struct{}
	val       T
	src       string
	err       error
}

// start returns the probe's run in progress, starting one if none is
// running or the one running has been given up. It returns nil when the
// Sampler is closed.
func (p *probe[T]) start(s *Sampler) *flight[T] {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := s.clock()
	if p.cur != nil {
		if p.abandoned >= maxAbandoned || now.Sub(p.cur.started) < p.giveUpAfter(s.timeout) {
			return p.cur
		}
		p.cur.abandoned = true
		p.abandoned++
		p.giveUp = min(2*p.giveUpAfter(s.timeout), giveUpMax)
		p.cur = nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	f := &flight[T]{since: time.Now(), started: now, done: make(chan struct{})}
	p.cur = f
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.life, s.timeout)
		defer cancel()
		f.val, f.src, f.err = p.run(ctx)
		p.mu.Lock()
		switch {
		case f.abandoned:
			p.abandoned--
		case p.cur == f:
			p.cur = nil
			p.giveUp = 0
		}
		p.mu.Unlock()
		close(f.done)
	}()
	return f
}

// giveUpAfter is how long the run in progress may take. p.mu is held.
func (p *probe[T]) giveUpAfter(timeout time.Duration) time.Duration {
	if p.giveUp > 0 {
		return p.giveUp
	}
	return max(giveUpFirst, 20*timeout)
}

// await waits for f until ctx is done and turns the outcome into a Reading.
// begun is when the calling Sample began: a flight older than that was
// started by an earlier call and is reported as still running.
func (p *probe[T]) await(ctx context.Context, f *flight[T], begun time.Time, timeout time.Duration) Reading[T] {
	if f == nil {
		return Reading[T]{Err: fmt.Sprintf("%s: %v", p.name, ErrSamplerClosed)}
	}
	select {
	case <-f.done:
		if f.err != nil {
			return Reading[T]{Source: f.src, Err: f.err.Error()}
		}
		return Reading[T]{Value: f.val, Known: true, Source: f.src}
	case <-ctx.Done():
	}
	select {
	case <-f.done: // finished just as the deadline passed: take it
		if f.err == nil {
			return Reading[T]{Value: f.val, Known: true, Source: f.src}
		}
	default:
	}
	return Reading[T]{Err: timeoutReason(ctx, p.name, f.since, begun, timeout)}
}

func timeoutReason(ctx context.Context, name string, since, begun time.Time, timeout time.Duration) string {
	if err := context.Cause(ctx); err != nil && err != context.DeadlineExceeded {
		return fmt.Sprintf("%s: sampling stopped: %v", name, err)
	}
	if since.Before(begun) {
		return fmt.Sprintf("%s: %v: probe still running since %s", name, ErrProbeTimeout, since.Format("15:04:05.000"))
	}
	return fmt.Sprintf("%s: %v after %v", name, ErrProbeTimeout, timeout)
}
