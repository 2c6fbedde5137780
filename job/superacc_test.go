package job

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// exactSumRef sums xs in math/big at a precision that holds every sum of
// float64 values exactly (2098 bits of range plus carries), then rounds
// once to the nearest float64, ties to even.
func exactSumRef(xs []float64) float64 {
	acc := new(big.Float).SetPrec(2400)
	for _, x := range xs {
		acc.Add(acc, new(big.Float).SetFloat64(x))
	}
	f, _ := acc.Float64()
	return f
}

// exactSquaresRef is the exact sum of x·x as a big.Rat.
func exactSquaresRef(xs []float64) *big.Rat {
	acc := new(big.Rat)
	for _, x := range xs {
		r := new(big.Rat).SetFloat64(x)
		acc.Add(acc, r.Mul(r, r))
	}
	return acc
}

func superaccSum(xs []float64) float64 {
	var a superacc
	for _, x := range xs {
		a.add(x)
	}
	return a.float64()
}

// sameFloatBits compares bits, so that -0 differs from +0 and NaN equals NaN.
func sameFloatBits(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || (math.IsNaN(a) && math.IsNaN(b))
}

// randWideFloat draws a float64 of random sign, mantissa and exponent over
// the whole finite range, subnormals included.
func randWideFloat(rng *rand.Rand) float64 {
	bits := rng.Uint64() &^ (0x7ff << 52)
	exp := rng.Uint64N(0x7ff) // 0..2046: never Inf or NaN
	return math.Float64frombits(bits | exp<<52)
}

func repeatFloat(x float64, n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = x
	}
	return xs
}

func TestSuperaccKnownSums(t *testing.T) {
	tiny := math.SmallestNonzeroFloat64
	for _, tc := range []struct {
		name string
		xs   []float64
		want float64
	}{
		{"empty", nil, 0},
		{"cancellation", []float64{1e308, 1, -1e308}, 1},
		{"cancellation reordered", []float64{1, 1e308, -1e308, 1e-300}, 1},
		{"exact zero", []float64{0.1, 0.2, -0.1, -0.2}, 0},
		{"negative zeros", []float64{math.Copysign(0, -1), math.Copysign(0, -1)}, 0},
		{"tie to even stays", []float64{1, 0x1p-53}, 1},
		{"tie to even rounds up", []float64{1 + 0x1p-52, 0x1p-53}, 1 + 0x1p-51},
		{"just above a tie", []float64{1, 0x1p-53, 0x1p-106}, 1 + 0x1p-52},
		{"just below a tie", []float64{1, 0x1p-53, -0x1p-1074}, 1},
		{"subnormals add", []float64{tiny, tiny, tiny}, 3 * tiny},
		{"many subnormals", repeatFloat(tiny, 10000), 10000 * tiny},
		{"subnormal to normal", []float64{0x1p-1023, 0x1p-1023}, 0x1p-1022},
		{"overflow", []float64{math.MaxFloat64, math.MaxFloat64}, math.Inf(1)},
		{"overflow at the tie", []float64{math.MaxFloat64, 0x1p970}, math.Inf(1)},
		{"below the overflow tie", []float64{math.MaxFloat64, 0x1p970, -tiny}, math.MaxFloat64},
		{"negative overflow", []float64{-math.MaxFloat64, -math.MaxFloat64}, math.Inf(-1)},
		{"overflow that cancels", []float64{math.MaxFloat64, math.MaxFloat64, -math.MaxFloat64}, math.MaxFloat64},
		{"carries over many adds", repeatFloat(0x1.8p1000, 5000), 0x1.8p1000 * 5000},
		{"tenths", repeatFloat(0.1, 1000000), 100000}, // 1e6·fl(0.1) is 1e5 + 5.6e-12, under half an ulp
		{"plus and minus inf", []float64{math.Inf(1), 1, math.Inf(-1)}, math.NaN()},
		{"inf wins", []float64{math.Inf(1), -math.MaxFloat64}, math.Inf(1)},
		{"nan", []float64{1, math.NaN()}, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := superaccSum(tc.xs); !sameFloatBits(got, tc.want) {
				t.Errorf("sum = %v (%x), want %v (%x)", got, math.Float64bits(got), tc.want, math.Float64bits(tc.want))
			}
		})
	}
}

func TestSuperaccMatchesBigFloat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gens := []struct {
		name string
		gen  func() []float64
	}{
		{"wide range", func() []float64 {
			xs := make([]float64, 1+rng.IntN(3000))
			for i := range xs {
				xs[i] = randWideFloat(rng)
			}
			return xs
		}},
		{"near cancellation", func() []float64 {
			// Pairs x, -x with small perturbations: the exact sum is tiny
			// next to the terms.
			var xs []float64
			for range 1 + rng.IntN(500) {
				x := randWideFloat(rng)
				xs = append(xs, x, -x, math.Nextafter(x, 0)-x)
			}
			return xs
		}},
		{"subnormal and huge", func() []float64 {
			var xs []float64
			for range 1 + rng.IntN(2000) {
				switch rng.IntN(3) {
				case 0:
					xs = append(xs, math.Float64frombits(rng.Uint64N(1<<52))*float64(1-2*rng.IntN(2)))
				case 1:
					xs = append(xs, (rng.Float64()-0.5)*math.MaxFloat64/1e4)
				default:
					xs = append(xs, rng.NormFloat64())
				}
			}
			return xs
		}},
		{"narrow", func() []float64 {
			xs := make([]float64, 1+rng.IntN(5000))
			for i := range xs {
				xs[i] = rng.Float64()
			}
			return xs
		}},
	}
	for _, g := range gens {
		t.Run(g.name, func(t *testing.T) {
			for trial := range 40 {
				xs := g.gen()
				want := exactSumRef(xs)
				if got := superaccSum(xs); !sameFloatBits(got, want) {
					t.Fatalf("trial %d: sum of %d values = %v, want %v", trial, len(xs), got, want)
				}
				// Any order and any split, merged, gives the same state.
				var whole superacc
				for _, x := range xs {
					whole.add(x)
				}
				rng.Shuffle(len(xs), func(i, j int) { xs[i], xs[j] = xs[j], xs[i] })
				var a, b superacc
				cut := rng.IntN(len(xs) + 1)
				for _, x := range xs[:cut] {
					a.add(x)
				}
				for _, x := range xs[cut:] {
					b.add(x)
				}
				b.merge(&a)
				if diff := cmp.Diff(whole.appendState(nil), b.appendState(nil)); diff != "" {
					t.Fatalf("trial %d: state differs after shuffle and merge (-whole +merged):\n%s", trial, diff)
				}
			}
		})
	}
}

func TestSqaccExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, tc := range []struct {
		name string
		xs   []float64
	}{
		{"huge", []float64{1e300, -1e300, 1e200}},
		{"tiny", []float64{math.SmallestNonzeroFloat64, 1e-320, -3e-310, 1e-200}},
		{"mixed", []float64{1e-300, 1, 1e300, 0.1}},
		{"max", repeatFloat(math.MaxFloat64, 3000)},
		{"random", func() []float64 {
			xs := make([]float64, 4000)
			for i := range xs {
				xs[i] = randWideFloat(rng)
			}
			return xs
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a sqacc
			for _, x := range tc.xs {
				a.addSquare(x)
			}
			m, e := a.exact()
			got := new(big.Rat).SetInt(m)
			scale := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(max(e, -e))))
			if e >= 0 {
				got.Mul(got, scale)
			} else {
				got.Quo(got, scale)
			}
			if want := exactSquaresRef(tc.xs); got.Cmp(want) != 0 {
				t.Errorf("sum of squares = %v, want %v", got.FloatString(20), want.FloatString(20))
			}
		})
	}
}

func TestRoundQuoMatchesBigRat(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 3000 {
		num := randBigInt(rng, 1+rng.IntN(300))
		if rng.IntN(2) == 0 {
			num.Neg(num)
		}
		den := big.NewInt(1 + rng.Int64N(1<<uint(1+rng.IntN(62))))
		exp := rng.IntN(2400) - 1300
		want := ratFloat(num, exp, den)
		if got := roundQuo(num, exp, den, false); !sameFloatBits(got, want) {
			t.Fatalf("trial %d: %v·2^%d/%v = %v, want %v", trial, num, exp, den, got, want)
		}
	}
}

// randBigInt returns a random non-negative integer below 2^bits.
func randBigInt(rng *rand.Rand, bits int) *big.Int {
	b := make([]byte, (bits+7)/8)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	x := new(big.Int).SetBytes(b)
	return x.Rsh(x, uint(8*len(b)-bits))
}

// ratFloat is num·2^exp/den correctly rounded by big.Rat.
func ratFloat(num *big.Int, exp int, den *big.Int) float64 {
	n, d := new(big.Int).Set(num), new(big.Int).Set(den)
	if exp >= 0 {
		n.Lsh(n, uint(exp))
	} else {
		d.Lsh(d, uint(-exp))
	}
	f, _ := new(big.Rat).SetFrac(n, d).Float64()
	return f
}

func TestRoundSqrtQuoIsCorrectlyRounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 1500 {
		m := randBigInt(rng, 1+rng.IntN(400))
		den := big.NewInt(1 + rng.Int64N(1<<uint(1+rng.IntN(40))))
		exp := 2 * (rng.IntN(1200) - 700)
		got := roundSqrtQuo(m, exp, den)
		// x = m·2^exp/den²; got is correct when the midpoints to its
		// neighbours bracket sqrt(x): lo² <= x <= hi².
		x := new(big.Rat).SetFrac(m, new(big.Int).Mul(den, den))
		if exp >= 0 {
			x.Mul(x, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(exp))))
		} else {
			x.Quo(x, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), uint(-exp))))
		}
		if m.Sign() == 0 {
			if got != 0 {
				t.Fatalf("sqrt(0) = %v", got)
			}
			continue
		}
		mid := func(a, b float64) *big.Rat {
			r := new(big.Rat).Add(new(big.Rat).SetFloat64(a), new(big.Rat).SetFloat64(b))
			r.Quo(r, big.NewRat(2, 1))
			return r.Mul(r, r)
		}
		lo := mid(math.Nextafter(got, 0), got)
		hi := mid(got, math.Nextafter(got, math.Inf(1)))
		if lo.Cmp(x) > 0 || hi.Cmp(x) < 0 {
			t.Fatalf("trial %d: sqrt(%v·2^%d)/%v = %v is not the nearest float64", trial, m, exp, den, got)
		}
	}
}

func TestSuperaccStateRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for trial := range 200 {
		var a superacc
		for range rng.IntN(50) {
			a.add(randWideFloat(rng))
		}
		if trial%7 == 0 {
			a.add(math.Inf(1))
		}
		enc := a.appendState(nil)
		var b superacc
		r := &stateReader{b: enc}
		b.decodeState(r)
		if r.err != nil || len(r.b) != 0 {
			t.Fatalf("trial %d: decode: %v (%d bytes left)", trial, r.err, len(r.b))
		}
		if got, want := b.float64(), a.float64(); !sameFloatBits(got, want) {
			t.Fatalf("trial %d: round trip gives %v, want %v", trial, got, want)
		}
		if diff := cmp.Diff(enc, b.appendState(nil)); diff != "" {
			t.Fatalf("trial %d: re-encoding differs:\n%s", trial, diff)
		}
	}
}
