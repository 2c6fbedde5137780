package agent

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestGPUSlotsOneTaskPerGPU(t *testing.T) {
	s := newGPUSlots()
	allowed := []string{"GPU-a", "GPU-b"}
	a, _ := s.take(allowed)
	b, _ := s.take(allowed)
	c, freed := s.take(allowed)
	if a != "GPU-a" || b != "GPU-b" || c != "" {
		t.Fatalf("three takes of two GPUs gave %q, %q, %q; want GPU-a, GPU-b and none", a, b, c)
	}
	s.give(a)
	select {
	case <-freed:
	default:
		t.Fatal("giving a GPU back did not close the channel take returned")
	}
	if g, _ := s.take(allowed); g != "GPU-a" {
		t.Errorf("take after a GPU was given back = %q, want GPU-a", g)
	}
	s.give("GPU-never-taken") // ignored
	s.mu.Lock()
	held := slices.Sorted(maps.Keys(s.held))
	s.mu.Unlock()
	if !slices.Equal(held, allowed) {
		t.Errorf("held %v, want %v", held, allowed)
	}
}

// fixedAllowed is a policy that allows gpus and never changes.
func fixedAllowed(gpus ...string) func() ([]string, <-chan struct{}) {
	return func() ([]string, <-chan struct{}) { return gpus, nil }
}

func TestGPUSlotsWait(t *testing.T) {
	ctx := context.Background()
	s := newGPUSlots()
	held, _ := s.take([]string{"GPU-a"})

	// A job that can run on the CPU does not wait.
	if g, busy := s.waitGPU(ctx, fixedAllowed("GPU-a"), false, time.Hour); g != "" || !busy {
		t.Errorf("optional job: waitGPU = %q, busy %v; want none at once, busy", g, busy)
	}
	// No GPU allowed: none, not busy.
	if g, busy := s.waitGPU(ctx, fixedAllowed(), true, time.Hour); g != "" || busy {
		t.Errorf("no GPU allowed: waitGPU = %q, busy %v; want none, not busy", g, busy)
	}
	// A job that needs a GPU waits until the holder gives it back.
	got := make(chan string, 1)
	go func() {
		g, _ := s.waitGPU(ctx, fixedAllowed("GPU-a"), true, time.Hour)
		got <- g
	}()
	select {
	case g := <-got:
		t.Fatalf("waitGPU returned %q while the GPU was held", g)
	case <-time.After(50 * time.Millisecond): // it may only fail to notice a wrong return
	}
	s.give(held)
	select {
	case g := <-got:
		if g != "GPU-a" {
			t.Errorf("waitGPU after give = %q, want GPU-a", g)
		}
	case <-time.After(time.Minute):
		t.Fatal("waitGPU did not return after the GPU was given back")
	}

	// The policy allowing another GPU wakes a waiter.
	changed := make(chan struct{})
	var mu sync.Mutex
	gpus := []string{"GPU-a"}
	policy := func() ([]string, <-chan struct{}) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(gpus), changed
	}
	go func() {
		g, _ := s.waitGPU(ctx, policy, true, time.Hour)
		got <- g
	}()
	// Most likely the waiter waits by now; if not, it reads the new
	// policy when it starts: GPU-b either way, at any load.
	time.Sleep(20 * time.Millisecond)
	mu.Lock()
	gpus = []string{"GPU-a", "GPU-b"}
	mu.Unlock()
	close(changed)
	select {
	case g := <-got:
		if g != "GPU-b" {
			t.Errorf("waitGPU after the policy allowed GPU-b = %q", g)
		}
	case <-time.After(time.Minute):
		t.Fatal("waitGPU did not wake on a policy change")
	}

	// The wait ends with the task's context, and at its limit.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if g, busy := s.waitGPU(cctx, fixedAllowed("GPU-a"), true, time.Hour); g != "" || !busy {
		t.Errorf("cancelled: waitGPU = %q, busy %v", g, busy)
	}
	if g, busy := s.waitGPU(ctx, fixedAllowed("GPU-a"), true, time.Millisecond); g != "" || !busy {
		t.Errorf("past the limit: waitGPU = %q, busy %v", g, busy)
	}
}
