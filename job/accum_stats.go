package job

import (
	"math"
	"math/big"
)

// statsAcc is the stats rule: count, mean, population and sample variance
// and standard deviation, minimum and maximum of every number (or element
// of an array of numbers), each converted to the nearest float64.
//
// It keeps the count, the exact sum (superacc) and the exact sum of
// squares (sqacc: x·x as a 106-bit product, which an FMA split cannot hold
// exactly below 2^-511 or above 2^511). The moments are computed from those
// exact sums in integer arithmetic (math/big) and rounded once each:
//
//	mean     = S/n
//	variance = (n·Q − S²)/n²          sample_variance = (n·Q − S²)/(n(n−1))
//	stddev   = sqrt(variance)         sample_stddev   = sqrt(sample_variance)
//
// each correctly rounded to the nearest float64, so the bytes are the same
// in any order, and free of the cancellation that ruins the textbook
// formula in floating point. Memory: about 1.6 KiB whatever the count.
type statsAcc struct {
	count    int64
	sum      superacc
	sq       sqacc
	min, max float64
}

func (a *statsAcc) check(*accInput, int64) *ResultError { return nil }

func (a *statsAcc) add(in *accInput, _ int64) {
	for _, f := range in.floats {
		if a.count == 0 {
			a.min, a.max = f, f
		}
		a.min = min(a.min, f) // min and max order -0 before +0, so
		a.max = max(a.max, f) // the result is order-independent
		a.count++
		a.sum.add(f)
		a.sq.addSquare(f)
	}
}

func (a *statsAcc) mergeCheck(accumulator) error { return nil }

func (a *statsAcc) merge(o accumulator) {
	b := o.(*statsAcc)
	if b.count == 0 {
		return
	}
	if a.count == 0 {
		a.min, a.max = b.min, b.max
	}
	a.min = min(a.min, b.min)
	a.max = max(a.max, b.max)
	a.count += b.count
	a.sum.merge(&b.sum)
	a.sq.merge(&b.sq)
}

// statsMoments are the values derived from the exact sums.
type statsMoments struct {
	sum, mean, variance, stddev  float64 // defined when n >= 1 (sum always)
	sampleVariance, sampleStddev float64 // defined when n >= 2
}

func (a *statsAcc) moments() statsMoments {
	var r statsMoments
	n := a.count
	if n == 0 {
		return r
	}
	sm, se := a.sum.exact()
	qm, qe := a.sq.exact()
	nb := big.NewInt(n)
	r.sum = roundExact(sm, se)
	r.mean = roundQuo(sm, se, nb, false)

	// N·2^ne = n·Q − S², exactly; both exponents are even.
	ne := min(qe, 2*se)
	num := new(big.Int).Mul(nb, qm)
	num.Lsh(num, uint(qe-ne))
	s2 := new(big.Int).Mul(sm, sm)
	s2.Lsh(s2, uint(2*se-ne))
	num.Sub(num, s2)
	if num.Sign() < 0 { // impossible for a state built by add and merge
		num.SetInt64(0)
	}
	dev := func(den *big.Int) (variance, stddev float64) {
		return roundQuo(num, ne, den, false), roundSqrtQuo(new(big.Int).Mul(num, den), ne, den)
	}
	r.variance, r.stddev = dev(new(big.Int).Mul(nb, nb))
	if n >= 2 {
		r.sampleVariance, r.sampleStddev = dev(new(big.Int).Mul(nb, big.NewInt(n-1)))
	}
	return r
}

func (a *statsAcc) result() any {
	mo := a.moments()
	opt := func(f float64, ok bool) any {
		if !ok {
			return nil
		}
		return resultFloat(f)
	}
	one, two := a.count >= 1, a.count >= 2
	return ResultObject{
		{"count", a.count},
		{"sum", resultFloat(mo.sum)},
		{"mean", opt(mo.mean, one)},
		{"variance", opt(mo.variance, one)},
		{"sample_variance", opt(mo.sampleVariance, two)},
		{"stddev", opt(mo.stddev, one)},
		{"sample_stddev", opt(mo.sampleStddev, two)},
		{"min", opt(a.min, one)},
		{"max", opt(a.max, one)},
	}
}

func (a *statsAcc) scalars(prefix string, out map[string]float64) {
	mo := a.moments()
	out[prefix+".count"] = float64(a.count)
	out[prefix+".sum"] = mo.sum
	if a.count >= 1 {
		out[prefix+".mean"] = mo.mean
		out[prefix+".variance"] = mo.variance
		out[prefix+".stddev"] = mo.stddev
		out[prefix+".min"] = a.min
		out[prefix+".max"] = a.max
	}
	if a.count >= 2 {
		out[prefix+".sample_variance"] = mo.sampleVariance
		out[prefix+".sample_stddev"] = mo.sampleStddev
	}
}

func (a *statsAcc) appendState(b []byte) []byte {
	b = appendStateCount(b, a.count)
	b = appendStateFloat(b, a.min)
	b = appendStateFloat(b, a.max)
	b = a.sum.appendState(b)
	return appendLimbs(b, a.sq.limb[:])
}

func (a *statsAcc) decodeState(r *stateReader) {
	a.count = r.count()
	a.min = r.float()
	a.max = r.float()
	a.sum.decodeState(r)
	r.limbs(a.sq.limb[:])
	switch {
	case r.err != nil:
	case !a.sum.finite():
		r.fail("stats with a non-finite sum")
	case a.count == 0 && (math.Float64bits(a.min) != 0 || math.Float64bits(a.max) != 0 || a.sum != superacc{} || a.sq != sqacc{}):
		r.fail("empty stats with values")
	case a.min > a.max:
		r.fail("stats with min > max")
	}
}
