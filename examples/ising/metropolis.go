package main

import (
	"math"
	"math/bits"
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
	rng    pcg
	draw   uint64 // holds 32 unused random bits when half is true
	half   bool
	energy int64 // E = -Σ s_i s_j over the 2N bonds
	mag    int64 // M = Σ s_i
}

// newLattice returns an all-up L×L lattice at temperature T whose random
// numbers come from a PCG generator (math/rand/v2's) seeded with seed.
func newLattice(T float64, L int, seed uint64) *lattice {
	n := L * L
	lat := &lattice{
		side:   L,
		spins:  make([]int32, n),
		rng:    pcg{hi: seed, lo: pcgStream},
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
//
// Its shape is for WebAssembly, where Go's code pays for every call and
// every bounds check more than natively: the generator's state lives in
// locals and is stepped inline (pcg.next, the same numbers as
// math/rand/v2's PCG), the first and last columns, whose neighbours wrap
// around, are handled apart from the others, whose indices the compiler
// proves in bounds, and the spins are compared and flipped in one
// function without calls.
func (lat *lattice) sweep() {
	L, spins := lat.side, lat.spins
	thr1, thr2 := lat.thr[1], lat.thr[2]
	hi, lo := lat.rng.hi, lat.rng.lo
	draw, half := lat.draw, lat.half
	energy, mag := lat.energy, lat.mag
	// site decides the flip of spin s, whose four neighbours sum to nb,
	// and reports whether to flip it.
	site := func(s, nb int32) bool {
		dE := 2 * s * nb
		if dE > 0 {
			var u uint32
			if half {
				u, half = uint32(draw>>32), false
			} else {
				hi, lo = pcgNext(hi, lo)
				draw = pcgOutput(hi, lo)
				u, half = uint32(draw), true
			}
			thr := thr1
			if dE != 4 {
				thr = thr2
			}
			if u >= thr {
				return false
			}
		}
		energy += int64(dE)
		mag -= int64(2 * s)
		return true
	}
	for r := range L {
		row := spins[r*L : r*L+L]
		up := spins[((r+L-1)%L)*L:][:len(row)]
		down := spins[((r+1)%L)*L:][:len(row)]
		if s := row[0]; site(s, row[L-1]+row[1]+up[0]+down[0]) {
			row[0] = -s
		}
		for c := 1; c < len(row)-1; c++ {
			if s := row[c]; site(s, row[c-1]+row[c+1]+up[c]+down[c]) {
				row[c] = -s
			}
		}
		if c := L - 1; c > 0 {
			if s := row[c]; site(s, row[c-1]+row[0]+up[c]+down[c]) {
				row[c] = -s
			}
		}
	}
	lat.rng.hi, lat.rng.lo = hi, lo
	lat.draw, lat.half = draw, half
	lat.energy, lat.mag = energy, mag
}

// pcg is the state of math/rand/v2's PCG generator (rand.NewPCG(hi, lo)),
// stepped by pcgNext and pcgOutput, which give the same numbers as its
// Uint64.
type pcg struct{ hi, lo uint64 }

// pcgNext is the PCG state's step: state·mul + inc modulo 2^128.
func pcgNext(hi, lo uint64) (uint64, uint64) {
	const (
		mulHi = 2549297995355413924
		mulLo = 4865540595714422341
		incHi = 6364136223846793005
		incLo = 1442695040888963407
	)
	h, l := bits.Mul64(lo, mulLo)
	h += hi*mulLo + lo*mulHi
	l, c := bits.Add64(l, incLo, 0)
	h, _ = bits.Add64(h, incHi, c)
	return h, l
}

// pcgOutput is PCG's DXSM output of a state.
func pcgOutput(hi, lo uint64) uint64 {
	const cheapMul = 0xda942042e4dd58b5
	hi ^= hi >> 32
	hi *= cheapMul
	hi ^= hi >> 48
	hi *= lo | 1
	return hi
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
