package pool

import (
	"cmp"
	"fmt"
	"slices"

	"idlepool/job"
)

// Peers returns every registered peer, by ID. For the pool's read-only
// page; a caller must not show the keys or the endorsement to think
// they prove more than registration did.
func (s *Scheduler) Peers() []Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Peer, 0, len(s.peers))
	for _, p := range s.peers {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Peer) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// LiveLeases returns how many live leases each device holds, by device
// ID; a device that holds none is absent. For the pool's read-only page,
// which tells a device that is willing but has no task from one that
// computes. A lease past its deadline counts until it is expired (within
// a second while Serve runs).
func (s *Scheduler) LiveLeases() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for id, d := range s.shown {
		if d.live > 0 {
			out[id] = d.live
		}
	}
	return out
}

// The states of a task in TaskStates, one byte each.
const (
	TaskQueued   = '.' // waiting to be leased (never leased, or wanting another replica)
	TaskLeased   = 'l' // a device computes it
	TaskReturned = 'r' // returned, waiting for more replicas to reach its quorum
	TaskDone     = 'd' // decided: accepted, or failed and taken by the merger already
	TaskFailed   = 'f' // decided: failed (the merger has not taken it yet)
)

// TaskStates returns the states of job id's tasks 0 to max-1 (or all, if
// fewer), one byte per task (TaskQueued, TaskLeased, TaskReturned,
// TaskDone, TaskFailed), for a page that shows a job filling in. Once
// the merger has taken a failed outcome it shows as TaskDone: the pool
// keeps outcomes only until then. ErrUnknownJob if the pool has no such
// job.
func (s *Scheduler) TaskStates(id job.ID, max int) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	js, ok := s.jobs[id]
	if !ok {
		return "", fmt.Errorf("task states of job %s: %w", id, ErrUnknownJob)
	}
	n := min(int64(max), js.tasks)
	if n <= 0 {
		return "", nil
	}
	b := make([]byte, n)
	for i := range b {
		idx := int64(i)
		ts, active := js.active[idx]
		switch {
		case idx >= js.next:
			b[i] = TaskQueued
		case !active:
			b[i] = TaskDone
		case len(ts.live) > 0:
			b[i] = TaskLeased
		case len(ts.returned) > 0:
			b[i] = TaskReturned
		default:
			b[i] = TaskQueued
		}
	}
	for _, v := range js.outcomes {
		if v.Task < n && v.Status != OutcomeOK {
			b[v.Task] = TaskFailed
		}
	}
	return string(b), nil
}
