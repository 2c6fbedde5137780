package job

import (
	"encoding/binary"
	"math"
	"math/big"
	"math/bits"
)

// Exact summation of float64 values.
//
// superacc is the "small superaccumulator" of Radford M. Neal, "Fast exact
// summation using small and large superaccumulators" (arXiv:1505.05571,
// 2015). Every finite float64 is an integer multiple of 2^-1074 below 2^1024,
// so a sum of them is a fixed-point number with about 2100 bits. The
// superaccumulator keeps that number in 64-bit signed limbs that nominally
// hold 32 bits each, limb i weighing 2^(32i-1074). A value is added by
// splitting its 53-bit mantissa over two adjacent limbs, with no carry
// handling; the 31 spare bits of every limb absorb the carries of up to 2047
// additions before they must be propagated. The result is exact whatever the
// order of the additions, so it is the same bits in any order; it is rounded
// to float64 once, at the end, to nearest with ties to even.
//
// sqacc is the same structure stretched over twice the exponent range: it
// sums the exact squares x·x (106-bit products at weights down to 2^-2148),
// which neither float64 nor an FMA split can hold without underflow or
// overflow for |x| below 2^-511 or above 2^511.

const (
	saChunkBits = 32
	saChunkMask = 1<<saChunkBits - 1
	// saSumLimbs covers bit positions 0..2143 in units of 2^-1074: values
	// reach bit 2097, the rest is headroom for carries.
	saSumLimbs = 67
	saSumExp   = -1074
	// saSqLimbs covers bit positions 0..4287 in units of 2^-2148: squares
	// reach bit 4195.
	saSqLimbs = 134
	saSqExp   = -2148
	// saCarryEvery bounds the additions between carry propagations in
	// superacc: every addition puts less than 2^52 into a limb that held less
	// than 2^32, and 2^32 + 2047·2^52 < 2^63.
	saCarryEvery = 2047
	// saSqCarryEvery does the same for sqacc, whose additions put less than
	// 2^32 into a limb.
	saSqCarryEvery = 1 << 30
	// saMaxTop bounds the top limb accepted from an encoded state, far above
	// what 2^63 additions can reach, so that merging never overflows.
	saMaxTop = 1 << 52

	f64MantMask = 1<<52 - 1
)

// Flags for non-finite values added to a superacc.
const (
	saPosInf = 1 << iota
	saNegInf
	saNaN
)

// superacc is an exact accumulator of float64 sums (Neal 2015, small
// superaccumulator). The zero value is an empty sum. Non-finite values are
// remembered as flags: the sum of anything with NaN, or of +Inf with -Inf, is
// NaN; otherwise an infinity added wins over every finite value.
type superacc struct {
	limb    [saSumLimbs]int64
	pending int32 // additions since the last carry propagation
	special uint8 // saPosInf | saNegInf | saNaN
}

// add adds x exactly.
func (a *superacc) add(x float64) {
	u := math.Float64bits(x)
	e := uint(u>>52) & 0x7ff
	m := u & f64MantMask
	switch e {
	case 0:
		if m == 0 {
			return
		}
		e = 1 // subnormal: same weight as the smallest normal exponent
	case 0x7ff:
		switch {
		case m != 0:
			a.special |= saNaN
		case int64(u) < 0:
			a.special |= saNegInf
		default:
			a.special |= saPosInf
		}
		return
	default:
		m |= 1 << 52
	}
	if a.pending >= saCarryEvery {
		carryLimbs(a.limb[:])
		a.pending = 0
	}
	a.pending++
	q := e - 1 // position of the mantissa's lowest bit, in units of 2^-1074
	i := q >> 5
	s := q & 31
	lo := int64(m << s & saChunkMask)
	hi := int64(m >> (saChunkBits - s))
	neg := int64(u) >> 63 // 0 or -1: negate without a branch, as signs are random
	l := a.limb[i : i+2 : i+2]
	l[0] += (lo ^ neg) - neg
	l[1] += (hi ^ neg) - neg
}

// merge adds the sum held by b to a; b is not changed.
func (a *superacc) merge(b *superacc) {
	carryLimbs(a.limb[:])
	c := b.limb
	carryLimbs(c[:])
	for i := range a.limb {
		a.limb[i] += c[i]
	}
	carryLimbs(a.limb[:])
	a.pending = 0
	a.special |= b.special
}

