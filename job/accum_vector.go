package job

import (
	"fmt"
	"math/big"
	"strconv"
)

// vecAcc is the vector-mean rule, one round of data-parallel training:
// every result holds an array of numbers of one length (a model update),
// and the result is their element-wise mean. Each element is summed
// exactly by its own superaccumulator (Neal 2015) and divided by the count
// with a single correct rounding, so the mean is the same bits whatever
// the order or grouping of the updates. Memory: 552 bytes per element.
type vecAcc struct {
	count int64
	sums  []superacc // nil until the first vector
}

func (a *vecAcc) check(in *accInput, _ int64) *ResultError {
	n := len(in.floats)
	switch {
	case n == 0:
		return resultFieldError(in.at, "want a non-empty array of numbers")
	case n > MaxVectorLen:
		return resultFieldError(in.at, "array of %d numbers is longer than %d", n, MaxVectorLen)
	case a.sums != nil && n != len(a.sums):
		return resultFieldError(in.at, "want %d numbers, as in earlier results, got %d", len(a.sums), n)
	}
	return nil
}

func (a *vecAcc) add(in *accInput, _ int64) {
	if a.sums == nil {
		a.sums = make([]superacc, len(in.floats))
	}
	for i, f := range in.floats {
		a.sums[i].add(f)
	}
	a.count++
}

func (a *vecAcc) mergeCheck(o accumulator) error {
	b := o.(*vecAcc)
	if a.sums != nil && b.sums != nil && len(a.sums) != len(b.sums) {
		return fmt.Errorf("vector-mean of %d numbers and of %d: %w", len(a.sums), len(b.sums), ErrMergeMismatch)
	}
	return nil
}

func (a *vecAcc) merge(o accumulator) {
	b := o.(*vecAcc)
	if b.sums == nil {
		return
	}
	if a.sums == nil {
		a.sums = make([]superacc, len(b.sums))
	}
	for i := range a.sums {
		a.sums[i].merge(&b.sums[i])
	}
	a.count += b.count
}

// mean returns element i of the mean.
func (a *vecAcc) mean(i int, n *big.Int) float64 {
	m, e := a.sums[i].exact()
	return roundQuo(m, e, n, false)
}

func (a *vecAcc) result() any {
	if a.count == 0 {
		return ResultObject{{"count", a.count}, {"mean", nil}}
	}
	n := big.NewInt(a.count)
	mean := make([]any, len(a.sums))
	for i := range a.sums {
		mean[i] = resultFloat(a.mean(i, n))
	}
	return ResultObject{{"count", a.count}, {"mean", mean}}
}

func (a *vecAcc) scalars(prefix string, out map[string]float64) {
	out[prefix+".count"] = float64(a.count)
	if a.count == 0 {
		return
	}
	n := big.NewInt(a.count)
	for i := range a.sums {
		out[prefix+".mean."+strconv.Itoa(i)] = a.mean(i, n)
	}
}

func (a *vecAcc) appendState(b []byte) []byte {
	b = appendStateCount(b, a.count)
	b = appendStateCount(b, int64(len(a.sums)))
	for i := range a.sums {
		b = a.sums[i].appendState(b)
	}
	return b
}

// vectorLen reads the length of a vector state of count results, whose
// elements are what ("numbers"); 0 for an empty one or an error (r.err
// says which: a length over MaxVectorLen or the bytes left, or one that
// does not match the count).
func (r *stateReader) vectorLen(count int64, what string) uint64 {
	n := r.uvarint()
	switch {
	case r.err != nil:
		return 0
	case n > MaxVectorLen || n > uint64(len(r.b))/2:
		r.fail("vector of %d %s", n, what)
		return 0
	case (n == 0) != (count == 0):
		r.fail("vector length does not match its count")
		return 0
	}
	return n
}

func (a *vecAcc) decodeState(r *stateReader) {
	a.count = r.count()
	n := r.vectorLen(a.count, "numbers")
	if n == 0 {
		return
	}
	a.sums = make([]superacc, n)
	for i := range a.sums {
		a.sums[i].decodeState(r)
		if r.err == nil && !a.sums[i].finite() {
			r.fail("non-finite vector sum")
		}
	}
}
