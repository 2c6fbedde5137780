package job

import (
	"encoding/json"
	"math/big"
)

// sumAcc is the sum rule: the exact sum of every number (or every element
// of an array of numbers) and their count.
//
// Integers (JSON numbers written without '.', 'e' or 'E') are summed exactly
// as integers, in an int64 that spills into a big.Int. Other numbers are
// first converted to the nearest float64 (as any JSON decoder does), then
// summed exactly by a superaccumulator (Neal 2015). If every value was an
// integer the result is that exact integer; otherwise it is the exact sum
// of both parts rounded once to the nearest float64, ties to even. Neither
// depends on the order of the values.
type sumAcc struct {
	count     int64
	small     int64
	large     *big.Int // integers beyond what small could hold; nil until needed
	floats    superacc
	floatSeen bool // some value was not an integer
}

func (a *sumAcc) check(*accInput, int64) *ResultError { return nil }

func (a *sumAcc) add(in *accInput, _ int64) {
	a.count += in.count()
	for _, i := range in.ints {
		s := a.small + i
		if (i > 0 && s < a.small) || (i < 0 && s > a.small) { // overflow
			a.spill(a.small)
			s = i
		}
		a.small = s
	}
	for _, b := range in.bigs {
		a.spill(0)
		a.large.Add(a.large, b)
	}
	for _, f := range in.floats {
		a.floats.add(f)
	}
	if len(in.floats) > 0 {
		a.floatSeen = true
	}
}

// spill moves v into the big integer part.
func (a *sumAcc) spill(v int64) {
	if a.large == nil {
		a.large = new(big.Int)
	}
	a.large.Add(a.large, big.NewInt(v))
}

// ints returns the exact sum of the integers.
func (a *sumAcc) ints() *big.Int {
	t := big.NewInt(a.small)
	if a.large != nil {
		t.Add(t, a.large)
	}
	return t
}

func (a *sumAcc) mergeCheck(accumulator) error { return nil }

func (a *sumAcc) merge(o accumulator) {
	b := o.(*sumAcc)
	a.count += b.count
	if a.large == nil {
		a.large = new(big.Int)
	}
	a.large.Add(a.large, b.ints())
	a.floats.merge(&b.floats)
	a.floatSeen = a.floatSeen || b.floatSeen
}

// value returns the sum for Result and as a float64.
func (a *sumAcc) value() (any, float64) {
	ints := a.ints()
	if !a.floatSeen {
		return json.Number(ints.String()), roundExact(ints, 0)
	}
	if !a.floats.finite() {
		f := a.floats.nonFinite()
		return resultFloat(f), f
	}
	m, e := a.floats.exact()
	// ints + m·2^e exactly, at the smaller of the two exponents.
	ne := min(0, e)
	t := ints.Lsh(ints, uint(-ne))
	t.Add(t, m.Lsh(m, uint(e-ne)))
	f := roundExact(t, ne)
	return resultFloat(f), f
}

func (a *sumAcc) result() any {
	v, _ := a.value()
	return ResultObject{{"count", a.count}, {"sum", v}}
}

func (a *sumAcc) scalars(prefix string, out map[string]float64) {
	_, f := a.value()
	out[prefix] = f
	out[prefix+".sum"] = f
	out[prefix+".count"] = float64(a.count)
}

func (a *sumAcc) appendState(b []byte) []byte {
	b = appendStateCount(b, a.count)
	b = appendStateBigInt(b, a.ints())
	b = appendStateBool(b, a.floatSeen)
	return a.floats.appendState(b)
}

func (a *sumAcc) decodeState(r *stateReader) {
	a.count = r.count()
	t := r.bigInt()
	if t.IsInt64() {
		a.small = t.Int64()
	} else {
		a.large = t
	}
	a.floatSeen = r.bool()
	a.floats.decodeState(r)
	if r.err == nil && !a.floatSeen && (a.floats != superacc{}) {
		r.fail("float sum without floats")
	}
}
