package job

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseExprEval(t *testing.T) {
	vars := map[string]float64{
		"a": 2, "b": 3, "inside": 785398, "energy.mean": -1.5, "x_1": 10, "T.2.5": 7, "_": 1,
		"sqrt": 9, // a name, unless called
	}
	tests := []struct {
		src  string
		want float64
	}{
		// Numbers.
		{"1", 1},
		{"1.5", 1.5},
		{".5", 0.5},
		{"5.", 5},
		{"1e3", 1000},
		{"1E3", 1000},
		{"2.5e-1", 0.25},
		{"1e+2", 100},
		{"0", 0},
		// Precedence and associativity.
		{"1 + 2 * 3", 7},
		{"(1 + 2) * 3", 9},
		{"10 - 4 - 3", 3},
		{"10 - (4 - 3)", 9},
		{"100 / 10 / 5", 2},
		{"100 / (10 / 5)", 50},
		{"2 * 3 / 4", 1.5},
		{"2 ^ 3 ^ 2", 512},
		{"(2 ^ 3) ^ 2", 64},
		{"2 * 3 ^ 2", 18},
		{"3 ^ 2 * 2", 18},
		{"1 + 2 ^ 2 * 3", 13},
		// Unary signs.
		{"-2", -2},
		{"+2", 2},
		{"--2", 2},
		{"-+-2", 2},
		{"-2 ^ 2", -4},
		{"(-2) ^ 2", 4},
		{"2 ^ -1", 0.5},
		{"2 ^ -1 ^ 2", 0.5},
		{"-a * b", -6},
		{"1 - -1", 2},
		{"2 * -3", -6},
		// Functions.
		{"sqrt(16)", 4},
		{"sqrt(a * 8)", 4},
		{"abs(-3) + abs(3)", 6},
		{"exp(0)", 1},
		{"log(1)", 0},
		{"log(exp(2))", 2},
		{"sqrt(sqrt(16))", 2},
		{"-sqrt(4)", -2},
		{"sqrt(4) ^ 2", 4},
		{"sqrt (9)", 3},
		{"sqrt", 9},
		{"sqrt * 2", 18},
		// Names.
		{"a", 2},
		{"a+b", 5},
		{"4 * inside / 1000000", 3.141592},
		{"energy.mean * 2", -3},
		{"x_1 / T.2.5 * 7", 10},
		{"_", 1},
		// White space.
		{"  a\t*\tb  ", 6},
		{"a*b", 6},
		// IEEE 754 arithmetic.
		{"1 / 0", math.Inf(1)},
		{"-1 / 0", math.Inf(-1)},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			e, err := ParseExpr(tc.src)
			if err != nil {
				t.Fatalf("ParseExpr: %v", err)
			}
			got, err := e.Eval(vars)
			if err != nil {
				t.Fatalf("Eval: %v", err)
			}
			if math.Abs(got-tc.want) > 1e-12*math.Max(1, math.Abs(tc.want)) && got != tc.want {
				t.Errorf("Eval = %v, want %v", got, tc.want)
			}
			if e.String() != tc.src {
				t.Errorf("String() = %q, want %q", e.String(), tc.src)
			}
		})
	}
}

func TestParseExprNaN(t *testing.T) {
	for _, src := range []string{"0 / 0", "sqrt(-1)", "log(-1)"} {
		e, err := ParseExpr(src)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := e.Eval(nil); err != nil || !math.IsNaN(got) {
			t.Errorf("%s = %v, %v; want NaN", src, got, err)
		}
	}
}

func TestParseExprBitExact(t *testing.T) {
	// Plain float64 arithmetic in source order: the same bits everywhere.
	e, err := ParseExpr("a / b * b - a")
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.Eval(map[string]float64{"a": 1, "b": 49})
	if err != nil {
		t.Fatal(err)
	}
	a, b := 1.0, 49.0
	if want := a/b*b - a; math.Float64bits(got) != math.Float64bits(want) {
		t.Errorf("Eval = %x, want %x", math.Float64bits(got), math.Float64bits(want))
	}
}

