package job

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkSuperaccAdd(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	xs := make([]float64, 4096)
	for i := range xs {
		xs[i] = rng.NormFloat64() * 1e3
	}
	var a superacc
	for i := 0; b.Loop(); i++ {
		a.add(xs[i&4095])
	}
	_ = a.float64()
}

func BenchmarkSqaccAddSquare(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 1))
	xs := make([]float64, 4096)
	for i := range xs {
		xs[i] = rng.NormFloat64() * 1e3
	}
	var a sqacc
	for i := 0; b.Loop(); i++ {
		a.addSquare(xs[i&4095])
	}
}

func BenchmarkMergerAddPi(b *testing.B) {
	m := mergerFor(b,
		MergeSpec{Name: "inside", Rule: "sum", Field: "inside"},
		MergeSpec{Name: "samples", Rule: "sum", Field: "samples"},
	)
	result := []byte(`{"inside":123,"samples":1000}`)
	b.ReportAllocs()
	for i := int64(0); b.Loop(); i++ {
		if err := m.Add(i, result); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMergerAddAllRules(b *testing.B) {
	m := mergerFor(b, allRuleSpecs()...)
	result := []byte(goodAllRuleResult)
	b.ReportAllocs()
	for i := int64(0); b.Loop(); i++ {
		if err := m.Add(i, result); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMergerResultStats(b *testing.B) {
	m := mergerFor(b, MergeSpec{Name: "e", Rule: "stats", Field: "e"})
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 1000 {
		if err := m.Add(int64(i), fmt.Appendf(nil, `{"e":%v}`, rng.NormFloat64())); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		_ = m.Result()
	}
}

func BenchmarkVectorMeanResult1k(b *testing.B) {
	m := mergerFor(b, MergeSpec{Name: "w", Rule: "vector-mean", Field: "g"})
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range 10 {
		g := make([]float64, 1000)
		for j := range g {
			g[j] = rng.NormFloat64()
		}
		if err := m.Add(int64(i), fmt.Appendf(nil, `{"g":%v}`, jsonFloatArray(g))); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		_ = m.Result()
	}
}

func jsonFloatArray(xs []float64) string {
	b := []byte{'['}
	for i, x := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Append(b, x)
	}
	return string(append(b, ']'))
}
