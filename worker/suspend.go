package worker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Suspend stops every worker process of the pool from using the CPU, at
// once: on Linux and macOS it sends SIGSTOP to each worker's process group
// (and the process), on Windows it calls NtSuspendProcess. It returns when
// the signals are sent, well within a second; the kernel stops a process
// before it next runs.
//
// While the pool is suspended:
//   - tasks already running stay where they are, their memory intact, and
//     go on from the same instruction after Resume: nothing is lost;
//   - a task's Timeout (and the compile and start limits) does not count
//     the time spent suspended: its deadline timer is paused;
//   - a call of Run that has not yet handed its task to a worker waits
//     until Resume (or its ctx, or Close) before it starts or picks a
//     worker: a fresh worker is never started suspended;
//   - cancelling a Run's ctx or Close still kills its worker at once
//     (SIGKILL ends a stopped process too).
//
// Suspend is idempotent and safe concurrently with every other method. It
// returns ErrClosed after Close, and otherwise an error only when some
// process could not be stopped (e.g. errors.ErrUnsupported on platforms
// without process suspension); the pool counts as suspended even then.
func (p *Pool) Suspend() error { return p.setSuspended(true) }

// Resume undoes Suspend: it lets every worker process run again (SIGCONT;
// NtResumeProcess), restarts the paused task deadlines, and releases the
// calls of Run waiting to start. It is idempotent and safe concurrently
// with every other method; errors are as for Suspend.
func (p *Pool) Resume() error { return p.setSuspended(false) }

// Suspended reports whether the pool is suspended.
func (p *Pool) Suspended() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.suspended
}

// PIDs returns the process IDs of the pool's worker processes, busy, idle
// or starting, in no particular order: "our" processes, e.g. for telling
// our GPU use from others' (GPULister.List).
func (p *Pool) PIDs() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	pids := make([]int, 0, len(p.procs))
	for pr := range p.procs {
		pids = append(pids, pr.pid)
	}
	return pids
}

func (p *Pool) setSuspended(on bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.suspended == on {
		return nil
	}
	p.suspended = on
	close(p.suspendChanged)
	p.suspendChanged = make(chan struct{})
	p.wakeThrottle()
	signal, verb := stopProcess, "suspend"
	if !on {
		signal, verb = continueProcess, "resume"
	}
	if !on && p.resting {
		// The duty cycle rests: its next turn lets the workers run.
		p.log.Debug("Workers resumed", "workers", len(p.procs), "resting", true)
		return nil
	}
	var errs []error
	for pr := range p.procs {
		if err := signal(pr.cmd); err != nil {
			errs = append(errs, fmt.Errorf("%s worker %d: %w", verb, pr.pid, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("worker: %w", errors.Join(errs...))
	}
	p.log.Debug("Workers "+verb+"ed", "workers", len(p.procs))
	return nil
}

// suspension returns whether the pool is suspended and a channel closed
// when that (or the duty cycle's rest) changes.
func (p *Pool) suspension() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.suspended, p.suspendChanged
}

// stoppage returns whether the workers are stopped, suspended or resting
// in the duty cycle of SetCPUShare, and a channel closed when that
// changes: what the deadlines of tasks and starts pause for.
func (p *Pool) stoppage() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.suspended || p.resting, p.suspendChanged
}

// track records a worker process just started, and stops it at once when
// the pool is suspended or resting meanwhile.
func (p *Pool) track(pr *proc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.procs[pr] = struct{}{}
	if p.suspended || p.resting {
		if err := stopProcess(pr.cmd); err != nil {
			p.log.Warn("Cannot suspend fresh worker", "pid", pr.pid, "err", err)
		}
	}
	p.wakeThrottle()
}

// untrack forgets a worker process about to be killed.
func (p *Pool) untrack(pr *proc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.procs, pr)
}

// waitResumed returns when the pool is not suspended, or with ctx.Err() or
// ErrClosed.
func (p *Pool) waitResumed(ctx context.Context) error {
	for {
		susp, changed := p.suspension()
		if !susp {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-p.done:
			return ErrClosed
		}
	}
}

// pauseTimer is a one-shot timer that can be paused: time spent paused
// does not count towards its duration. Not safe for concurrent use.
type pauseTimer struct {
	t      *time.Timer
	left   time.Duration // remaining when paused, or at since when running
	since  time.Time     // when it last started running
	paused bool
}

// newPauseTimer returns a timer that fires after d of running time,
// starting paused when paused is true.
func newPauseTimer(d time.Duration, paused bool) *pauseTimer {
	pt := &pauseTimer{t: time.NewTimer(d), left: d, since: time.Now(), paused: paused}
	if paused {
		pt.t.Stop()
	}
	return pt
}

// C is the channel on which the timer fires; nil (never ready) while
// paused.
func (pt *pauseTimer) C() <-chan time.Time {
	if pt.paused {
		return nil
	}
	return pt.t.C
}

// reset restarts the timer with d of running time left.
func (pt *pauseTimer) reset(d time.Duration) {
	pt.left, pt.since = d, time.Now()
	if pt.paused {
		pt.t.Stop()
		return
	}
	pt.t.Reset(d)
}

// setPaused pauses or resumes the timer.
func (pt *pauseTimer) setPaused(paused bool) {
	if paused == pt.paused {
		return
	}
	pt.paused = paused
	if paused {
		pt.t.Stop() // since Go 1.23 no stale value is left in C
		pt.left = max(pt.left-time.Since(pt.since), 0)
		return
	}
	pt.since = time.Now()
	pt.t.Reset(pt.left)
}

// stop releases the timer.
func (pt *pauseTimer) stop() { pt.t.Stop() }
