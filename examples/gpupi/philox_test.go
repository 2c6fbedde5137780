package main

import (
	"testing"

	"idlepool/examples/internal/philox"
)

// TestCountInsideMatchesPhilox checks countInside's use of the generator,
// sample by sample: counter (low, high word of the index, 0, 0), key (low,
// high word of the seed), inside when x² + y² does not carry out of 64
// bits.
func TestCountInsideMatchesPhilox(t *testing.T) {
	for _, seed := range []uint64{0, 1, 0xdeadbeefcafef00d, ^uint64(0)} {
		for _, i := range []uint64{0, 1, 2, 0xffffffff, 0x100000000, 0x123456789abc} {
			r := philox.Block(philox.Counter(i), philox.Key(seed))
			x, y := uint64(r[0]), uint64(r[1])
			want := uint64(0)
			if x*x+y*y >= x*x { // no carry: inside
				want = 1
			}
			if got := countInside(seed, i, 1); got != want {
				t.Errorf("seed %#x sample %#x: countInside = %d, want %d (x %#x, y %#x)", seed, i, got, want, x, y)
			}
		}
	}
}

// BenchmarkCountInside measures the CPU path natively, in ns per sample.
func BenchmarkCountInside(b *testing.B) {
	const n = 1 << 16
	for b.Loop() {
		countInside(42, 0, n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/sample")
}
