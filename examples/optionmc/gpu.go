package main

import (
	"encoding/binary"
	"math"

	"idlepool/examples/internal/gpukernel"
	"idlepool/examples/internal/task"
	"idlepool/job/cuda"
)

// Launch geometry: blockThreads threads per block, gridBlocks blocks; each
// thread of a launch prices every (gridBlocks·blockThreads)-th pair of it.
const (
	blockThreads = 256
	gridBlocks   = 1024
)

// sumOnGPU returns the sum of the payoffs of path pairs 0..pairs−1 of task
// t, priced in float32 by the kernel price_paths of the task's ptx input,
// in launches of launchPairs pairs, each waited for before the next. It
// returns gpukernel.ErrNoGPU when the task has no GPU, another error when a GPU step
// fails.
func sumOnGPU(t task.Task, pairs uint64, s0, strike, drift, vol float32) (float64, error) {
	kernel, err := gpukernel.Load(t, "ptx", "price_paths")
	if err != nil {
		return 0, err
	}
	sum, err := gpukernel.Zeroed(8)
	if err != nil {
		return 0, err
	}
	defer sum.Free()
	grid, block := cuda.Dim3{X: gridBlocks, Y: 1, Z: 1}, cuda.Dim3{X: blockThreads, Y: 1, Z: 1}
	for first := uint64(0); first < pairs; first += launchPairs {
		err := kernel.Launch(grid, block, 0, cuda.BufferArg(sum), cuda.U64(t.Seed), cuda.U64(first),
			cuda.U64(min(launchPairs, pairs-first)), cuda.F32(s0), cuda.F32(strike), cuda.F32(drift), cuda.F32(vol))
		if err != nil {
			return 0, err
		}
		// One launch in flight at most: a pause waits for this one only.
		if err := cuda.Synchronize(); err != nil {
			return 0, err
		}
	}
	out := make([]byte, 8)
	if err := sum.Read(0, out); err != nil {
		return 0, err
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(out)), nil
}
