package job

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
)

// MaxRangeValues is the most values one range axis of a grid may have.
const MaxRangeValues = 1_000_000

// A grid axis (a [split.grid] entry) is a list of values, or a range: a
// TOML table of start, stop and either step or num, and optionally
// spacing ("linear", the default, or "log"):
//
//	T     = { start = 1.5, stop = 3.5, step = 0.05 }                  # 41 values, 1.5 to 3.5
//	x     = { start = 0.0, stop = 1.0, num = 5 }                      # 0, 0.25, 0.5, 0.75, 1
//	alpha = { start = 1e-3, stop = 1e3, num = 7, spacing = "log" }    # 0.001, 0.01, ..., 1000
//	n     = { start = 0, stop = 100, step = 10 }                      # the integers 0, 10, ..., 100
//
// The values are exact, the same bits on every machine (docs/author.md,
// "Ranges"). Each number of the range stands for a decimal: an integer for
// itself, a float for the shortest decimal that reads back as the same
// float64 (strconv.FormatFloat(x, 'g', -1, 64)), which is the literal as
// written whenever it has at most 15 significant digits. Then:
//
//   - integer range (start, stop and step all integers, linear): the
//     int64 values start + i·step for i = 0, 1, ... while they do not pass
//     stop;
//   - step: n = floor((stop − start)/step) + 1 values, computed exactly, so
//     stop is included when start + k·step reaches it exactly in decimal;
//     value i is the float64 nearest the exact decimal start + i·step;
//   - num, linear: value i is the float64 nearest the exact rational
//     start + i·(stop − start)/(num − 1);
//   - num, log: value i is the float64 nearest the real number
//     start·(stop/start)^(i/(num − 1)); the first is start and the last stop
//     exactly (see logValues for how the others are computed).
//
// "Nearest" rounds ties to even. Every rounding happens once, from an
// exact value (for log ranges, from one within 2^-300 of it, with near
// ties settled exactly), so no error accumulates along a range.

// gridRange is a parsed range axis.
type gridRange struct {
	start, stop any // int64 for an integer range, else float64
	step        any // int64 or float64; nil when num is set
	num         int64
	log         bool
}

// rangeKeys are the keys a range table may have.
var rangeKeys = []string{"start", "stop", "step", "num", "spacing"}

// parseGridRange reads a range table. Errors say what is wrong, for people;
// the caller names the axis.
func parseGridRange(t map[string]any) (gridRange, error) {
	var r gridRange
	for k := range t {
		if !slices.Contains(rangeKeys, k) {
			return r, fmt.Errorf("unknown key %q: a range has start, stop, and step or num, and optionally spacing = \"log\"", k)
		}
	}
	spacing := "linear"
	if v, ok := t["spacing"]; ok {
		s, isString := v.(string)
		if !isString || s != "linear" && s != "log" {
			return r, fmt.Errorf("spacing must be \"linear\" or \"log\", got %v", v)
		}
		spacing = s
	}
	r.log = spacing == "log"
	for _, k := range []string{"start", "stop"} {
		v, ok := t[k]
		if !ok {
			return r, fmt.Errorf("missing %s: a range is { start = 0.1, stop = 1.0, step = 0.1 } or { start = 1e-3, stop = 1e3, num = 7, spacing = \"log\" }", k)
		}
		if !isRangeNumber(v) {
			return r, fmt.Errorf("%s must be a number, got %s", k, tomlKind(v))
		}
	}
	r.start, r.stop = t["start"], t["stop"]
	step, hasStep := t["step"]
	num, hasNum := t["num"]
	switch {
	case hasStep && hasNum:
		return r, errors.New("give step or num, not both")
	case !hasStep && !hasNum:
		return r, errors.New("missing step or num: step = 0.1 spaces values by 0.1, num = 10 makes 10 values from start to stop")
	case r.log && hasStep:
		return r, errors.New("a log range needs num (how many values), not step")
	case hasStep && !isRangeNumber(step):
		return r, fmt.Errorf("step must be a number, got %s", tomlKind(step))
	}
	if hasNum {
		n, ok := num.(int64)
		if !ok {
			return r, fmt.Errorf("num must be an integer, got %s", tomlKind(num))
		}
		if n < 2 || n > MaxRangeValues {
			return r, fmt.Errorf("num must be 2..%d (both ends are values), got %d", MaxRangeValues, n)
		}
		r.num = n
	} else {
		r.step = step
	}
	_, startInt := r.start.(int64)
	_, stopInt := r.stop.(int64)
	_, stepInt := r.step.(int64)
	if !(hasStep && startInt && stopInt && stepInt) {
		// A range of floats: every bound as a float64.
		for _, p := range []struct {
			name string
			v    *any
		}{{"start", &r.start}, {"stop", &r.stop}, {"step", &r.step}} {
			if i, ok := (*p.v).(int64); ok {
				if i > 1<<53 || i < -(1<<53) {
					return r, fmt.Errorf("%s = %d is an integer beyond 2^53 in a range of floats, where it has no exact float64: make start, stop and step all integers", p.name, i)
				}
				*p.v = float64(i)
			}
		}
	}
	start, stop := rangeDecimal(r.start), rangeDecimal(r.stop)
	switch {
	case r.log && (start.Sign() <= 0 || stop.Sign() <= 0):
		return r, fmt.Errorf("a log range needs start > 0 and stop > 0, got start = %v and stop = %v", r.start, r.stop)
	case hasNum && start.Cmp(stop) == 0:
		return r, fmt.Errorf("start and stop are both %v, so all %d values would be equal: write the value as a list, [%v]", r.start, r.num, r.start)
	case hasStep:
		st := rangeDecimal(r.step)
		d := new(big.Rat).Sub(stop, start)
		switch {
		case st.Sign() == 0:
			return r, errors.New("step = 0 never reaches stop: want a step that moves from start toward stop")
		case d.Sign() != 0 && d.Sign() != st.Sign():
			want := "positive"
			if d.Sign() < 0 {
				want = "negative"
			}
			return r, fmt.Errorf("step = %v moves away from stop = %v (start = %v): want a %s step", r.step, r.stop, r.start, want)
		}
		if n := r.stepCount(); n.Cmp(big.NewInt(MaxRangeValues)) > 0 {
			return r, fmt.Errorf("the range has %s values, more than %d: take a larger step", n, MaxRangeValues)
		}
	}
	return r, nil
}

