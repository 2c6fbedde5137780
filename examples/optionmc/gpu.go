package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"

	"idlepool/examples/internal/task"
	"idlepool/job/cuda"
)

// errNoGPU says the task has no GPU; the CPU path is the plan, not a
// fallback.
var errNoGPU = errors.New("optionmc: no GPU")

// Launch geometry: blockThreads threads per block, gridBlocks blocks; each
// thread of a launch prices every (gridBlocks·blockThreads)-th pair of it.
const (
	blockThreads = 256
	gridBlocks   = 1024
)

// sumOnGPU returns the sum of the payoffs of path pairs 0..pairs−1 of task
// t, priced in float32 by the kernel price_paths of the task's ptx input,
// in launches of launchPairs pairs, each waited for before the next. It
// returns errNoGPU when the task has no GPU, another error when a GPU step
// fails.
func sumOnGPU(t task.Task, pairs uint64, s0, strike, drift, vol float32) (float64, error) {
	if cuda.Devices() == 0 {
		return 0, errNoGPU
	}
	path, err := t.Input("ptx")
	if err != nil {
		return 0, err
	}
	ptx, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read the kernel: %w", err)
	}
	mod, err := cuda.LoadModule(ptx)
	if err != nil {
		return 0, err
	}
	kernel, err := mod.Function("price_paths")
	if err != nil {
		return 0, err
	}
	sum, err := cuda.Alloc(8)
	if err != nil {
		return 0, err
	}
	defer sum.Free()
	if err := sum.Write(0, make([]byte, 8)); err != nil {
		return 0, err
	}
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
