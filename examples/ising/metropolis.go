package main

import (
	"math"
	"math/rand/v2"
)

// pcgStream is the second PCG seed word; the first is the task seed.
const pcgStream = 0x2545f4914f6cdd1d

// measurement holds the per-spin averages of one run.
type measurement struct {
	// Energy is <E>/N, with E = -Σ s_i s_j over nearest-neighbour bonds.
	Energy float64
	// AbsM is <|M|>/N, with M = Σ s_i.
	AbsM float64
	// Chi is the susceptibility per spin from the absolute magnetisation,
	// N (<m²> - <|m|>²) / T with m = M/N, the usual estimator for finite
	// lattices, where <m> vanishes by symmetry.
	Chi float64
}

// simulate runs single-spin-flip Metropolis on a periodic L×L lattice at
// temperature T: it starts from all spins up, performs burnin sweeps, then
// measures E and M after each of sweeps sweeps. The ordered start settles
// quickly below Tc, where a random start can freeze into long-lived stripe
// domains; above Tc the burn-in disorders it.
//
// E and M are tracked incrementally and summed in integers, so the result
// depends on floating point only through the two acceptance thresholds and
// the final divisions.
func simulate(T float64, L, burnin, sweeps int, seed uint64) measurement {
	lat := newLattice(T, L, seed)
	for range burnin {
		lat.sweep()
	}
	var sumE, sumAbsM, sumM2 int64
	for range sweeps {
		lat.sweep()
		sumE += lat.energy
		sumAbsM += abs(lat.mag)
		sumM2 += lat.mag * lat.mag
	}

	fn, fs := float64(L*L), float64(sweeps)
	absM := float64(sumAbsM) / fs / fn
	m2 := float64(sumM2) / fs / (fn * fn)
	return measurement{
		Energy: float64(sumE) / fs / fn,
		AbsM:   absM,
		// The explicit conversion keeps the compiler from fusing the
		// multiply and subtract, so every platform rounds alike.
		Chi: fn * (m2 - float64(absM*absM)) / T,
	}
}

// lattice is the state of one Metropolis run.
type lattice struct {
	side  int
	spins []int32 // ±1, row-major
	// thr[dE/4] is exp(-dE/T) scaled to 2^32, for dE = 4 and 8.
	thr    [3]uint32
	rng    *rand.PCG
	draw   uint64 // holds 32 unused random bits when half is true
	half   bool
	energy int64 // E = -Σ s_i s_j over the 2N bonds
	mag    int64 // M = Σ s_i
}

// newLattice returns an all-up L×L lattice at temperature T whose random
// numbers come from a PCG generator (math/rand/v2) seeded with seed.
func newLattice(T float64, L int, seed uint64) *lattice {
	n := L * L
	lat := &lattice{
		side:   L,
		spins:  make([]int32, n),
		rng:    rand.NewPCG(seed, pcgStream),
		energy: int64(-2 * n),
		mag:    int64(n),
	}
	for i := range lat.spins {
		lat.spins[i] = 1
	}
	for k := 1; k <= 2; k++ {
		lat.thr[k] = uint32(math.Exp(-4*float64(k)/T) * (1 << 32))
	}
	return lat
}

// sweep attempts one flip per site, in lattice order. A flip that lowers
// or keeps the energy is accepted; one that raises it by dE (4 or 8) is
// accepted with probability exp(-dE/T), decided by comparing 32 random bits
// with the precomputed threshold. Each 64-bit draw serves two decisions.
func (lat *lattice) sweep() {
	L, spins, thr, rng := lat.side, lat.spins, lat.thr, lat.rng
	draw, half := lat.draw, lat.half
	energy, mag := lat.energy, lat.mag
	for r := range L {
		row := spins[r*L : r*L+L]
		up := spins[((r+L-1)%L)*L:][:L]
		down := spins[((r+1)%L)*L:][:L]
		for c := 0; c < L; c++ {
			left, right := c-1, c+1
			if c == 0 {
				left = L - 1
			} else if c == L-1 {
				right = 0
			}
			s := row[c]
			dE := 2 * s * (row[left] + row[right] + up[c] + down[c])
			if dE > 0 {
				var u uint32
				if half {
					u, half = uint32(draw>>32), false
				} else {
					draw = rng.Uint64()
					u, half = uint32(draw), true
				}
				if u >= thr[dE>>2] {
					continue
				}
			}
			row[c] = -s
			energy += int64(dE)
			mag -= int64(2 * s)
		}
	}
	lat.draw, lat.half = draw, half
	lat.energy, lat.mag = energy, mag
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