// isRangeNumber reports whether v is a TOML integer or float.
func isRangeNumber(v any) bool {
	switch v.(type) {
	case int64, float64:
		return true
	}
	return false
}

// tomlKind names the kind of a TOML value, for messages.
func tomlKind(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64:
		return "an integer"
	case float64:
		return "a float"
	case []any:
		return "a list"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("a %T", v)
}

// rangeDecimal is the exact decimal a range number stands for: an integer
// itself, a float64 the shortest decimal that reads back as it.
func rangeDecimal(v any) *big.Rat {
	switch x := v.(type) {
	case int64:
		return new(big.Rat).SetInt64(x)
	case float64:
		d, ok := new(big.Rat).SetString(strconv.FormatFloat(x, 'g', -1, 64))
		if !ok {
			panic(fmt.Sprintf("job: range number %v", x)) // finite, checked by the manifest
		}
		return d
	}
	panic(fmt.Sprintf("job: range number of type %T", v))
}

// stepCount is floor((stop − start)/step) + 1 in exact arithmetic (the
// step moves toward stop, so the quotient is not negative).
func (r gridRange) stepCount() *big.Int {
	q := new(big.Rat).Sub(rangeDecimal(r.stop), rangeDecimal(r.start))
	q.Quo(q, rangeDecimal(r.step))
	n := new(big.Int).Quo(q.Num(), q.Denom()) // q >= 0: truncation is floor
	return n.Add(n, big.NewInt(1))
}

// count is how many values the range has (1..MaxRangeValues).
func (r gridRange) count() int64 {
	if r.step == nil {
		return r.num
	}
	return r.stepCount().Int64()
}

// table is the range's canonical form, for the job's encoding: start,
// stop, and step or num (integers or floats as the range is), and spacing
// only when "log". Two ranges with the same values of the same kind have
// the same table however they were written (1 or 1.0 beside a float step,
// spacing = "linear" or nothing).
func (r gridRange) table() map[string]any {
	t := map[string]any{"start": r.start, "stop": r.stop}
	if r.step != nil {
		t["step"] = r.step
	} else {
		t["num"] = r.num
	}
	if r.log {
		t["spacing"] = "log"
	}
	return t
}

// linear returns the values of a linear range of floats as (p + i·q)/r
// for i = 0, 1, ..., with p, q, r integers and r > 0: start = p/r and
// the increment (step, or (stop − start)/(num − 1)) q/r, exactly.
func (r gridRange) linear() (p, q, den *big.Int) {
	start := rangeDecimal(r.start)
	inc := new(big.Rat)
	if r.step != nil {
		inc.Set(rangeDecimal(r.step))
	} else {
		inc.Sub(rangeDecimal(r.stop), start)
		inc.Quo(inc, new(big.Rat).SetInt64(r.num-1))
	}
	den = new(big.Int).Mul(start.Denom(), inc.Denom())
	p = new(big.Int).Mul(start.Num(), inc.Denom())
	q = new(big.Int).Mul(inc.Num(), start.Denom())
	return p, q, den
}

