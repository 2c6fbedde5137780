// Command optionmc is an idlepool job program that prices a European call
// option by Monte Carlo under Black–Scholes dynamics: in float32 on a GPU
// where the worker gives the task one, in float64 on the CPU elsewhere.
// The two agree within the tolerance the manifest declares
// ([verify] rule = "tolerance"), not bit for bit.
//
// The stock follows geometric Brownian motion: S_T = s0·exp((rate −
// sigma²/2)·maturity + sigma·sqrt(maturity)·Z), Z standard normal; the
// call pays max(S_T − strike, 0) at maturity (years); the price is the
// discounted mean payoff, exp(−rate·maturity)·E[payoff]. Normals come in
// pairs from Box–Muller over uniforms drawn from Philox4x32-10 (Salmon et
// al., SC'11) keyed by the task seed, the pair's index as the counter.
//
// Task params: s0, strike, rate, sigma, maturity (numbers, s0, strike,
// sigma, maturity > 0) and paths (an even integer > 0). Input: ptx, the
// PTX of optionmc.cu (read only when there is a GPU). Result:
//
//	{"paths": 2097152, "price": 10.4466}
//
// Built for WASI (GOOS=wasip1 GOARCH=wasm); it runs natively too, always
// on the CPU there.
package main

import (
	"errors"
	"fmt"
	"math"
	"os"

	"idlepool/examples/internal/gpukernel"
	"idlepool/examples/internal/philox"
	"idlepool/examples/internal/task"
)

// launchPairs is how many path pairs one kernel launch prices: 2^22 (2^23
// paths), estimated at 2 ms on a current data-centre GPU.
const launchPairs = 1 << 22

// params are the task parameters this program reads.
type params struct {
	S0       float64 `json:"s0"`       // spot price, > 0
	Strike   float64 `json:"strike"`   // strike price, > 0
	Rate     float64 `json:"rate"`     // risk-free rate per year, continuously compounded
	Sigma    float64 `json:"sigma"`    // volatility per sqrt(year), > 0
	Maturity float64 `json:"maturity"` // years, > 0
	Paths    int64   `json:"paths"`    // simulated paths, even, > 0
}

// result is the task result.
type result struct {
	Paths int64   `json:"paths"` // paths simulated
	Price float64 `json:"price"` // discounted mean payoff
}

func main() {
	os.Exit(task.Run(os.Stdin, os.Stdout, os.Stderr, compute))
}

// compute prices one task's paths: on the GPU when there is one, else on
// the CPU.
func compute(t task.Task) (any, error) {
	var p params
	if err := t.DecodeParams(&p); err != nil {
		return nil, err
	}
	if err := p.check(); err != nil {
		return nil, err
	}
	pairs := uint64(p.Paths / 2)
	drift, vol := p.drift()
	sum, err := sumOnGPU(t, pairs, float32(p.S0), float32(p.Strike), float32(drift), float32(vol))
	if err != nil {
		if !errors.Is(err, gpukernel.ErrNoGPU) {
			fmt.Fprintf(os.Stderr, "optionmc: GPU path failed, computing on the CPU: %v\n", err)
		}
		sum = sumPayoffs(t.Seed, 0, pairs, p.S0, p.Strike, drift, vol)
	}
	return result{Paths: p.Paths, Price: math.Exp(-p.Rate*p.Maturity) * sum / float64(p.Paths)}, nil
}

// check returns an error naming the first bad parameter.
func (p params) check() error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"s0", p.S0}, {"strike", p.Strike}, {"sigma", p.Sigma}, {"maturity", p.Maturity}} {
		if !(f.v > 0) || math.IsInf(f.v, 0) {
			return fmt.Errorf("params.%s must be a positive number, got %v", f.name, f.v)
		}
	}
	if math.IsNaN(p.Rate) || math.IsInf(p.Rate, 0) {
		return fmt.Errorf("params.rate must be a number, got %v", p.Rate)
	}
	if p.Paths <= 0 || p.Paths%2 != 0 {
		return fmt.Errorf("params.paths must be a positive even integer (paths come in Box–Muller pairs), got %d", p.Paths)
	}
	return nil
}

// drift returns the log-price's drift (rate − sigma²/2)·maturity and its
// volatility sigma·sqrt(maturity) over the option's life.
func (p params) drift() (drift, vol float64) {
	return (p.Rate - p.Sigma*p.Sigma/2) * p.Maturity, p.Sigma * math.Sqrt(p.Maturity)
}

// uniform24 maps the top 24 bits of w to (0, 1): (w>>8 + 1/2)·2^-24, a
// value float32 holds exactly, so the GPU's float32 path starts from the
// same uniforms as this float64 one.
func uniform24(w uint32) float64 { return (float64(w>>8) + 0.5) * 0x1p-24 }

// sumPayoffs returns the sum of the call payoffs of the path pairs first,
// …, first+n−1 of the task keyed by seed, in float64. Pair i draws
// Philox4x32-10 of counter i; its first two words give uniforms u1, u2
// (uniform24) and Box–Muller gives z1 = r·cos θ, z2 = r·sin θ with
// r = sqrt(−2 ln u1), θ = 2π·u2 − π; each prices one path: S_T =
// s0·exp(drift + vol·z), payoff max(S_T − strike, 0). optionmc.cu's
// sum_payoffs computes the same in float32.
func sumPayoffs(seed, first, n uint64, s0, strike, drift, vol float64) float64 {
	key := philox.Key(seed)
	var sum float64
	for i := first; i < first+n; i++ {
		w := philox.Block(philox.Counter(i), key)
		u1, u2 := uniform24(w[0]), uniform24(w[1])
		r := math.Sqrt(-2 * math.Log(u1))
		sin, cos := math.Sincos(2*math.Pi*u2 - math.Pi)
		for _, z := range [2]float64{r * cos, r * sin} {
			if st := s0 * math.Exp(drift+vol*z); st > strike {
				sum += st - strike
			}
		}
	}
	return sum
}
