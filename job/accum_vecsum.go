package job

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"math/bits"
	"strconv"
)

// vecSumAcc is the vector-sum rule, the exact merge of a training round:
// every result holds an array of integers of one length (a shard's
// gradient in fixed point, see examples/internal/exact), and the result is
// their element-wise sum, exactly. Integer addition is associative, so the
// sum is the same bits for any number of shards, any arrival order and any
// grouping of partial merges, which is what lets a round verify by digest
// (invariant 21 of DESIGN.md).
//
// Each element is a signed 128-bit two's-complement integer (hi, lo):
// every addend fits int64, so 2^63 additions cannot overflow it. Memory:
// 16 bytes per element; cost: one 128-bit add with carry per element of
// every result.
type vecSumAcc struct {
	count int64
	hi    []int64 // nil until the first vector
	lo    []uint64
}

func (a *vecSumAcc) check(in *accInput, _ int64) *ResultError {
	n := len(in.ints) + len(in.bigs) + len(in.floats)
	switch {
	case len(in.floats) > 0:
		return resultFieldError(in.at, "want integers (fixed point), got a number with a fraction or exponent")
	case len(in.bigs) > 0:
		return resultFieldError(in.at, "want integers that fit 64 bits, got a larger one")
	case n == 0:
		return resultFieldError(in.at, "want a non-empty array of integers")
	case n > MaxVectorLen:
		return resultFieldError(in.at, "array of %d integers is longer than %d", n, MaxVectorLen)
	case a.hi != nil && n != len(a.hi):
		return resultFieldError(in.at, "want %d integers, as in earlier results, got %d", len(a.hi), n)
	}
	return nil
}

func (a *vecSumAcc) add(in *accInput, _ int64) {
	if a.hi == nil {
		a.hi = make([]int64, len(in.ints))
		a.lo = make([]uint64, len(in.ints))
	}
	for i, v := range in.ints {
		a.add128(i, v>>63, uint64(v))
	}
	a.count++
}

// add128 adds the 128-bit integer (hi, lo) to element i.
func (a *vecSumAcc) add128(i int, hi int64, lo uint64) {
	var c uint64
	a.lo[i], c = bits.Add64(a.lo[i], lo, 0)
	a.hi[i] += hi + int64(c)
}

func (a *vecSumAcc) mergeCheck(o accumulator) error {
	b := o.(*vecSumAcc)
	if a.hi != nil && b.hi != nil && len(a.hi) != len(b.hi) {
		return fmt.Errorf("vector-sum of %d integers and of %d: %w", len(a.hi), len(b.hi), ErrMergeMismatch)
	}
	return nil
}

func (a *vecSumAcc) merge(o accumulator) {
	b := o.(*vecSumAcc)
	if b.hi == nil {
		return
	}
	if a.hi == nil {
		a.hi = make([]int64, len(b.hi))
		a.lo = make([]uint64, len(b.hi))
	}
	for i := range a.hi {
		a.add128(i, b.hi[i], b.lo[i])
	}
	a.count += b.count
}

// big returns element i as a big.Int.
func (a *vecSumAcc) big(i int) *big.Int {
	v := new(big.Int).SetInt64(a.hi[i])
	v.Lsh(v, 64)
	return v.Or(v, new(big.Int).SetUint64(a.lo[i])) // the low word is non-negative
}

// text returns element i in decimal, exactly.
func (a *vecSumAcc) text(i int) string {
	if small := int64(a.lo[i]); a.hi[i] == small>>63 { // fits int64
		return strconv.FormatInt(small, 10)
	}
	return a.big(i).String()
}

func (a *vecSumAcc) result() any {
	if a.count == 0 {
		return ResultObject{{"count", a.count}, {"sum", nil}}
	}
	sum := make([]any, len(a.hi))
	for i := range a.hi {
		sum[i] = json.Number(a.text(i))
	}
	return ResultObject{{"count", a.count}, {"sum", sum}}
}

func (a *vecSumAcc) scalars(prefix string, out map[string]float64) {
	out[prefix+".count"] = float64(a.count)
	for i := range a.hi {
		f, _ := new(big.Float).SetInt(a.big(i)).Float64() // nearest, ties to even
		out[prefix+".sum."+strconv.Itoa(i)] = f
	}
}

func (a *vecSumAcc) appendState(b []byte) []byte {
	b = appendStateCount(b, a.count)
	b = appendStateCount(b, int64(len(a.hi)))
	for i := range a.hi {
		b = binary.AppendVarint(b, a.hi[i])
		b = binary.AppendUvarint(b, a.lo[i])
	}
	return b
}

func (a *vecSumAcc) decodeState(r *stateReader) {
	a.count = r.count()
	n := r.vectorLen(a.count, "integers")
	if n == 0 {
		return
	}
	a.hi = make([]int64, n)
	a.lo = make([]uint64, n)
	for i := range a.hi {
		a.hi[i] = r.varint()
		a.lo[i] = r.uvarint()
		// |sum| < count·2^63, so |hi| <= count: a larger word is
		// corrupt and could overflow a later merge.
		if r.err == nil && (a.hi[i] > a.count || a.hi[i] < -a.count) {
			r.fail("vector sum beyond what %d additions reach", a.count)
		}
	}
}