// value returns value i (0 <= i < count) of a linear range, as the
// package comment above defines it.
func (r gridRange) value(i int64) any {
	if a, ok := r.start.(int64); ok {
		return a + i*r.step.(int64) // between start and stop: no overflow
	}
	p, q, den := r.linear()
	f, _ := new(big.Rat).SetFrac(p.Add(p, q.Mul(q, big.NewInt(i))), den).Float64()
	return f
}

// values expands the range into its values, in order.
func (r gridRange) values() []any {
	n := r.count()
	if r.log {
		return logValues(r.start.(float64), r.stop.(float64), n)
	}
	out := make([]any, n)
	if _, ok := r.start.(int64); ok {
		for i := range n {
			out[i] = r.value(i)
		}
		return out
	}
	p, q, den := r.linear()
	last := new(big.Int).Add(p, new(big.Int).Mul(q, big.NewInt(n-1)))
	const exact = 1 << 53 // integers up to 2^53 are float64s
	if den.CmpAbs(big.NewInt(exact)) <= 0 && p.CmpAbs(big.NewInt(exact)) <= 0 && last.CmpAbs(big.NewInt(exact)) <= 0 {
		// Numerator and denominator are exact float64s, and IEEE 754
		// division rounds their quotient once, to nearest, ties to even:
		// the value big.Rat.Float64 gives, faster.
		pi, qi, d := p.Int64(), q.Int64(), float64(den.Int64())
		for i := range n {
			out[i] = float64(pi+i*qi) / d
		}
		return out
	}
	num, v := new(big.Int), new(big.Rat)
	for i := range n {
		num.Mul(q, big.NewInt(i))
		f, _ := v.SetFrac(num.Add(num, p), den).Float64()
		out[i] = f
	}
	return out
}

// rangeBits is the precision, in bits, of the binary floating-point
// arithmetic (math/big) that computes a log range; 448 bits leave more than
// 300 correct after the error that the series, the squarings in bigExp and
// up to MaxRangeValues products accumulate.
const rangeBits = 448

// maxTieRoot bounds the exact comparison that settles a log value lying
// near a tie between two float64s (see roundLog).
const maxTieRoot = 1024

// logValues returns the n values of the log range from start to stop
// (both > 0, n >= 2): value i is the float64 nearest v_i = s·(e/s)^(i/(n−1)),
// s and e the decimals of start and stop (rangeDecimal). Ties go to even,
// the first value is start and the last stop exactly.
//
// v_i is approximated as s·q^i with q = exp(ln(e/s)/(n−1)), computed by
// series in math/big at rangeBits bits, and s·q^i by successive products
// at the same precision: within 2^-300 (relative) of v_i. math/big's
// arithmetic is exact integer code at a fixed precision and rounding mode,
// so this is the same on every platform, unlike math.Pow, whose Exp and
// Log are assembly on some architectures (amd64, arm64, s390x) and whose
// pure Go code the compiler may fuse into FMAs on others. Rounding the
// approximation gives the float64 nearest v_i unless v_i lies within
// 2^-300 of a tie, as 10^23 does (it is exactly halfway between two
// float64s): an approximation within 2^-290 of a tie goes to roundLog,
// which settles it exactly.
func logValues(start, stop float64, n int64) []any {
	s, e := rangeDecimal(start), rangeDecimal(stop)
	a := new(big.Float).SetPrec(rangeBits).SetRat(s)
	lnq := bigLn(new(big.Float).SetPrec(rangeBits).SetRat(new(big.Rat).Quo(e, s)))
	lnq.Quo(lnq, new(big.Float).SetPrec(rangeBits).SetInt64(n-1))
	q := bigExp(lnq)
	out := make([]any, n)
	out[0], out[n-1] = start, stop
	d, fb := new(big.Float).SetPrec(rangeBits), new(big.Float).SetPrec(rangeBits)
	v := a
	for i := int64(1); i < n-1; i++ {
		v.Mul(v, q)
		f, acc := v.Float64()
		out[i] = f
		if roundsNearTie(v, f, acc, d, fb) {
			out[i] = roundLog(v, s, e, i, n)
		}
	}
	return out
}

