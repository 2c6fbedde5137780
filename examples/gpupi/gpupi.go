// Command gpupi is an idlepool job program that estimates pi by Monte
// Carlo on a GPU where the worker gives it one and on the CPU elsewhere,
// with the same bytes either way. It draws params.samples points of the
// unit square from the counter-based generator Philox4x32-10 (Salmon et
// al., SC'11), keyed by the task seed with the sample's index as the
// counter, and counts those inside the quarter disc x² + y² < 1 in integer
// arithmetic. Summed over all tasks, 4·inside/samples estimates pi with
// standard error 4·sqrt(p(1-p)/samples), p = pi/4.
//
// Task params: samples (int, > 0). Input: ptx, the PTX of gpupi.cu (read
// only when there is a GPU). Result:
//
//	{"inside": 13176688, "samples": 16777216}
//
// With a GPU (cuda.Devices() > 0) the program loads the PTX and runs the
// kernel count_inside in launches of launchSamples samples, waiting for
// each before starting the next, so that a paused task holds the GPU for
// one short launch at most; the kernel adds its hits into one 64-bit
// device counter. Should any GPU step fail, it says so on stderr and
// computes the task on the CPU, which gives the same result.
//
// Built for WASI (GOOS=wasip1 GOARCH=wasm); it runs natively too, always
// on the CPU there.
package main

import (
	"errors"
	"fmt"
	"os"

	"idlepool/examples/internal/gpukernel"
	"idlepool/examples/internal/task"
)

// launchSamples is how many samples one kernel launch draws: 2^26, about
// 10^10 integer operations, estimated at 1 ms on a current data-centre GPU
// and under 20 ms on a GPU ten times slower (examples/README.md, "gpupi";
// scripts/gpu-check.sh measures it). The CPU path counts in pieces of the same size;
// the count does not depend on it.
const launchSamples = 1 << 26

// params are the task parameters this program reads.
type params struct {
	Samples int64 `json:"samples"` // points to draw, > 0
}

// result is the task result.
type result struct {
	Inside  uint64 `json:"inside"`  // points inside the quarter disc
	Samples uint64 `json:"samples"` // points drawn
}

func main() {
	os.Exit(task.Run(os.Stdin, os.Stdout, os.Stderr, compute))
}

// compute runs one task: on the GPU when there is one, else on the CPU.
func compute(t task.Task) (any, error) { return computeIn(t, launchSamples) }

// computeIn runs one task in pieces (launches) of chunk samples.
func computeIn(t task.Task, chunk uint64) (any, error) {
	n, err := samples(t)
	if err != nil {
		return nil, err
	}
	if inside, err := countOnGPU(t, n, chunk); err == nil {
		return result{Inside: inside, Samples: n}, nil
	} else if !errors.Is(err, gpukernel.ErrNoGPU) {
		fmt.Fprintf(os.Stderr, "gpupi: GPU path failed, computing on the CPU: %v\n", err)
	}
	return result{Inside: countOnCPU(t.Seed, n, chunk), Samples: n}, nil
}

// samples returns the task's params.samples.
func samples(t task.Task) (uint64, error) {
	var p params
	if err := t.DecodeParams(&p); err != nil {
		return 0, err
	}
	if p.Samples <= 0 {
		return 0, fmt.Errorf("params.samples must be a positive integer, got %d", p.Samples)
	}
	return uint64(p.Samples), nil
}

// countOnCPU counts the inside samples 0..n-1 of the task keyed by seed,
// in pieces of chunk samples (the same pieces the GPU path launches).
func countOnCPU(seed, n, chunk uint64) uint64 {
	var inside uint64
	for first := uint64(0); first < n; first += chunk {
		inside += countInside(seed, first, min(chunk, n-first))
	}
	return inside
}
