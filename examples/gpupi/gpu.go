package main

import (
	"encoding/binary"

	"idlepool/examples/internal/gpukernel"
	"idlepool/examples/internal/task"
	"idlepool/job/cuda"
)

// Launch geometry: blockThreads threads per block, gridBlocks blocks; each
// thread of a launch of n samples draws every (gridBlocks·blockThreads)-th
// sample of it.
const (
	blockThreads = 256
	gridBlocks   = 1024
)

// countOnGPU counts the inside samples 0..n-1 of task t with the kernel
// count_inside of the task's ptx input, in launches of chunk samples, each
// waited for before the next. It returns gpukernel.ErrNoGPU when the task
// has no GPU, another error when a GPU step fails.
func countOnGPU(t task.Task, n, chunk uint64) (uint64, error) {
	kernel, err := gpukernel.Load(t, "ptx", "count_inside")
	if err != nil {
		return 0, err
	}
	counter, err := gpukernel.Zeroed(8)
	if err != nil {
		return 0, err
	}
	defer counter.Free()
	grid, block := cuda.Dim3{X: gridBlocks, Y: 1, Z: 1}, cuda.Dim3{X: blockThreads, Y: 1, Z: 1}
	for first := uint64(0); first < n; first += chunk {
		err := kernel.Launch(grid, block, 0,
			cuda.BufferArg(counter), cuda.U64(t.Seed), cuda.U64(first), cuda.U64(min(chunk, n-first)))
		if err != nil {
			return 0, err
		}
		// One launch in flight at most: a pause waits for this one only.
		if err := cuda.Synchronize(); err != nil {
			return 0, err
		}
	}
	out := make([]byte, 8)
	if err := counter.Read(0, out); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(out), nil
}