func TestExprNames(t *testing.T) {
	tests := []struct {
		src  string
		want []string
	}{
		{"1 + 2", []string{}},
		{"a", []string{"a"}},
		{"b + a * b - a", []string{"a", "b"}},
		{"sqrt(x) + log(y.z) ^ -w", []string{"w", "x", "y.z"}},
		{"sqrt + abs(abs)", []string{"abs", "sqrt"}},
		{"energy.mean / energy.count", []string{"energy.count", "energy.mean"}},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			e, err := ParseExpr(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, e.Names()); diff != "" {
				t.Errorf("Names (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseExprErrors(t *testing.T) {
	tests := []struct {
		src  string
		want string // a substring of the error
	}{
		{"", "at offset 0 of \"\": unexpected end of expression"},
		{"   ", "unexpected end of expression"},
		{"(", "unexpected end of expression"},
		{"(1 + 2", "want ')'"},
		{"((1)", "want ')'"},
		{"1 + 2)", `at offset 5 of "1 + 2)": unexpected ")"`},
		{")", `unexpected ")"`},
		{"()", `unexpected ")"`},
		{"1 2", `unexpected "2"`},
		{"a b", `unexpected "b"`},
		{"1 +", "unexpected end of expression"},
		{"* 2", `unexpected "*"`},
		{"2 * / 3", `unexpected "/"`},
		{"2 ^", "unexpected end of expression"},
		{"2 ^ ^ 3", `unexpected "^"`},
		{"sqrt(2", "want ')' after the argument of sqrt"},
		{"sqrt()", `unexpected ")"`},
		{"sqrt 2", `unexpected "2"`},
		{"sqrt(1, 2)", "want ')' after the argument of sqrt"},
		{"1..2", `bad number "1..2"`},
		{"1.2.3", `bad number "1.2.3"`},
		{"1e", `bad number "1e"`},
		{"1e+", `bad number "1e+"`},
		{".", `bad number "."`},
		{"1e5x", `unexpected "x"`},
		{"0x10", `unexpected "x10"`},
		{"2a", `unexpected "a"`},
		{"$a", `unexpected "$"`},
		{"a = 1", `unexpected "= 1"`},
		{"a\n+ b", `unexpected "\n+ b"`},
		{"1 % 2", `unexpected "% 2"`},
		{"a[0]", `unexpected "[0]"`},
		{"\x00", "unexpected end of expression"},
		{"é", `unexpected "é"`},
		{"\xff", `unexpected "\xff"`},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			e, err := ParseExpr(tc.src)
			if err == nil {
				t.Fatalf("ParseExpr succeeded: %v", e.Names())
			}
			if !errors.Is(err, ErrExpr) {
				t.Errorf("errors.Is(%v, ErrExpr) = false", err)
			}
			if errors.Is(err, ErrManifest) {
				t.Errorf("errors.Is(%v, ErrManifest) = true", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestParseExprDeepNesting(t *testing.T) {
	// Each must fail cleanly instead of exhausting the stack.
	const n = 10_000
	tests := []struct {
		name, src, want string
	}{
		{"parentheses", strings.Repeat("(", n) + "1" + strings.Repeat(")", n), "nested too deeply"},
		{"unclosed parentheses", strings.Repeat("(", n), "nested too deeply"},
		{"unary minus", strings.Repeat("-", n) + "1", "nested too deeply"},
		{"unary signs", strings.Repeat("+-", n/2) + "1", "nested too deeply"},
		{"powers", strings.Repeat("2^", n) + "1", "nested too deeply"},
		{"functions", strings.Repeat("sqrt(", n) + "1" + strings.Repeat(")", n), "nested too deeply"},
		// Longer than MaxExprBytes: Eval's recursion over a long flat
		// chain stays bounded.
		{"long chain", strings.Repeat("1+", 1_000_000) + "1", "more than 65536"},
		{"long nesting", strings.Repeat("(", 1_000_000), "more than 65536"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseExpr(tc.src)
			if !errors.Is(err, ErrExpr) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseExpr error = %.200v, want ErrExpr with %q", err, tc.want)
			}
		})
	}
	// Within the limits nesting works.
	ok := []struct {
		src  string
		want float64
	}{
		{strings.Repeat("(", 150) + "1" + strings.Repeat(")", 150), 1},
		{strings.Repeat("-", 150) + "1", 1},
		{strings.Repeat("2^", 150) + "1", math.Inf(1)},
		{strings.Repeat("1^", 150) + "1", 1},
		{strings.Repeat("abs(", 150) + "-1" + strings.Repeat(")", 150), 1},
		// A long flat chain is fine: only nesting is bounded.
		{strings.Repeat("1+", (MaxExprBytes-1)/2) + "1", float64((MaxExprBytes-1)/2 + 1)},
	}
	for _, tc := range ok {
		e, err := ParseExpr(tc.src)
		if err != nil {
			t.Errorf("ParseExpr(%.40q...) = %v", tc.src, err)
			continue
		}
		if got, err := e.Eval(nil); err != nil || got != tc.want {
			t.Errorf("Eval(%.40q...) = %v, %v; want %v", tc.src, got, err, tc.want)
		}
	}
}

func TestExprEvalErrors(t *testing.T) {
	vars := map[string]float64{"a": 1}
	tests := []struct {
		src, missing string
	}{
		{"b", "b"},
		{"a + b", "b"},
		{"b + a", "b"},
		{"-b", "b"},
		{"sqrt(b)", "b"},
		{"2 ^ b", "b"},
		{"a * (1 + energy.mean)", "energy.mean"},
		{"sqrt", "sqrt"},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			e, err := ParseExpr(tc.src)
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.Eval(vars)
			if !errors.Is(err, ErrExpr) {
				t.Fatalf("Eval error = %v, want ErrExpr", err)
			}
			if want := `unknown name "` + tc.missing + `"`; !strings.Contains(err.Error(), want) {
				t.Errorf("Eval error %q does not contain %q", err, want)
			}
		})
	}
}

// FuzzParseExpr: ParseExpr never panics, its errors wrap ErrExpr, and what
// it accepts evaluates once every name it reports is given.
func FuzzParseExpr(f *testing.F) {
	for _, s := range []string{"1 + 2 * 3", "-2 ^ -x", "sqrt(energy.mean) / abs(y)", "(((a)))", "1e-3", "a b", "(", "1..2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		e, err := ParseExpr(src)
		if err != nil {
			if !errors.Is(err, ErrExpr) {
				t.Fatalf("error does not wrap ErrExpr: %v", err)
			}
			return
		}
		if e.String() != src {
			t.Fatalf("String() = %q, want %q", e.String(), src)
		}
		names := e.Names()
		if !slices.IsSorted(names) || len(slices.Compact(slices.Clone(names))) != len(names) {
			t.Fatalf("Names() = %q, want sorted and distinct", names)
		}
		vars := map[string]float64{}
		for _, n := range names {
			if n == "" || !isNameStart(n[0]) {
				t.Fatalf("Names() has %q", n)
			}
			vars[n] = 1.5
		}
		v1, err := e.Eval(vars)
		if err != nil {
			t.Fatalf("Eval with all names: %v", err)
		}
		v2, _ := e.Eval(vars)
		if math.Float64bits(v1) != math.Float64bits(v2) && !(math.IsNaN(v1) && math.IsNaN(v2)) {
			t.Fatalf("Eval not deterministic: %v then %v", v1, v2)
		}
		if len(names) > 0 {
			if _, err := e.Eval(nil); !errors.Is(err, ErrExpr) {
				t.Fatalf("Eval without names: %v, want ErrExpr", err)
			}
		}
	})
}
