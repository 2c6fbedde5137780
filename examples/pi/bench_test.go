package main

import "testing"

// BenchmarkKernel measures the sampling kernel: ns/op is nanoseconds per
// sample. The same benchmark compiled for wasip1 (see bench_ratio.sh) gives
// the WebAssembly/native ratio.
func BenchmarkKernel(b *testing.B) {
	inside := countInside(1, int64(b.N))
	if inside < 0 || inside > int64(b.N) {
		b.Fatalf("inside %d out of range for %d samples", inside, b.N)
	}
}
