package agent

import (
	"context"
	"sync"
	"time"
)

// gpuSlots gives each GPU task a GPU of its own, as BOINC's default GPU
// usage of 1 does: a task makes one CUDA context, on the first GPU it is
// given, with a device-memory cap of the donor's whole share of that GPU,
// so two tasks on one GPU would hold twice the share, and a second GPU
// would stay idle. One gpuSlots is shared by every agent of a donor
// (every pool), so the cap holds across pools too. The zero value is not
// usable; see newGPUSlots.
type gpuSlots struct {
	mu      sync.Mutex
	held    map[string]bool // UUID -> a task holds it
	changed chan struct{}   // closed and replaced when a GPU is given back
}

func newGPUSlots() *gpuSlots {
	return &gpuSlots{held: map[string]bool{}, changed: make(chan struct{})}
}

// take marks the first GPU of allowed (NVML UUIDs, in the policy's order)
// that no task holds as held and returns it. When every one is held it
// returns "" and a channel closed when a GPU is given back.
func (s *gpuSlots) take(allowed []string) (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range allowed {
		if !s.held[g] {
			s.held[g] = true
			return g, nil
		}
	}
	return "", s.changed
}

// give gives back a GPU from take.
func (s *gpuSlots) give(uuid string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.held[uuid] {
		return
	}
	delete(s.held, uuid)
	close(s.changed)
	s.changed = make(chan struct{})
}

// gpuWaitDefault bounds how long a task of a job that needs a GPU waits
// for one of this device's GPUs to be given back, when the job sets no
// time limit.
const gpuWaitDefault = 10 * time.Minute

// waitGPU takes a GPU of those the policy allows (allowed, read again
// after every change) for a task. It returns "" at once when none is
// allowed, and, when every allowed GPU is held by another task: at once
// if the task can run on the CPU (!wait), or after waiting up to limit
// for one to be given back, or when ctx ends.
func (s *gpuSlots) waitGPU(ctx context.Context, allowed func() ([]string, <-chan struct{}), wait bool, limit time.Duration) (string, bool) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		gpus, policyChanged := allowed()
		if len(gpus) == 0 {
			return "", false
		}
		g, freed := s.take(gpus)
		if g != "" {
			return g, false
		}
		if !wait {
			return "", true
		}
		select {
		case <-freed:
		case <-policyChanged:
		case <-timer.C:
			return "", true
		case <-ctx.Done():
			return "", true
		}
	}
}
