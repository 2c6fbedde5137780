// Package exact is the job-program side of an exact training round: it
// turns a shard's contribution into fixed-point integers that the
// vector-sum merge rule adds exactly, and it gives the few transcendental
// functions a model needs as one fixed polynomial, so that every honest
// device computes the same bits.
//
// # Why fixed point
//
// A round's update is a sum over the examples of the batch. Summed in
// floating point inside each task, the partial sums are rounded, and a
// different cut into shards rounds differently: 1, 3 and 8 shards give
// three different updates. Instead each example's contribution is rounded
// once, on its own, to an integer multiple of 2^-bits ([Quantize]); the
// rounding of one example does not depend on which shard holds it, and
// integers add exactly in any order or grouping. A task sums its shard's
// integers in int64 ([Vec]), which reports overflow instead of wrapping,
// and returns them; the merge adds the shards' vectors exactly in 128-bit
// accumulators (rule "vector-sum" in docs/author.md).
//
// # Fixed operation order
//
// Every floating-point expression here is written so that no compiler may
// fuse a multiply and an add: each product is converted explicitly,
// float64(x*y), which the Go specification says rounds it ("An explicit
// floating-point type conversion rounds to the precision of the target
// type, preventing fusion"). Go for WebAssembly never fuses (WebAssembly
// has no fused multiply-add in its core instruction set), nor does Go for
// amd64; Go for arm64, ppc64 and s390x would fuse without the conversions.
// [Exp] and [Log] use only +, -, *, / and exact scaling by powers of two,
// all correctly rounded by IEEE 754, so they give the same bits on every
// host, unlike math.Exp and math.Log, which have assembly versions on some
// architectures.
//
// The package uses only the standard library so that it compiles with
// GOOS=wasip1 GOARCH=wasm.
package exact

import (
	"errors"
	"fmt"
	"math"
)

// ErrRange is returned (wrapped) when a value is not finite or is too large
// for the fixed-point integer it must become.
var ErrRange = errors.New("exact: value out of range")

// Quantize returns x·2^bits rounded to the nearest integer, ties to even.
// bits is at most 62. It returns an error wrapping ErrRange when x is NaN
// or infinite, or when the result does not fit in an int64.
func Quantize(x float64, bits uint) (int64, error) {
	if bits > 62 {
		return 0, fmt.Errorf("exact: %d fraction bits, at most 62", bits)
	}
	y := math.RoundToEven(x * float64(uint64(1)<<bits)) // scaling by 2^bits is exact
	if !(y > -(1<<63) && y < 1<<63) {                   // also rejects NaN
		return 0, fmt.Errorf("%w: %g does not fit 64 bits at 2^-%d", ErrRange, x, bits)
	}
	return int64(y), nil
}

// Vec is a vector of int64 sums that reports overflow. The zero value is
// useless; make one with NewVec.
type Vec struct {
	S   []int64
	err error
}

// NewVec returns a zero vector of n sums.
func NewVec(n int) *Vec { return &Vec{S: make([]int64, n)} }

// Add adds v to element i; an overflow is remembered and returned by Err,
// and the element keeps its old value.
func (a *Vec) Add(i int, v int64) {
	s := a.S[i] + v
	if (v > 0 && s < a.S[i]) || (v < 0 && s > a.S[i]) {
		if a.err == nil {
			a.err = fmt.Errorf("%w: sum %d overflows 64 bits", ErrRange, i)
		}
		return
	}
	a.S[i] = s
}

// Err returns the first overflow, or nil.
func (a *Vec) Err() error { return a.err }

// Constants of the argument reduction (Cody and Waite): ln2Hi has its low
// 32 bits zero, so k·ln2Hi is exact for |k| < 2^20.
const (
	ln2Hi  = 6.93147180369123816490e-01 // 0x3fe62e42fee00000
	ln2Lo  = 1.90821492927058770002e-10 // 0x3dea39ef35793c76
	invLn2 = 1.44269504088896338700e+00
)

// Exp returns e^x, with a relative error below 2^-50. It reduces x = k·ln2
// + r, |r| <= ln2/2, evaluates the Taylor polynomial of degree 13 of e^r by
// Horner's rule, and scales by 2^k. Below -708 it returns 0; above 709.78,
// +Inf; NaN gives NaN.
func Exp(x float64) float64 {
	switch {
	case x != x:
		return x
	case x > 709.78:
		return math.Inf(1)
	case x < -708:
		return 0
	}
	k := math.RoundToEven(float64(x * invLn2))
	r := float64(x-float64(k*ln2Hi)) - float64(k*ln2Lo)
	p := 1.0 / 6227020800 // 1/13!
	for _, c := range expCoef {
		p = float64(p*r) + c
	}
	return scale(p, int(k))
}

// expCoef are 1/12!, 1/11!, ..., 1/1!, 1/0!, for Horner's rule.
var expCoef = [...]float64{
	1.0 / 479001600, 1.0 / 39916800, 1.0 / 3628800, 1.0 / 362880, 1.0 / 40320,
	1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 1.0 / 2, 1, 1,
}

// scale returns p·2^k for p in [0.5, 2] and k in [-1022, 1023]: an exact
// multiplication by a power of two built from its bits.
func scale(p float64, k int) float64 {
	if k > 1023 {
		return p * math.Float64frombits(1023+1023<<52) * math.Float64frombits(uint64(k-1023+1023)<<52)
	}
	if k < -1022 {
		// Two steps keep the intermediate normal; the last one rounds
		// once into the subnormal range.
		return p * math.Float64frombits(uint64(-1022+1023)<<52) * math.Float64frombits(uint64(k+1022+1023)<<52)
	}
	return p * math.Float64frombits(uint64(k+1023)<<52)
}

// Log returns the natural logarithm of x, with a relative error below
// 2^-50. It writes x = m·2^e with m in [sqrt(1/2), sqrt(2)), and log m =
// 2·atanh(s), s = (m-1)/(m+1), as the odd series 2(s + s³/3 + ... + s²³/23)
// evaluated by Horner's rule in s². Log(0) is -Inf, Log of a negative
// number or NaN is NaN, Log(+Inf) is +Inf.
func Log(x float64) float64 {
	switch {
	case x != x || x < 0:
		return math.NaN()
	case x == 0:
		return math.Inf(-1)
	case x > math.MaxFloat64:
		return x
	}
	e := 0
	if x < 0x1p-1022 { // subnormal: make it normal, exactly
		x *= 0x1p54
		e = -54
	}
	b := math.Float64bits(x)
	e += int(b>>52) - 1023
	m := math.Float64frombits(b&(1<<52-1) | 1023<<52) // [1, 2)
	if m > math.Sqrt2 {
		m *= 0.5
		e++
	}
	s := (m - 1) / (m + 1)
	s2 := float64(s * s)
	p := 1.0 / 23
	for _, c := range logCoef {
		p = float64(p*s2) + c
	}
	lm := float64(2 * float64(s*p))
	fe := float64(e)
	return float64(fe*ln2Hi) + (float64(fe*ln2Lo) + lm)
}

// logCoef are 1/21, 1/19, ..., 1/3, 1 for Horner's rule.
var logCoef = [...]float64{
	1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13, 1.0 / 11, 1.0 / 9, 1.0 / 7, 1.0 / 5, 1.0 / 3, 1,
}
