package main

import "testing"

// BenchmarkSweep measures Metropolis near the critical temperature: ns/op
// is nanoseconds per attempted spin flip.
func BenchmarkSweep(b *testing.B) {
	const side = 32
	sweeps := b.N/(side*side) + 1
	b.ResetTimer()
	m := simulate(2.3, side, 0, sweeps, 1)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(sweeps*side*side), "ns/flip")
	if m.AbsM < 0 || m.AbsM > 1 {
		b.Fatalf("|m| %v out of range", m.AbsM)
	}
}
