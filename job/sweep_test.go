package job

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/google/go-cmp/cmp"
)

// rangeAxis parses a TOML range table written inline, as a manifest's
// [split.grid] holds it, and returns its values.
func rangeAxis(t *testing.T, table string) ([]any, error) {
	t.Helper()
	text := "name = \"r\"\nprogram = \"p.wasm\"\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n[split]\nrule = \"grid\"\n[split.grid]\nT = " + table + "\n"
	m, err := ParseManifest("job.toml", t.TempDir(), []byte(text))
	if err != nil {
		return nil, err
	}
	return gridAxisValues(m.Split.Grid["T"])
}

// floatBits returns the IEEE 754 bits of each float64 of vals, failing on a
// value of another type.
func floatBits(t *testing.T, vals []any) []uint64 {
	t.Helper()
	out := make([]uint64, len(vals))
	for i, v := range vals {
		f, ok := v.(float64)
		if !ok {
			t.Fatalf("value %d is %T %v, want a float64", i, v, v)
		}
		out[i] = math.Float64bits(f)
	}
	return out
}

// TestGridRangeValues pins the values of float ranges to the last bit:
// docs/author.md shows the first two tables.
func TestGridRangeValues(t *testing.T) {
	tests := []struct {
		name  string
		table string
		want  []uint64
	}{{
		name:  "0.1 to 1.0 by 0.1",
		table: "{ start = 0.1, stop = 1.0, step = 0.1 }",
		// The float64s of the literals 0.1, 0.2, ..., 1.0: 0.3 is
		// 0x3fd3333333333333, not 0.1+0.1+0.1 (0x3fd3333333333334).
		want: []uint64{0x3fb999999999999a, 0x3fc999999999999a, 0x3fd3333333333333, 0x3fd999999999999a, 0x3fe0000000000000,
			0x3fe3333333333333, 0x3fe6666666666666, 0x3fe999999999999a, 0x3feccccccccccccd, 0x3ff0000000000000},
	}, {
		name:  "log 1e-3 to 1e3, 7 values",
		table: `{ start = 1e-3, stop = 1e3, num = 7, spacing = "log" }`,
		want: []uint64{0x3f50624dd2f1a9fc, 0x3f847ae147ae147b, 0x3fb999999999999a, 0x3ff0000000000000,
			0x4024000000000000, 0x4059000000000000, 0x408f400000000000},
	}, {
		name:  "log 1 to 2, 5 values: 2^(i/4)",
		table: `{ start = 1, stop = 2, num = 5, spacing = "log" }`,
		want:  []uint64{0x3ff0000000000000, 0x3ff306fe0a31b715, 0x3ff6a09e667f3bcd, 0x3ffae89f995ad3ad, 0x4000000000000000},
	}, {
		name:  "log descending",
		table: `{ start = 100.0, stop = 1.0, num = 3, spacing = "log" }`,
		want:  []uint64{math.Float64bits(100), math.Float64bits(10), math.Float64bits(1)},
	}, {
		name:  "stop not reached",
		table: "{ start = 0.0, stop = 1.0, step = 0.3 }",
		want:  []uint64{0, 0x3fd3333333333333, 0x3fe3333333333333, 0x3feccccccccccccd},
	}, {
		name:  "descending by a negative step",
		table: "{ start = 1.0, stop = 0.0, step = -0.25 }",
		want:  []uint64{0x3ff0000000000000, 0x3fe8000000000000, 0x3fe0000000000000, 0x3fd0000000000000, 0},
	}, {
		name:  "across zero",
		table: "{ start = -0.2, stop = 0.2, step = 0.1 }",
		want:  []uint64{math.Float64bits(-0.2), math.Float64bits(-0.1), 0, math.Float64bits(0.1), math.Float64bits(0.2)},
	}, {
		name:  "num, linear",
		table: "{ start = 0.1, stop = 0.2, num = 3 }",
		want:  []uint64{math.Float64bits(0.1), math.Float64bits(0.15), math.Float64bits(0.2)},
	}, {
		name:  "num, linear, thirds",
		table: "{ start = 0.0, stop = 1.0, num = 4 }",
		want:  []uint64{0, math.Float64bits(1.0 / 3), math.Float64bits(2.0 / 3), 0x3ff0000000000000},
	}, {
		name:  "integers with a float step",
		table: "{ start = 0, stop = 1, step = 0.25 }",
		want:  []uint64{0, 0x3fd0000000000000, 0x3fe0000000000000, 0x3fe8000000000000, 0x3ff0000000000000},
	}, {
		name:  "start equals stop",
		table: "{ start = 2.5, stop = 2.5, step = 1.0 }",
		want:  []uint64{math.Float64bits(2.5)},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vals, err := rangeAxis(t, tc.table)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, floatBits(t, vals)); diff != "" {
				t.Errorf("bits (-want +got):\n%s", diff)
			}
		})
	}
}