// roundsNearTie reports whether v, rounded to f with accuracy acc, lies
// within 2^-290 (relative) of the midpoint between f and the float64 on
// v's other side of f. d and fb are scratch at v's precision.
func roundsNearTie(v *big.Float, f float64, acc big.Accuracy, d, fb *big.Float) bool {
	if acc == big.Exact {
		return false
	}
	other := math.Nextafter(f, math.Inf(1))
	if acc == big.Above {
		other = math.Nextafter(f, math.Inf(-1))
	}
	d.Sub(v, fb.SetFloat64(f))
	d.Abs(d)
	fb.SetFloat64(math.Abs(other - f)) // a power of two, exactly
	d.Sub(d, fb.SetMantExp(fb, -1))    // |v − f| − half the gap
	return d.Sign() == 0 || d.MantExp(nil) < v.MantExp(nil)-290
}

// roundLog returns the float64 nearest v = s·(e/s)^(i/(n−1)), ties to
// even, given approx within 2^-300 of v (relative). When approx is farther
// than that from the midpoint between the two float64s around it, v is on
// the same side and rounding approx is right. Otherwise it compares v with
// the midpoint m exactly: with i/(n−1) = a/b in lowest terms, v > m
// exactly when s^(b−a)·e^a > m^b, rationals of a few million bits at most
// for b <= maxTieRoot. For b above that it rounds approx, which may then
// be one unit in the last place off; no such case is known.
func roundLog(approx *big.Float, s, e *big.Rat, i, n int64) float64 {
	f, acc := approx.Float64()
	if acc == big.Exact {
		return f
	}
	dir := math.Inf(1) // the float64 on approx's other side
	if acc == big.Above {
		dir = math.Inf(-1)
	}
	other := math.Nextafter(f, dir)
	m := new(big.Float).SetPrec(rangeBits).SetFloat64(f)
	m.Add(m, new(big.Float).SetFloat64(other))
	m.SetMantExp(m, -1) // halved, exactly
	if !nearTie(approx, m) {
		return f
	}
	g := new(big.Int).GCD(nil, nil, big.NewInt(i), big.NewInt(n-1)).Int64()
	num, den := i/g, (n-1)/g
	if den > maxTieRoot {
		return f
	}
	mr, _ := m.Rat(nil)
	lhs := ratPow(mr, den)
	rhs := new(big.Rat).Mul(ratPow(s, den-num), ratPow(e, num))
	lo, hi := min(f, other), max(f, other)
	switch rhs.Cmp(lhs) {
	case 1: // v > m
		return hi
	case -1:
		return lo
	}
	if math.Float64bits(lo)&1 == 0 { // a tie: the even one
		return lo
	}
	return hi
}

// nearTie reports whether x lies within 2^-300 of m (relative).
func nearTie(x, m *big.Float) bool {
	gap := new(big.Float).SetPrec(x.Prec()).Sub(x, m)
	return gap.Sign() == 0 || gap.MantExp(nil) < m.MantExp(nil)-300
}

// ratPow returns x^k for k >= 0.
func ratPow(x *big.Rat, k int64) *big.Rat {
	kk := big.NewInt(k)
	num := new(big.Int).Exp(x.Num(), kk, nil)
	den := new(big.Int).Exp(x.Denom(), kk, nil)
	return new(big.Rat).SetFrac(num, den)
}

// bigLn returns the natural logarithm of x > 0 at x's precision: with x =
// m·2^e, 0.5 <= m < 1, ln x = 2·atanh((m−1)/(m+1)) + e·ln 2.
func bigLn(x *big.Float) *big.Float {
	prec := x.Prec()
	m := new(big.Float).SetPrec(prec)
	e := x.MantExp(m)
	num := new(big.Float).SetPrec(prec).Sub(m, big.NewFloat(1))
	den := new(big.Float).SetPrec(prec).Add(m, big.NewFloat(1))
	ln := bigAtanh2(num.Quo(num, den))
	ln2 := bigAtanh2(new(big.Float).SetPrec(prec).Quo(big.NewFloat(1), new(big.Float).SetPrec(prec).SetInt64(3)))
	return ln.Add(ln, ln2.Mul(ln2, new(big.Float).SetPrec(prec).SetInt64(int64(e))))
}

