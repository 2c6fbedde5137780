package main

import (
	"context"
	"strings"

	"idlepool/job"
	"idlepool/pool"
	"idlepool/worker"
)

// soloGPUs lists the GPUs NVML finds for a solo run, by UUID, with their
// names for people; none with --cpu-only, or where NVML finds none, and
// then why in words.
func soloGPUs(g *globals, cpuOnly bool) (uuids, names []string, why string) {
	if cpuOnly {
		return nil, nil, "--cpu-only"
	}
	l := worker.NewGPULister()
	defer l.Close()
	gs, err := l.List(nil)
	if err != nil {
		g.logger().Debug("No GPU for this run", "err", err)
		return nil, nil, err.Error()
	}
	for _, gpu := range gs {
		uuids = append(uuids, gpu.UUID)
		names = append(names, gpu.Name)
	}
	if len(gs) == 0 {
		why = "NVML finds no NVIDIA GPU"
	}
	return uuids, names, why
}

// gpuExecutor gives each task of a solo run one of the machine's GPUs,
// with no device-memory cap but the GPU's own: on the owner's own machine,
// a solo run may use all of it. Slot i of the run computes on GPU i mod
// the number of GPUs, so that the tasks spread over the GPUs and each
// worker process keeps its GPU (a worker is reused only for tasks with the
// same GPUs). A program that does not use the GPU (does not import
// idlepool_cuda) runs on the CPU as ever.
type gpuExecutor struct {
	exec  pool.Executor
	gpus  []string
	slots chan int // free slot numbers
}

// newGPUExecutor returns exec giving tasks gpus over slots slots.
func newGPUExecutor(exec pool.Executor, gpus []string, slots int) *gpuExecutor {
	e := &gpuExecutor{exec: exec, gpus: gpus, slots: make(chan int, max(slots, 1))}
	for i := range cap(e.slots) {
		e.slots <- i
	}
	return e
}

func (e *gpuExecutor) Run(ctx context.Context, req worker.Request) (worker.Result, error) {
	if len(e.gpus) == 0 {
		return e.exec.Run(ctx, req)
	}
	var slot int
	select {
	case slot = <-e.slots:
	case <-ctx.Done():
		return worker.Result{}, ctx.Err()
	}
	defer func() { e.slots <- slot }()
	req.GPUs = []string{e.gpus[slot%len(e.gpus)]}
	return e.exec.Run(ctx, req)
}

// gpuLine says which GPUs a solo run gives its tasks. With none it says
// so for a job that uses a GPU (need), with why (the reason from
// soloGPUs), and "" for any other job.
func gpuLine(names []string, need job.GPUNeed, why string) string {
	switch {
	case len(names) > 0:
		return "GPUs for programs that use them: " + strings.Join(names, ", ") + " (--cpu-only leaves them out)\n"
	case need.Required():
		return "no GPU for this run (" + why + "): this job asks for a GPU (gpu = true), so its program computes on the CPU, if it can\n"
	case need.Uses():
		return "no GPU for this run (" + why + "): the program computes on the CPU\n"
	}
	return ""
}