// finite reports whether only finite values were added.
func (a *superacc) finite() bool { return a.special == 0 }

// nonFinite returns the sum when a non-finite value was added: NaN, +Inf or
// -Inf.
func (a *superacc) nonFinite() float64 {
	switch {
	case a.special&saNaN != 0, a.special&(saPosInf|saNegInf) == saPosInf|saNegInf:
		return math.NaN()
	case a.special&saPosInf != 0:
		return math.Inf(1)
	default:
		return math.Inf(-1)
	}
}

// exact returns the sum of the finite values added as mant·2^exp exactly.
func (a *superacc) exact() (mant *big.Int, exp int) {
	return limbsExact(a.limb[:], saSumExp)
}

// float64 returns the sum rounded once to the nearest float64, ties to
// even; ±Inf when it overflows.
func (a *superacc) float64() float64 {
	if !a.finite() {
		return a.nonFinite()
	}
	m, e := a.exact()
	return roundExact(m, e)
}

// appendState appends the canonical encoding of a: equal sums give equal
// bytes, whatever the order they were added in.
func (a *superacc) appendState(b []byte) []byte {
	b = append(b, a.special)
	return appendLimbs(b, a.limb[:])
}

// decodeState reads what appendState wrote into the empty a.
func (a *superacc) decodeState(r *stateReader) {
	a.special = r.byte()
	if a.special&^(saPosInf|saNegInf|saNaN) != 0 {
		r.fail("bad superaccumulator flags")
	}
	r.limbs(a.limb[:])
}

// sqacc is an exact accumulator of sums of squares x·x of float64 values;
// see superacc. The zero value is an empty sum.
type sqacc struct {
	limb    [saSqLimbs]int64
	pending int32
}

// addSquare adds x·x exactly; x must be finite.
func (a *sqacc) addSquare(x float64) {
	u := math.Float64bits(x)
	e := uint(u>>52) & 0x7ff
	m := u & f64MantMask
	switch e {
	case 0:
		if m == 0 {
			return
		}
		e = 1
	case 0x7ff:
		return // callers reject non-finite values
	default:
		m |= 1 << 52
	}
	if a.pending >= saSqCarryEvery {
		carryLimbs(a.limb[:])
		a.pending = 0
	}
	a.pending++
	q := 2 * (e - 1) // x·x = m·m · 2^(2(e-1)) in units of 2^-2148
	hi, lo := bits.Mul64(m, m)
	i := q >> 5
	s := q & 31
	w0 := lo << s
	w1 := hi<<s | lo>>(64-s) // a shift by 64 gives 0 in Go
	w2 := hi >> (64 - s)
	l := a.limb[i : i+5 : i+5]
	l[0] += int64(w0 & saChunkMask)
	l[1] += int64(w0 >> saChunkBits)
	l[2] += int64(w1 & saChunkMask)
	l[3] += int64(w1 >> saChunkBits)
	l[4] += int64(w2)
}

// merge adds the sum held by b to a; b is not changed.
func (a *sqacc) merge(b *sqacc) {
	carryLimbs(a.limb[:])
	c := b.limb
	carryLimbs(c[:])
	for i := range a.limb {
		a.limb[i] += c[i]
	}
	carryLimbs(a.limb[:])
	a.pending = 0
}

// exact returns the sum of squares as mant·2^exp exactly.
func (a *sqacc) exact() (mant *big.Int, exp int) {
	return limbsExact(a.limb[:], saSqExp)
}

// carryLimbs propagates carries so that every limb but the top one lies in
// [0, 2^32); the top limb keeps the sign. The value is unchanged, and the
// representation becomes canonical.
func carryLimbs(l []int64) {
	var carry int64
	last := len(l) - 1
	for i := range last {
		v := l[i] + carry
		carry = v >> saChunkBits // arithmetic shift: floor division
		l[i] = v & saChunkMask
	}
	l[last] += carry
}

