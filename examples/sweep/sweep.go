// Command sweep is an idlepool job program for a hyperparameter sweep: it
// minimises the Rosenbrock function f(x, y) = (1 − x)² + 100·(y − x²)²,
// whose minimum 0 lies at (1, 1) at the end of a long, curved valley, by
// gradient descent with heavy-ball momentum from a random start, and
// reports how far it got.
//
// Task params: alpha (the learning rate, > 0), beta (the momentum, in
// [0, 1)), steps (iterations, 1..10^7) and rep (replica number, only
// echoed back). The task seed draws the start uniformly from [−1.2, 1.2] ×
// [−0.5, 1.5], so replicas of one (alpha, beta) start apart. Each step is
// v ← beta·v − alpha·∇f(p), p ← p + v. A run that leaves the box
// |x|, |y| <= 10^3 has diverged and stops there. Result:
//
//	{"alpha": 0.001, "beta": 0.6, "rep": 0, "loss_log10": -7.2, "diverged": 0}
//
// loss_log10 is log10 of f at the end (at least −30, for f = 0), diverged
// is 1 for a run that diverged and 0 otherwise, so that a sum counts them.
// The program reads no inputs. It is built for WASI (GOOS=wasip1
// GOARCH=wasm) and runs natively too; its arithmetic is plain float64,
// the same on both.
package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"

	"idlepool/examples/internal/task"
)

// pcgStream is the second PCG seed word; the first is the task seed.
const pcgStream = 0x5eed5eed5eed5eed

// params are the task parameters this program reads.
type params struct {
	Alpha float64 `json:"alpha"` // learning rate, > 0
	Beta  float64 `json:"beta"`  // momentum, 0 <= beta < 1
	Steps int     `json:"steps"` // iterations
	Rep   int     `json:"rep"`   // replica number, echoed back
}

// result is the task result.
type result struct {
	Alpha     float64 `json:"alpha"`      // the task's learning rate, for group_by
	Beta      float64 `json:"beta"`       // the task's momentum, for group_by
	Rep       int     `json:"rep"`        // the task's replica number
	LossLog10 float64 `json:"loss_log10"` // log10 of the final f, at least -30
	Diverged  int     `json:"diverged"`   // 1 when the run left the box, else 0
}

// maxSteps bounds params.steps.
const maxSteps = 10_000_000

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
	case !(p.Alpha > 0) || p.Alpha > 1:
		return nil, fmt.Errorf("params.alpha must be a learning rate in (0, 1], got %v", p.Alpha)
	case !(p.Beta >= 0 && p.Beta < 1):
		return nil, fmt.Errorf("params.beta must be a momentum in [0, 1), got %v", p.Beta)
	case p.Steps < 1 || p.Steps > maxSteps:
		return nil, fmt.Errorf("params.steps must be in [1, %d], got %d", maxSteps, p.Steps)
	}
	rng := rand.New(rand.NewPCG(t.Seed, pcgStream))
	x0, y0 := -1.2+2.4*rng.Float64(), -0.5+2*rng.Float64()
	f, diverged := descend(x0, y0, p.Alpha, p.Beta, p.Steps)
	r := result{Alpha: p.Alpha, Beta: p.Beta, Rep: p.Rep, LossLog10: max(math.Log10(f), -30)}
	if diverged {
		r.Diverged = 1
	}
	return r, nil
}

// rosenbrock returns f(x, y) and its gradient.
func rosenbrock(x, y float64) (f, gx, gy float64) {
	a, b := 1-x, y-x*x
	return a*a + 100*b*b, -2*a - 400*x*b, 200 * b
}

// descend runs steps of gradient descent with heavy-ball momentum from
// (x, y) and returns f where it stopped, and whether it left the box
// |x|, |y| <= 10^3 (diverged) and stopped early.
func descend(x, y, alpha, beta float64, steps int) (f float64, diverged bool) {
	var vx, vy float64
	for range steps {
		_, gx, gy := rosenbrock(x, y)
		vx, vy = beta*vx-alpha*gx, beta*vy-alpha*gy
		x, y = x+vx, y+vy
		if !(math.Abs(x) <= 1e3 && math.Abs(y) <= 1e3) {
			diverged = true
			break
		}
	}
	f, _, _ = rosenbrock(x, y)
	return f, diverged
}
