package worker

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// CPUPeriod is the period of the duty cycle that bounds the workers' CPU
// time (SetCPUShare): with a share of 0.5 every worker computes 50 ms and
// is stopped 50 ms of every 100. Short enough that no one notices a
// rhythm, long enough that the signals cost nothing measurable.
const CPUPeriod = 100 * time.Millisecond

// MinCPUShare is the smallest share SetCPUShare takes: 5 ms of every
// period.
const MinCPUShare = 0.05

// checkCPUShare says what is wrong with share as a CPU share.
func checkCPUShare(share float64) error {
	if math.IsNaN(share) || share < MinCPUShare || share > 1 {
		return fmt.Errorf("%w: CPU share %g: want a share from %g to 1", ErrInvalidRequest, share, MinCPUShare)
	}
	return nil
}

// SetCPUShare bounds the CPU time of every worker process to share of the
// wall-clock time, from MinCPUShare to 1 (1: no bound), by a duty cycle of
// CPUPeriod: the pool lets its workers run for share of each period and
// stops them for the rest, as Suspend does (SIGSTOP and SIGCONT on Linux
// and macOS, NtSuspendProcess and NtResumeProcess on Windows). All
// workers run and rest together, so the pool uses at most share of the
// cores it holds. The cycle runs only while a worker has a task and the
// pool is not suspended; Suspend wins over it (a suspended worker stays
// stopped), and a task's Timeout, like a suspension, does not count the
// rests, so a task takes about 1/share as long and is not cut short for
// it. It is safe concurrently with every other method; the new share
// applies from the next period. It returns ErrInvalidRequest for a share
// out of range, ErrClosed after Close, and errors.ErrUnsupported where
// processes cannot be suspended.
func (p *Pool) SetCPUShare(share float64) error {
	if err := checkCPUShare(share); err != nil {
		return err
	}
	if share < 1 && !canSuspend {
		return fmt.Errorf("worker: CPU share: %w", errors.ErrUnsupported)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if p.cpuShare != share {
		p.log.Debug("Workers' CPU share set", "share", share)
	}
	p.cpuShare = share
	p.wakeThrottle()
	return nil
}

// CPUShare returns the share of time workers may compute (SetCPUShare).
func (p *Pool) CPUShare() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cpuShare
}

// wakeThrottle tells the duty cycle to look at the pool again (a share
// set, a worker started, the pool resumed). p.mu is held.
func (p *Pool) wakeThrottle() {
	select {
	case p.throttleWake <- struct{}{}:
	default:
	}
}

// throttle is the duty cycle of SetCPUShare, run by one goroutine from
// NewPool until Close. While the share is below 1, a worker has a task
// (is not on the idle list) and the pool is not suspended, it lets the workers run for share of each
// CPUPeriod and rests them (setResting) for the rest; otherwise it lets
// them run and waits to be woken.
func (p *Pool) throttle() {
	defer close(p.throttleDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	sleep := func(d time.Duration) bool {
		timer.Reset(d)
		select {
		case <-timer.C:
			return true
		case <-p.done:
			return false
		}
	}
	for {
		p.mu.Lock()
		share := p.cpuShare
		cycle := share < 1 && !p.suspended && len(p.procs) > len(p.idle)
		if !cycle {
			p.setResting(false)
		}
		p.mu.Unlock()
		if !cycle {
			select {
			case <-p.throttleWake:
				continue
			case <-p.done:
				return
			}
		}
		run := time.Duration(share * float64(CPUPeriod))
		if !sleep(run) {
			return
		}
		p.mu.Lock()
		p.setResting(true)
		p.mu.Unlock()
		if !sleep(CPUPeriod - run) {
			return
		}
		p.mu.Lock()
		p.setResting(false)
		p.mu.Unlock()
	}
}

// setResting stops (on) or lets run (off) every worker for the duty cycle,
// unless the pool is suspended, when they stay stopped; it wakes the
// deadlines that pause for it. p.mu is held.
func (p *Pool) setResting(on bool) {
	if p.resting == on {
		return
	}
	p.resting = on
	close(p.suspendChanged)
	p.suspendChanged = make(chan struct{})
	if p.suspended {
		return
	}
	signal := continueProcess
	if on {
		signal = stopProcess
	}
	for pr := range p.procs {
		if err := signal(pr.cmd); err != nil {
			p.log.Debug("Duty cycle cannot signal worker", "pid", pr.pid, "resting", on, "err", err)
		}
	}
}