// TestGridRangeLiterals checks the rule's promise: a decimal range gives
// the float64s of the literals one would write by hand, here the 41
// temperatures of examples/ising, 1.50 to 3.50 by 0.05.
func TestGridRangeLiterals(t *testing.T) {
	vals, err := rangeAxis(t, "{ start = 1.5, stop = 3.5, step = 0.05 }")
	if err != nil {
		t.Fatal(err)
	}
	if len(vals) != 41 {
		t.Fatalf("%d values, want 41", len(vals))
	}
	for i, v := range vals {
		c := 150 + 5*i // hundredths
		lit := fmt.Sprintf("%d.%02d", c/100, c%100)
		want, _ := strconv.ParseFloat(lit, 64)
		if v != want {
			t.Errorf("value %d = %v (%#x), want the literal %s (%#x)", i, v, math.Float64bits(v.(float64)), lit, math.Float64bits(want))
		}
	}
}

func TestGridRangeIntegers(t *testing.T) {
	tests := []struct {
		table string
		want  []any
	}{
		{"{ start = 0, stop = 10, step = 3 }", []any{int64(0), int64(3), int64(6), int64(9)}},
		{"{ start = 10, stop = -10, step = -5 }", []any{int64(10), int64(5), int64(0), int64(-5), int64(-10)}},
		{"{ start = 7, stop = 7, step = 1 }", []any{int64(7)}},
		{"{ start = 9223372036854775800, stop = 9223372036854775807, step = 3 }",
			[]any{int64(9223372036854775800), int64(9223372036854775803), int64(9223372036854775806)}},
		{"{ start = -9223372036854775808, stop = 9223372036854775807, step = 9223372036854775807 }",
			[]any{int64(math.MinInt64), int64(-1), int64(math.MaxInt64 - 1)}},
	}
	for _, tc := range tests {
		t.Run(tc.table, func(t *testing.T) {
			vals, err := rangeAxis(t, tc.table)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, vals); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGridRangeErrors(t *testing.T) {
	tests := []struct{ table, want string }{
		{"{ start = 0.0, stop = 1.0, step = 0.0 }", "step = 0 never reaches stop"},
		{"{ start = 0, stop = 1, step = 0 }", "step = 0 never reaches stop"},
		{"{ start = 0.0, stop = 1.0, step = -0.1 }", "step = -0.1 moves away from stop = 1 (start = 0): want a positive step"},
		{"{ start = 5, stop = 1, step = 1 }", "step = 1 moves away from stop = 1 (start = 5): want a negative step"},
		{`{ start = 1.0, stop = 10.0, num = 1, spacing = "log" }`, "num must be 2..1000000 (both ends are values), got 1"},
		{`{ start = 0.0, stop = 10.0, num = 5, spacing = "log" }`, "a log range needs start > 0 and stop > 0, got start = 0 and stop = 10"},
		{`{ start = 1.0, stop = -10.0, num = 5, spacing = "log" }`, "a log range needs start > 0 and stop > 0"},
		{`{ start = 1.0, stop = 10.0, step = 1.0, spacing = "log" }`, "a log range needs num (how many values), not step"},
		{`{ start = 1.0, stop = 10.0, num = 5, spacing = "logarithmic" }`, `spacing must be "linear" or "log", got logarithmic`},
		{"{ start = 0.0, stop = 1.0, step = 1e-7 }", "the range has 10000001 values, more than 1000000: take a larger step"},
		{"{ start = 0, stop = 9223372036854775807, step = 1 }", "the range has 9223372036854775808 values, more than 1000000"},
		{"{ start = 0.0, stop = 1.0, num = 1000001 }", "num must be 2..1000000"},
		{"{ start = 0.0, stop = 1.0, step = 0.1, num = 5 }", "give step or num, not both"},
		{"{ start = 0.0, stop = 1.0 }", "missing step or num"},
		{"{ stop = 1.0, step = 0.1 }", "missing start"},
		{"{ start = 0.0, stop = 1.0, step = 0.1, end = 3 }", `unknown key "end"`},
		{`{ start = "a", stop = 1.0, step = 0.1 }`, "start must be a number, got a string"},
		{`{ start = 0.0, stop = 1.0, step = "x" }`, "step must be a number, got a string"},
		{"{ start = 0.0, stop = 1.0, num = 2.5 }", "num must be an integer, got a float"},
		{"{ start = 1.0, stop = 1.0, num = 3 }", "start and stop are both 1, so all 3 values would be equal"},
		{"{ start = 9007199254740993, stop = 9007199254740999.0, step = 1 }", "start = 9007199254740993 is an integer beyond 2^53 in a range of floats"},
		{"true", "want a list of values, e.g. T = [1.5, 2.0], or a range"},
		{"[]", "want a non-empty list of values"},
	}
	for _, tc := range tests {
		t.Run(tc.table, func(t *testing.T) {
			_, err := rangeAxis(t, tc.table)
			var me *ManifestError
			if !errors.As(err, &me) {
				t.Fatalf("error = %v, want a *ManifestError", err)
			}
			if me.Field != "split.grid.T" || !strings.Contains(me.Msg, tc.want) {
				t.Errorf("error = %v (field %q), want field split.grid.T and a message containing %q", err, me.Field, tc.want)
			}
		})
	}
}

// TestGridRangeFastPath checks that the quick division of linear ranges
// whose numbers fit in 53 bits gives the bits that exact rational
// arithmetic (big.Rat, value) gives.
func TestGridRangeFastPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	decimal := func() float64 { // a short decimal such as 3.14 or -0.0005
		f, _ := strconv.ParseFloat(fmt.Sprintf("%de-%d", rng.IntN(20001)-10000, rng.IntN(8)), 64)
		return f
	}
	for range 300 {
		start, stop := decimal(), decimal()
		if start == stop {
			continue
		}
		var r gridRange
		if rng.IntN(2) == 0 {
			r = gridRange{start: start, stop: stop, num: 2 + rng.Int64N(50)}
		} else {
			step := math.Abs(decimal())
			if step == 0 {
				continue
			}
			if stop < start {
				step = -step
			}
			r = gridRange{start: start, stop: stop, step: step}
			if r.stepCount().Cmp(big.NewInt(2000)) > 0 {
				continue
			}
		}
		vals := r.values()
		for i, v := range vals {
			if want := r.value(int64(i)); v != want {
				t.Fatalf("range %+v value %d = %v, exact arithmetic gives %v", r, i, v, want)
			}
		}
		if r.num > 0 && (vals[0] != start || vals[len(vals)-1] != stop) {
			t.Errorf("range %+v runs %v..%v, want %v..%v", r, vals[0], vals[len(vals)-1], start, stop)
		}
	}
}

// TestGridRangeLogPrecision checks log ranges against values computed on
// their own at 128 more bits, as exp(i·ln(stop/start)/(num−1)):
// the successive products at rangeBits bits lose nothing that shows in a
// float64. And they are close to what math.Pow gives, which is not exact.
func TestGridRangeLogPrecision(t *testing.T) {
	ranges := []struct {
		start, stop float64
		num         int64
	}{{1e-3, 1e3, 7}, {1, 2, 1000}, {0.5, 3e5, 97}, {1e-300, 1e300, 601}, {7, 0.01, 33}, {1, 1 + 1e-12, 5}, {5e-324, 1.7e308, 50}}
	// Every value of the short ranges; of the long ones, every 17th and
	// the last few, where the products' error is largest.
	checked := func(i, n int64) bool { return n <= 100 || i%17 == 0 || i >= n-3 }
	for _, rg := range ranges {
		t.Run(fmt.Sprintf("%v..%v/%d", rg.start, rg.stop, rg.num), func(t *testing.T) {
			vals := logValues(rg.start, rg.stop, rg.num)
			const prec = rangeBits + 128
			ratio := new(big.Rat).Quo(rangeDecimal(rg.stop), rangeDecimal(rg.start))
			lnr := bigLn(new(big.Float).SetPrec(prec).SetRat(ratio))
			a := new(big.Float).SetPrec(prec).SetRat(rangeDecimal(rg.start))
			for i := range rg.num {
				if !checked(i, rg.num) {
					continue
				}
				e := new(big.Float).SetPrec(prec).Mul(lnr, new(big.Float).SetPrec(prec).SetInt64(i))
				e.Quo(e, new(big.Float).SetPrec(prec).SetInt64(rg.num-1))
				ref := new(big.Float).SetPrec(prec).Mul(a, bigExp(e))
				want, acc := ref.Float64()
				if acc != big.Exact {
					// Near a tie the reference cannot tell either: the
					// exact ties are TestGridRangeLogDecades' part.
					other := math.Nextafter(want, map[big.Accuracy]float64{big.Below: math.Inf(1), big.Above: math.Inf(-1)}[acc])
					m := new(big.Float).SetPrec(prec).SetFloat64(want)
					m.Add(m, big.NewFloat(other)).Quo(m, big.NewFloat(2))
					if nearTie(ref, m) {
						continue
					}
				}
				if got := vals[i].(float64); got != want {
					t.Fatalf("value %d = %v (%#x), computed alone at %d bits %v (%#x)", i, got, math.Float64bits(got), prec, want, math.Float64bits(want))
				}
				if r := rg.stop / rg.start; math.IsInf(r, 0) || r == 0 {
					continue // beyond math.Pow's range
				}
				pow := rg.start * math.Pow(rg.stop/rg.start, float64(i)/float64(rg.num-1))
				// math.Pow of the rounded ratio and exponent is off by
				// up to |ln(stop/start)| ulps or so.
				if got := vals[i].(float64); math.Abs(got-pow) > 0x1p-44*got {
					t.Errorf("value %d = %v, math.Pow gives %v", i, got, pow)
				}
			}
		})
	}
}

// TestGridRangeLogDecades checks log ranges whose values are powers of
// ten: each is the float64 of its decimal literal, including 1e23, which
// lies exactly halfway between two float64s (ties to even: strconv's
// 0x44b52d02c7e14af6), and others within a hair of a tie.
func TestGridRangeLogDecades(t *testing.T) {
	for _, rg := range []struct{ from, to, num int64 }{{-300, 300, 601}, {20, 25, 6}, {-10, 30, 21}, {30, 20, 11}} {
		t.Run(fmt.Sprintf("1e%d..1e%d/%d", rg.from, rg.to, rg.num), func(t *testing.T) {
			table := fmt.Sprintf(`{ start = 1e%d, stop = 1e%d, num = %d, spacing = "log" }`, rg.from, rg.to, rg.num)
			vals, err := rangeAxis(t, table)
			if err != nil {
				t.Fatal(err)
			}
			step := (rg.to - rg.from) / (rg.num - 1)
			for i, v := range vals {
				lit := fmt.Sprintf("1e%d", rg.from+int64(i)*step)
				want, _ := strconv.ParseFloat(lit, 64)
				if v != want {
					t.Errorf("value %d = %v (%#x), want %s (%#x)", i, v, math.Float64bits(v.(float64)), lit, math.Float64bits(want))
				}
			}
		})
	}
	if got := logValues(1e20, 1e25, 6)[3].(float64); math.Float64bits(got) != 0x44b52d02c7e14af6 {
		t.Errorf("1e23 = %#x, want 0x44b52d02c7e14af6", math.Float64bits(got))
	}
	// An approximation of 10^23 on either side of the tie still rounds
	// to even: the tie is settled exactly, not by which side the series
	// happened to land on.
	exact := new(big.Float).SetPrec(rangeBits).SetRat(rangeDecimal(1e23))
	for _, eps := range []float64{0x1p-310, -0x1p-310, 0x1p-400, -0x1p-400} {
		approx := new(big.Float).SetPrec(rangeBits).Mul(exact, big.NewFloat(eps))
		approx.Add(approx, exact)
		if got := roundLog(approx, rangeDecimal(1e20), rangeDecimal(1e25), 3, 6); math.Float64bits(got) != 0x44b52d02c7e14af6 {
			t.Errorf("10^23·(1%+g) rounds to %#x, want 0x44b52d02c7e14af6", eps, math.Float64bits(got))
		}
	}
	// logValues sends exactly such approximations to roundLog.
	scratch := func() *big.Float { return new(big.Float).SetPrec(rangeBits) }
	for _, tc := range []struct {
		x    *big.Float
		near bool
	}{
		{new(big.Float).SetPrec(rangeBits).Add(exact, new(big.Float).SetMantExp(exact, -310)), true},
		{new(big.Float).SetPrec(rangeBits).Sub(exact, new(big.Float).SetMantExp(exact, -400)), true},
		{new(big.Float).SetPrec(rangeBits).Add(exact, new(big.Float).SetMantExp(exact, -280)), false},
		{new(big.Float).SetPrec(rangeBits).SetRat(rangeDecimal(1e22)), false},
		{new(big.Float).SetPrec(rangeBits).SetRat(rangeDecimal(0.1)), false},
		{new(big.Float).SetPrec(rangeBits).SetMantExp(big.NewFloat(3), -1075), true},  // 1.5·2^-1074, halfway between 2^-1074 and 2^-1073
		{new(big.Float).SetPrec(rangeBits).SetMantExp(big.NewFloat(3), -1076), false}, // 0.75·2^-1074
		{new(big.Float).SetPrec(rangeBits).SetMantExp(big.NewFloat(1), -1075), true},  // half the least subnormal
	} {
		f, acc := tc.x.Float64()
		if got := roundsNearTie(tc.x, f, acc, scratch(), scratch()); got != tc.near {
			t.Errorf("roundsNearTie(%g) = %v, want %v", tc.x, got, tc.near)
		}
	}
	// An approximation that is a float64 is that float64.
	if got := roundLog(new(big.Float).SetPrec(rangeBits).SetFloat64(3), rangeDecimal(1.0), rangeDecimal(9.0), 1, 3); got != 3 {
		t.Errorf("sqrt(1·9) = %v, want 3", got)
	}
}

func TestGridRangeJob(t *testing.T) {
	const head = "name = \"sweep\"\nprogram = \"prog.wasm\"\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n[split]\nrule = \"grid\"\n[split.grid]\n"
	j := plan(t, head+"alpha = { start = 0.1, stop = 0.3, step = 0.1 }\nbeta = { start = 1, stop = 3, step = 1 }\n", goldenFiles)
	if j.NumTasks() != 9 {
		t.Fatalf("NumTasks = %d, want 9", j.NumTasks())
	}
	var got []string
	for i := range j.NumTasks() {
		p := j.Task(i).Params
		got = append(got, fmt.Sprintf("%v %T %v", p["alpha"], p["beta"], p["beta"]))
	}
	want := []string{"0.1 int64 1", "0.1 int64 2", "0.1 int64 3", "0.2 int64 1", "0.2 int64 2", "0.2 int64 3", "0.3 int64 1", "0.3 int64 2", "0.3 int64 3"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("params (-want +got):\n%s", diff)
	}
	if s := string(j.TaskJSON(j.Task(6))); !strings.Contains(s, `"params":{"alpha":0.3,"beta":1}`) {
		t.Errorf("task 6 JSON %s, want params alpha 0.3 and beta 1", s)
	}

	// The encoding holds the range's canonical table, not its values.
	var doc struct {
		Split struct {
			Grid map[string]map[string]any `cbor:"grid"`
		} `cbor:"split"`
	}
	if err := cbor.Unmarshal(j.Canonical, &doc); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]any{"start": 0.1, "stop": 0.3, "step": 0.1}, doc.Split.Grid["alpha"]); diff != "" {
		t.Errorf("encoded alpha (-want +got):\n%s", diff)
	}

	// The same range written otherwise is the same job; rebuilt from its
	// encoding, it has the same tasks.
	same := plan(t, head+"alpha = { step = 0.1, stop = 0.3, start = 0.1, spacing = \"linear\" }\nbeta = { start = 1, stop = 3, step = 1 }\n", goldenFiles)
	if same.ID != j.ID {
		t.Errorf("the range written in another order, with spacing = \"linear\": ID %s, want %s", same.ID, j.ID)
	}
	back, err := FromCanonical(j.Canonical, func(Digest) string { return j.Program.Path })
	if err != nil {
		t.Fatal(err)
	}
	for i := range j.NumTasks() {
		if a, b := j.TaskJSON(j.Task(i)), back.TaskJSON(back.Task(i)); string(a) != string(b) {
			t.Errorf("rebuilt task %d: %s, want %s", i, b, a)
		}
	}
	floatStart := plan(t, head+"alpha = { start = 0.1, stop = 0.3, step = 0.1 }\nbeta = { start = 1.0, stop = 3, step = 1 }\n", goldenFiles)
	if floatStart.ID == j.ID {
		t.Error("beta as floats (1.0, 2.0, 3.0) has the ID of beta as integers")
	}
	other := plan(t, head+"alpha = { start = 0.1, stop = 0.3, step = 0.1 }\nbeta = { start = 1, stop = 4, step = 1 }\n", goldenFiles)
	if other.ID == j.ID {
		t.Error("another range has the same ID")
	}
}

// TestGridRangeCostParam checks that a range axis can be the cost
// parameter exactly when all its values are non-negative numbers.
func TestGridRangeCostParam(t *testing.T) {
	const head = "name = \"sweep\"\nprogram = \"p.wasm\"\n[[merge]]\nrule = \"sum\"\nfield = \"v\"\n[policy]\ncost_param = \"n\"\n[split]\nrule = \"grid\"\n[split.grid]\n"
	for table, ok := range map[string]bool{
		"n = { start = 100, stop = 1000, step = 100 }":               true,
		"n = { start = 1000.0, stop = 0.0, step = -0.5 }":            true,
		`n = { start = 1e-3, stop = 1e3, num = 4, spacing = "log" }`: true,
		"n = { start = 3, stop = -3, step = -1 }":                    false,
		"n = { start = -0.5, stop = 1.0, num = 4 }":                  false,
	} {
		_, err := ParseManifest("job.toml", t.TempDir(), []byte(head+table+"\n"))
		if ok && err != nil || !ok && (err == nil || !strings.Contains(err.Error(), "policy.cost_param")) {
			t.Errorf("%s: error %v, want ok = %v", table, err, ok)
		}
	}
}
