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
// its own, and until it does every Sample reports the probe as still
// running instead of starting a second copy.
type probe[T any] struct {
	name string
	run  func(ctx context.Context) (T, string, error)

	mu  sync.Mutex
	cur *flight[T] // the run in progress, nil when none
}

// flight is one run of a probe. val, src and err are written before done is
// closed and read only after.
type flight[T any] struct {
	since time.Time
	done  chan struct{}
	val   T
	src   string
	err   error
}

// start returns the probe's run in progress, starting one if none is
// running. It returns nil when the Sampler is closed.
func (p *probe[T]) start(s *Sampler) *flight[T] {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		return p.cur
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	f := &flight[T]{since: time.Now(), done: make(chan struct{})}
	p.cur = f
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(s.life, s.timeout)
		defer cancel()
		f.val, f.src, f.err = p.run(ctx)
		p.mu.Lock()
		if p.cur == f {
			p.cur = nil
		}
		p.mu.Unlock()
		close(f.done)
	}()
	return f
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
