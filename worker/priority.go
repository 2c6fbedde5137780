package worker

import "fmt"

// Priority is how the OS schedules a worker process: what it gets of the
// CPU (and of the disk) while other programs want them too.
type Priority string

// Priorities of Config.Priority and Pool.SetPriority.
const (
	// PriorityIdle, the default, is the OS's idle priority: a worker runs
	// only on a CPU nothing else wants, and its disk I/O waits for
	// everyone else's. On Linux every thread gets the SCHED_IDLE policy,
	// nice 19 and the idle I/O class (ioprio_set IOPRIO_CLASS_IDLE); on
	// Windows the process runs in IDLE_PRIORITY_CLASS and background
	// mode (PROCESS_MODE_BACKGROUND_BEGIN: low I/O and memory priority).
	PriorityIdle Priority = ""
	// PriorityLow is a low but not idle priority: a worker still gets a
	// small share of a CPU that other programs keep busy, so that its
	// tasks progress. On Linux every thread gets nice 19 under the normal
	// policy and the lowest best-effort I/O level (7); on Windows the
	// process runs in BELOW_NORMAL_PRIORITY_CLASS.
	PriorityLow Priority = "low"
)

// priorityNormal is PriorityEnv's value for a worker that keeps the
// priority it was started with (tests on busy machines).
const priorityNormal = "normal"

// Valid reports whether p is one of the Priorities, and says what is
// wrong otherwise.
func (p Priority) Valid() error {
	switch p {
	case PriorityIdle, PriorityLow:
		return nil
	}
	return fmt.Errorf("%w: priority %q: want %q (idle) or %q", ErrInvalidRequest, string(p), string(PriorityIdle), string(PriorityLow))
}

// String names p for people and logs: "idle" or "low".
func (p Priority) String() string {
	if p == PriorityIdle {
		return "idle"
	}
	return string(p)
}

// SetPriority makes the workers started from now on run at prio. Idle
// workers at another priority are stopped at once, and busy ones when
// their task ends, so that every task started after the call runs at
// prio; a running task keeps its worker's priority until it ends (a
// process cannot always raise its own priority back, and a task is never
// interrupted for this). It is safe concurrently with every other
// method, and returns ErrInvalidRequest for an unknown priority and
// ErrClosed after Close.
func (p *Pool) SetPriority(prio Priority) error {
	if err := prio.Valid(); err != nil {
		return err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return ErrClosed
	}
	var retire []*proc
	if p.priority != prio {
		p.log.Debug("Workers' priority set", "priority", prio.String())
		p.priority = prio
		kept := p.idle[:0]
		for _, pr := range p.idle {
			if pr.priority == prio {
				kept = append(kept, pr)
			} else {
				retire = append(retire, pr)
			}
		}
		clear(p.idle[len(kept):])
		p.idle = kept
	}
	p.mu.Unlock()
	for _, pr := range retire {
		p.log.Debug("Worker stopped for another priority", "pid", pr.pid, "state", p.discard(pr))
	}
	return nil
}

// Priority returns the priority workers start at now (SetPriority).
func (p *Pool) Priority() Priority {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.priority
}
