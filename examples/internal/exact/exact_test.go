package exact

import (
	"errors"
	"math"
	"testing"
)

func TestExpLogAccuracy(t *testing.T) {
	for x := -700.0; x <= 700; x += 0.37 {
		want := math.Exp(x)
		if got := Exp(x); math.Abs(got-want) > 4e-15*want {
			t.Fatalf("Exp(%g) = %g, want %g", x, got, want)
		}
	}
	for _, x := range []float64{1e-300, 0.001, 0.5, 0.7071, 1, 1.0000001, 1.5, 2, 10, 12345.678, 1e300} {
		want := math.Log(x)
		if got := Log(x); math.Abs(got-want) > 4e-15*math.Max(1, math.Abs(want)) {
			t.Fatalf("Log(%g) = %.17g, want %.17g", x, got, want)
		}
	}
	for _, tc := range []struct{ got, want float64 }{
		{Log(5e-324), -744.44007192138122}, // math.Log on amd64 gets this one wrong
		{Exp(0), 1}, {Exp(-800), 0}, {Exp(800), math.Inf(1)}, {Log(1), 0}, {Log(0), math.Inf(-1)}, {Log(math.Inf(1)), math.Inf(1)},
	} {
		if tc.got != tc.want {
			t.Errorf("got %g, want %g", tc.got, tc.want)
		}
	}
	if !math.IsNaN(Exp(math.NaN())) || !math.IsNaN(Log(-1)) {
		t.Error("NaN in or a negative logarithm must give NaN")
	}
}

// TestExpGolden pins a few bits: a change in the polynomial or the order of
// its operations changes every trained model, and must be deliberate.
func TestExpGolden(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		bits uint64
	}{
		{-1, 0x3fd78b56362cef38},
		{-0.3, 0x3fe7b4c869c37c05},
		{-20.5, 0x3e157a3afeed00ac},
		{2.75, 0x402f49070bdbe8fd},
	} {
		if got := math.Float64bits(Exp(tc.x)); got != tc.bits {
			t.Errorf("Exp(%g) bits %#x, want %#x", tc.x, got, tc.bits)
		}
	}
	if got := math.Float64bits(Log(3.5)); got != 0x3ff40b512eb53d60 {
		t.Errorf("Log(3.5) bits %#x", got)
	}
}

func TestQuantize(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		bits uint
		want int64
	}{
		{0.5, 1, 1}, {0.25, 1, 0}, {0.75, 1, 2}, {-0.75, 1, -2}, {1.5, 0, 2}, {2.5, 0, 2}, {-1, 24, -1 << 24},
	} {
		got, err := Quantize(tc.x, tc.bits)
		if err != nil || got != tc.want {
			t.Errorf("Quantize(%g, %d) = %d, %v; want %d", tc.x, tc.bits, got, err, tc.want)
		}
	}
	for _, x := range []float64{math.NaN(), math.Inf(1), 1 << 40} {
		if _, err := Quantize(x, 30); !errors.Is(err, ErrRange) {
			t.Errorf("Quantize(%g, 30) error %v, want ErrRange", x, err)
		}
	}
	v := NewVec(1)
	v.Add(0, math.MaxInt64)
	v.Add(0, 1)
	if !errors.Is(v.Err(), ErrRange) || v.S[0] != math.MaxInt64 {
		t.Errorf("overflow: %d, %v", v.S[0], v.Err())
	}
}
