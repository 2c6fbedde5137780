package job

import (
	"math"
	"strconv"
)

// histAcc is the histogram rule: counts of values in equal-width bins over
// [min, max), plus the values below min (underflow) and at or above max
// (overflow). Value x < max falls in bin floor((x−min)/(max−min)·bins),
// computed in float64 (clamped to the last bin): the same bin for the same
// value on every machine, so counts are order-independent integers.
type histAcc struct {
	lo, hi         float64
	counts         []int64
	under, over, n int64
}

func newHistAcc(s MergeSpec) *histAcc {
	return &histAcc{lo: *s.Min, hi: *s.Max, counts: make([]int64, s.Bins)}
}

func (a *histAcc) check(*accInput, int64) *ResultError { return nil }

// bin returns the bin of x, -1 for underflow, len(counts) for overflow.
func (a *histAcc) bin(x float64) int {
	switch {
	case x < a.lo:
		return -1
	case x >= a.hi:
		return len(a.counts)
	}
	// 0 <= x−lo <= hi−lo, which Validate keeps finite; the explicit
	// conversions forbid fused multiply-adds, which would change bits.
	t := float64(float64(x-a.lo)/float64(a.hi-a.lo)) * float64(len(a.counts))
	return min(int(t), len(a.counts)-1)
}

func (a *histAcc) add(in *accInput, _ int64) {
	for _, x := range in.floats {
		a.n++
		switch i := a.bin(x); {
		case i < 0:
			a.under++
		case i >= len(a.counts):
			a.over++
		default:
			a.counts[i]++
		}
	}
}

func (a *histAcc) mergeCheck(accumulator) error { return nil }

func (a *histAcc) merge(o accumulator) {
	b := o.(*histAcc)
	for i, c := range b.counts {
		a.counts[i] += c
	}
	a.under += b.under
	a.over += b.over
	a.n += b.n
}

func (a *histAcc) result() any {
	return ResultObject{
		{"count", a.n},
		{"min", a.lo},
		{"max", a.hi},
		{"counts", a.counts},
		{"underflow", a.under},
		{"overflow", a.over},
	}
}

func (a *histAcc) scalars(prefix string, out map[string]float64) {
	out[prefix+".count"] = float64(a.n)
	out[prefix+".underflow"] = float64(a.under)
	out[prefix+".overflow"] = float64(a.over)
	for i, c := range a.counts {
		out[prefix+".counts."+strconv.Itoa(i)] = float64(c)
	}
}

func (a *histAcc) appendState(b []byte) []byte {
	b = appendStateCount(b, a.n)
	b = appendStateCount(b, a.under)
	b = appendStateCount(b, a.over)
	for _, c := range a.counts {
		b = appendStateCount(b, c)
	}
	return b
}

func (a *histAcc) decodeState(r *stateReader) {
	a.n = r.count()
	a.under = r.count()
	a.over = r.count()
	total := uint64(a.under) + uint64(a.over)
	for i := range a.counts {
		a.counts[i] = r.count()
		total += uint64(a.counts[i])
		if total > math.MaxInt64 {
			r.fail("histogram counts overflow")
		}
	}
	if r.err == nil && total != uint64(a.n) {
		r.fail("histogram counts do not add up")
	}
}
