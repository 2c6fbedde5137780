// Command pi is an idlepool job program that estimates pi by Monte Carlo:
// it throws params.samples uniform points into the unit square and counts
// those that land inside the quarter disc x² + y² < 1. Summed over all
// tasks, 4·inside/samples estimates pi with standard error
// 4·sqrt(p(1-p)/samples), p = pi/4.
//
// Task params: samples (int, > 0). Result:
//
//	{"inside": 785412, "samples": 1000000}
//
// The program reads no inputs. It is built for WASI (GOOS=wasip1
// GOARCH=wasm) and runs natively too.
package main

import (
	"fmt"
	"math/bits"
	"os"

	"idlepool/examples/internal/splitmix"
	"idlepool/examples/internal/task"
)

// params are the task parameters this program reads.
type params struct {
	Samples int64 `json:"samples"` // points to draw, > 0
}

// result is the task result.
type result struct {
	Inside  int64 `json:"inside"`  // points inside the quarter disc
	Samples int64 `json:"samples"` // points drawn
}

func main() {
	os.Exit(task.Run(os.Stdin, os.Stdout, os.Stderr, compute))
}

// compute runs one task.
func compute(t task.Task) (any, error) {
	var p params
	if err := t.DecodeParams(&p); err != nil {
		return nil, err
	}
	if p.Samples <= 0 {
		return nil, fmt.Errorf("params.samples must be a positive integer, got %d", p.Samples)
	}
	return result{Inside: countInside(t.Seed, p.Samples), Samples: p.Samples}, nil
}

// countInside draws samples points uniformly from the unit square with a
// SplitMix64 generator seeded with seed and returns how many fall strictly
// inside the quarter disc. SplitMix64 needs only the 64-bit multiplies
// WebAssembly has (package splitmix), so the loop runs in WebAssembly
// close to its native speed.
//
// Each sample costs one 64-bit draw: its high and low 32 bits are the point's
// coordinates x and y in units of 2^-32, and the point is inside exactly when
// x² + y² < 2^64, that is when the 64-bit sum does not carry. The bias of
// this 2^32 × 2^32 lattice is of order 2^-32, far below the statistical error
// of any feasible run. Integer arithmetic makes the count identical on every
// platform.
func countInside(seed uint64, samples int64) int64 {
	rng := splitmix.New(seed)
	var outside uint64
	for range samples {
		r := rng.Uint64()
		x, y := r>>32, r&0xffffffff
		_, carry := bits.Add64(x*x, y*y, 0)
		outside += carry
	}
	return samples - int64(outside)
}
