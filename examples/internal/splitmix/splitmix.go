// Package splitmix is the SplitMix64 random number generator of Steele,
// Lea and Flood, "Fast splittable pseudorandom number generators"
// (OOPSLA 2014), in the form of Vigna's reference splitmix64.c
// (https://prng.di.unimi.it/splitmix64.c): a 64-bit Weyl sequence whose
// every state goes through a fixed 64-bit mixer. It passes BigCrush, and
// it needs only 64-bit adds, shifts, xors and 64×64→64-bit multiplies,
// which WebAssembly has as single instructions; the PCG of math/rand/v2
// needs a 64×64→128-bit multiply, which WebAssembly lacks and Go's
// compiler for GOARCH=wasm builds from four 32-bit products. A job
// program's sampling loop on SplitMix64 runs in WebAssembly within about
// 1.5 times its native speed, on PCG about 6 times slower
// (docs/benchmarks.md).
//
// Two streams seeded with different task seeds are the same Weyl
// sequence started at different points; streams of n draws from T tasks
// with random seeds overlap with probability about T²·n/2^64 (10^-7 for
// 1,000 tasks of 10^6 draws), far below any statistical effect.
//
// The package uses only the standard library so that it compiles with
// GOOS=wasip1 GOARCH=wasm.
package splitmix

// Gamma is the Weyl increment: 2^64 divided by the golden ratio, odd.
const Gamma = 0x9e3779b97f4a7c15

// Source is a SplitMix64 generator. The zero value is the stream of seed
// 0. It implements math/rand/v2's Source. Not safe for concurrent use.
type Source struct {
	state uint64
}

// New returns the stream of seed: its first draw mixes seed+Gamma.
func New(seed uint64) *Source { return &Source{state: seed} }

// Uint64 returns the next 64 random bits.
func (s *Source) Uint64() uint64 {
	s.state += Gamma
	return Mix(s.state)
}

// Mix is SplitMix64's output function (Stafford's Mix13 variant): a
// bijection of 64-bit words that spreads every input bit over the output.
func Mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