// limbsExact returns Σ l[i]·2^(32i+base) as mant·2^exp, without changing l.
func limbsExact(src []int64, base int) (*big.Int, int) {
	var buf [saSqLimbs]int64
	l := buf[:len(src)]
	copy(l, src)
	carryLimbs(l)
	top := len(l) - 1
	neg := l[top] < 0
	if neg {
		for i := range l {
			l[i] = -l[i]
		}
		carryLimbs(l)
	}
	hi := top
	for hi >= 0 && l[hi] == 0 {
		hi--
	}
	if hi < 0 {
		return new(big.Int), 0
	}
	lo := 0
	for l[lo] == 0 {
		lo++
	}
	b := make([]byte, 0, 4*(hi-lo)+8)
	b = binary.BigEndian.AppendUint64(b, uint64(l[hi]))
	for i := hi - 1; i >= lo; i-- {
		b = binary.BigEndian.AppendUint32(b, uint32(l[i]))
	}
	m := new(big.Int).SetBytes(b)
	if neg {
		m.Neg(m)
	}
	return m, base + saChunkBits*lo
}

// appendLimbs appends the canonical form of the limbs: the index of the
// lowest non-zero limb, the count up to the highest, and those limbs.
func appendLimbs(b []byte, src []int64) []byte {
	var buf [saSqLimbs]int64
	l := buf[:len(src)]
	copy(l, src)
	carryLimbs(l)
	hi := len(l) - 1
	for hi >= 0 && l[hi] == 0 {
		hi--
	}
	if hi < 0 {
		return binary.AppendUvarint(b, 0)
	}
	lo := 0
	for l[lo] == 0 {
		lo++
	}
	b = binary.AppendUvarint(b, uint64(hi-lo+1))
	b = binary.AppendUvarint(b, uint64(lo))
	for _, v := range l[lo : hi+1] {
		b = binary.AppendVarint(b, v)
	}
	return b
}

// roundExact returns m·2^exp rounded to the nearest float64, ties to even,
// subnormals included; ±Inf when it overflows.
func roundExact(m *big.Int, exp int) float64 {
	if m.Sign() == 0 {
		return 0
	}
	var f big.Float
	f.SetInt(m) // exact: the precision grows to m's length
	f.SetMantExp(&f, exp)
	x, _ := f.Float64() // rounds to nearest even, subnormals included
	return x
}

// roundQuo returns (num+δ)·2^exp / den rounded once to the nearest float64,
// ties to even, where den > 0 and δ is 0 when sticky is false and somewhere
// in (0, 1) when it is true. With sticky set, num must already have at least
// den.BitLen()+66 bits.
//
// The quotient is computed to at least 66 bits; the remainder (or δ) is
// folded into one extra sticky bit below them, which makes the single
// rounding by roundExact exact.
func roundQuo(num *big.Int, exp int, den *big.Int, sticky bool) float64 {
	if num.Sign() == 0 && !sticky {
		return 0
	}
	a := new(big.Int).Abs(num)
	if shift := den.BitLen() + 66 - a.BitLen(); shift > 0 && !sticky {
		a.Lsh(a, uint(shift))
		exp -= shift
	}
	r := new(big.Int)
	a.QuoRem(a, den, r)
	a.Lsh(a, 1)
	exp--
	if sticky || r.Sign() != 0 {
		a.SetBit(a, 0, 1)
	}
	if num.Sign() < 0 {
		a.Neg(a)
	}
	return roundExact(a, exp)
}

// roundSqrtQuo returns sqrt(m·2^exp) / den rounded once to the nearest
// float64, for m >= 0, even exp and den > 0.
func roundSqrtQuo(m *big.Int, exp int, den *big.Int) float64 {
	if m.Sign() <= 0 {
		return 0
	}
	// Scale m by 4^k so that its integer square root has at least
	// den.BitLen()+66 bits, as roundQuo needs with a sticky bit.
	k := 0
	if need := 2*(den.BitLen()+67) - m.BitLen(); need > 0 {
		k = (need + 1) / 2
	}
	ms := new(big.Int).Lsh(m, uint(2*k))
	r := new(big.Int).Sqrt(ms)
	sq := new(big.Int).Mul(r, r)
	return roundQuo(r, exp/2-k, den, sq.Cmp(ms) != 0)
}
