package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"idlepool/idle"
	"idlepool/job"
	"idlepool/offers"
)

// ErrGPUReleased is the cause with which a task holding GPUs is stopped
// (its worker process killed, so that the driver frees its CUDA context)
// when the owner's policy no longer lets it hold one of them: Pause, a
// listed program or game, "don't use this GPU", the GPU's temperature
// ceiling or another process on it. The lease is handed back; the pool
// leases the task again, so nothing is lost. See gpuRelease.
var ErrGPUReleased = errors.New("agent: task stopped to let go of its GPU")

// taskGPUs returns the GPU (an NVML UUID, in a slice) a task of j is
// given: none for a job that does not use a GPU, and otherwise one of the
// GPUs the policy allows now that meets the job's GPU requirements
// (fittingGPUs) and that no other task of this donor holds (gpuSlots),
// when the donor allows GPU programs in this pool (offers'
// Preferences.Accept). A CPU (WebAssembly-only) task never holds a GPU.
// When every allowed GPU is held, a task of a job that can also run on
// the CPU (gpu = "optional") gets none at once; one of a job that needs a
// GPU waits for one to be given back, up to the job's time limit. busy
// reports that it got none for that reason. The second result is the
// task's device-memory cap in MiB, the donor's memory share of that GPU
// (gpuMemory); where no cap can be computed the task gets no GPU rather
// than an uncapped one. release gives the GPU back; call it when the task
// has ended (it is never nil).
func (a *Agent) taskGPUs(ctx context.Context, j *job.Job) (gpus []string, mib int64, release func(), busy bool) {
	release = func() {}
	need := j.Manifest.Requirements.GPU
	if !need.Uses() || !a.cfg.Offer.Preferences(ctx).Accept(a.cfg.PoolURL).GPUPrograms {
		return nil, 0, release, false
	}
	allowed := func() ([]string, <-chan struct{}) {
		_, changed := a.gov.current()
		return a.fittingGPUs(j.Manifest.Requirements, a.gov.gpus()), changed
	}
	limit := j.Manifest.Policy.TimeLimit.Duration
	if limit <= 0 {
		limit = gpuWaitDefault
	}
	g, busy := a.gpus.waitGPU(ctx, allowed, need.Required(), limit)
	if g == "" {
		return nil, 0, release, busy
	}
	gpus, mib = a.gpuMemory([]string{g})
	if len(gpus) == 0 {
		a.gpus.give(g)
		return nil, 0, release, false
	}
	return gpus, mib, func() { a.gpus.give(g) }, false
}

// fittingGPUs returns those of gpus (UUIDs) that meet the job's GPU
// requirements (offers.GPUFits), in gpus' order: the compute capability
// NVML reported in the latest sample, and the memory the task would be
// capped at (gpuMemory's share; the GPU's whole memory without a cap).
// It reads only what the agent holds, so starting a task does no I/O.
func (a *Agent) fittingGPUs(r job.Requirements, gpus []string) []string {
	if len(gpus) == 0 || (r.GPUMemoryMiB == 0 && r.GPUComputeCapability == "") {
		return gpus
	}
	a.gov.mu.Lock()
	found := a.gov.signals.GPUs.Value
	a.gov.mu.Unlock()
	return slices.DeleteFunc(gpus, func(u string) bool {
		i := slices.IndexFunc(found, func(g idle.GPU) bool { return g.UUID == u })
		if i < 0 {
			return true
		}
		g := idle.GPUOffer{UUID: u, ComputeCapability: found[i].ComputeCapability, MemoryMiB: found[i].MemoryTotalMiB}
		if _, mib := a.gpuMemory([]string{u}); mib > 0 {
			g.MemoryMiB = mib
		} else if a.cfg.GPUMemoryMiB != nil {
			return true // no cap can be given: gpuMemory would refuse it
		}
		return !offers.GPUFits(r, g)
	})
}

// gpuRelease says why a task holding gpus must let go of them under
// decision d, or "" when it may keep them.
//
//   - StatePaused (the owner's Pause, a listed program or a game running):
//     let go. A stopped process keeps its context and device memory, which
//     a game wants back, and a pause may last hours.
//   - Computing: let go when one of its GPUs is no longer in d.GPUs (the
//     owner switched it off, it passed its temperature ceiling, another
//     process uses it, or NVML cannot tell).
//   - Waiting (the owner is back at the keyboard, on battery, outside the
//     hours, the CPU too hot): the worker stays suspended, as a CPU task
//     does (a stopped process makes no further launches), unless one of
//     its GPUs leaves d.GPUsAllowed; the lease is handed back after its
//     pause limit as for any task.
func gpuRelease(d idle.Decision, gpus []string) string {
	if len(gpus) == 0 {
		return ""
	}
	allowed := d.GPUsAllowed
	switch d.State {
	case idle.StatePaused:
		return d.Reason
	case idle.StateComputing:
		allowed = d.GPUs
	}
	for _, g := range gpus {
		if !slices.Contains(allowed, g) {
			return fmt.Sprintf("GPU %s is no longer allowed (%s)", g, d.Reason)
		}
	}
	return ""
}

// gpuReleaseError is the cause of a task stopped to let go of its GPUs.
type gpuReleaseError struct{ why string }

func (e *gpuReleaseError) Error() string { return ErrGPUReleased.Error() + ": " + e.why }
func (e *gpuReleaseError) Unwrap() error { return ErrGPUReleased }

// watchGPUs cancels a running task that holds gpus with a
// *gpuReleaseError as soon as a decision says it must let go of them
// (gpuRelease); cancelling kills its worker process. It returns when ctx
// ends or it has cancelled the task.
func (a *Agent) watchGPUs(ctx context.Context, gpus []string, cancel context.CancelCauseFunc) {
	for {
		d, changed := a.gov.current()
		if why := gpuRelease(d, gpus); why != "" {
			cancel(&gpuReleaseError{why: why})
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// current returns the latest decision and a channel closed when it may
// have changed.
func (g *governor) current() (idle.Decision, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.decision, g.changed
}
