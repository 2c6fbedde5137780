// Command ising is an idlepool job program that simulates the
// two-dimensional Ising model (J = 1, k_B = 1, no field) on a periodic L×L
// square lattice with single-spin-flip Metropolis dynamics, and measures
// the energy, the absolute magnetisation and the susceptibility per spin at
// one temperature.
//
// Task params: T (temperature, > 0), L (lattice side, >= 2), burnin and
// sweeps (sweeps discarded, then measured; one sweep is L² attempted flips
// in lattice order), rep (replica number, only echoed back). The task seed
// drives the random numbers, so replicas at the same T are independent.
// Result:
//
//	{"T": 2.25, "rep": 0, "energy": -1.45, "abs_m": 0.63, "chi": 14.1}
//
// The program reads no inputs. It is built for WASI (GOOS=wasip1
// GOARCH=wasm) and runs natively too.
package main

import (
	"fmt"
	"math"
	"os"

	"idlepool/examples/internal/task"
)

// params are the task parameters this program reads.
type params struct {
	T      float64 `json:"T"`      // temperature, k_B = 1
	L      int     `json:"L"`      // lattice side; N = L² spins
	Burnin int     `json:"burnin"` // sweeps discarded before measuring
	Sweeps int     `json:"sweeps"` // sweeps measured
	Rep    int     `json:"rep"`    // replica number, echoed back
}

// maxSide bounds L; sweeps·L⁴ must also fit an int64 (the sum of M²).
const maxSide = 4096

func main() {
	os.Exit(task.Run(os.Stdin, os.Stdout, os.Stderr, compute))
}

// compute runs one task.
func compute(t task.Task) (any, error) {
	var p params
	if err := t.DecodeParams(&p); err != nil {
		return nil, err
	}
	switch {
	case !(p.T > 0) || p.T > 1e6:
		return nil, fmt.Errorf("params.T must be a temperature in (0, 1e6], got %v", p.T)
	case p.L < 2 || p.L > maxSide:
		return nil, fmt.Errorf("params.L must be in [2, %d], got %d", maxSide, p.L)
	case p.Sweeps < 1:
		return nil, fmt.Errorf("params.sweeps must be at least 1, got %d", p.Sweeps)
	case p.Burnin < 0:
		return nil, fmt.Errorf("params.burnin must not be negative, got %d", p.Burnin)
	case p.Sweeps > math.MaxInt64/(p.L*p.L*p.L*p.L):
		return nil, fmt.Errorf("params.sweeps = %d on a %d×%d lattice would overflow the sum of M²", p.Sweeps, p.L, p.L)
	}
	m := simulate(p.T, p.L, p.Burnin, p.Sweeps, t.Seed)
	return result{T: p.T, Rep: p.Rep, Energy: m.Energy, AbsM: m.AbsM, Chi: m.Chi}, nil
}

// result is the task result.
type result struct {
	T      float64 `json:"T"`      // the task's temperature, for group_by
	Rep    int     `json:"rep"`    // the task's replica number
	Energy float64 `json:"energy"` // mean energy per spin
	AbsM   float64 `json:"abs_m"`  // mean |m| per spin
	Chi    float64 `json:"chi"`    // susceptibility per spin, N(<m²>-<|m|>²)/T
}