// bigAtanh2 returns 2·atanh(z) = 2·(z + z³/3 + z⁵/5 + ...) for |z| <= 1/3
// at z's precision; the terms fall by at least 9 times each.
func bigAtanh2(z *big.Float) *big.Float {
	prec := z.Prec()
	sum := new(big.Float).SetPrec(prec).Set(z)
	if z.Sign() == 0 {
		return sum
	}
	z2 := new(big.Float).SetPrec(prec).Mul(z, z)
	pow := new(big.Float).SetPrec(prec).Set(z)
	term := new(big.Float).SetPrec(prec)
	for k := int64(3); ; k += 2 {
		pow.Mul(pow, z2)
		term.Quo(pow, new(big.Float).SetPrec(prec).SetInt64(k))
		if term.Sign() == 0 || term.MantExp(nil) < sum.MantExp(nil)-int(prec)-8 {
			break
		}
		sum.Add(sum, term)
	}
	return sum.Mul(sum, big.NewFloat(2))
}

// bigExp returns e^y at y's precision, for |y| < 2^20: y = k·ln 2 + r
// with |r| <= ln 2 / 2, e^r from its Taylor series at r/2^16 squared 16
// times, then scaled by 2^k. The series and squarings run 32 bits wider,
// so that the squarings' error stays below y's precision.
func bigExp(y *big.Float) *big.Float {
	prec := y.Prec()
	wide := prec + 32
	ln2 := bigLn(new(big.Float).SetPrec(wide).SetInt64(2))
	kf := new(big.Float).SetPrec(wide).Quo(y, ln2)
	k, _ := kf.Float64()
	ki := int64(math.Round(k))
	r := new(big.Float).SetPrec(wide).Mul(ln2, new(big.Float).SetPrec(wide).SetInt64(ki))
	r.Sub(new(big.Float).SetPrec(wide).Set(y), r)
	const halvings = 16
	r.SetMantExp(r, -halvings)
	sum := new(big.Float).SetPrec(wide).SetInt64(1)
	term := new(big.Float).SetPrec(wide).SetInt64(1)
	for n := int64(1); ; n++ {
		term.Mul(term, r)
		term.Quo(term, new(big.Float).SetPrec(wide).SetInt64(n))
		if term.Sign() == 0 || term.MantExp(nil) < -int(wide)-8 {
			break
		}
		sum.Add(sum, term)
	}
	for range halvings {
		sum.Mul(sum, sum)
	}
	sum.SetMantExp(sum, int(ki))
	return new(big.Float).SetPrec(prec).Set(sum)
}

// gridAxisValues returns the values of a grid axis as the manifest holds
// it after checking: a list, or a range table.
func gridAxisValues(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case map[string]any:
		r, err := parseGridRange(x)
		if err != nil {
			return nil, err
		}
		return r.values(), nil
	}
	return nil, fmt.Errorf("want a list of values or a range, got %s", tomlKind(v))
}

// checkGridAxis checks one [split.grid] axis, replaces a range by its
// canonical table, and returns how many values the axis has.
func (s *SplitSpec) checkGridAxis(name string) (int64, error) {
	switch x := s.Grid[name].(type) {
	case []any:
		if len(x) == 0 {
			return 0, errors.New("want a non-empty list of values")
		}
		for _, v := range x {
			if err := checkValue(v); err != nil {
				return 0, err
			}
		}
		return int64(len(x)), nil
	case map[string]any:
		r, err := parseGridRange(x)
		if err != nil {
			return 0, err
		}
		s.Grid[name] = r.table()
		return r.count(), nil
	}
	return 0, fmt.Errorf("want a list of values, e.g. %s = [1.5, 2.0], or a range, e.g. %s = { start = 1.5, stop = 3.5, step = 0.05 }; got %s",
		name, name, tomlKind(s.Grid[name]))
}

// gridAxisBounds returns the least and greatest number of a grid axis, and
// whether every value is a number.
func gridAxisBounds(v any) (lo, hi float64, numeric bool) {
	num := func(x any) (float64, bool) {
		switch n := x.(type) {
		case int64:
			return float64(n), true
		case float64:
			return n, true
		}
		return 0, false
	}
	switch x := v.(type) {
	case []any:
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, e := range x {
			f, ok := num(e)
			if !ok {
				return 0, 0, false
			}
			lo, hi = min(lo, f), max(hi, f)
		}
		return lo, hi, len(x) > 0
	case map[string]any:
		r, err := parseGridRange(x)
		if err != nil {
			return 0, 0, false
		}
		// Ranges are monotonic: the ends bound them.
		first, _ := num(r.start)
		last, _ := num(r.stop)
		if !r.log {
			last, _ = num(r.value(r.count() - 1))
		}
		return min(first, last), max(first, last), true
	}
	return 0, 0, false
}
