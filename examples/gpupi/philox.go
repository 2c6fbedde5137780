package main

import "math/bits"

// Philox4x32-10 constants from Salmon, Moraes, Dror and Shaw, "Parallel
// random numbers: as easy as 1, 2, 3" (SC'11), table 2 and section 5.3, as
// in Random123's philox.h: the round multipliers and the Weyl key bumps
// (the golden ratio and sqrt(3)-1, as 32-bit fractions).
const (
	philoxM0 = 0xD2511F53
	philoxM1 = 0xCD9E8D57
	philoxW0 = 0x9E3779B9
	philoxW1 = 0xBB67AE85
)

// philox4x32 returns Philox4x32-10 of counter ctr under key key: ten
// rounds of the S-box of SC'11 section 5.3 (two 32×32→64-bit multiplies
// per round), the key bumped by the Weyl constants between rounds. Word
// order is Random123's (ctr[0] is the lowest word); the known-answer
// vectors of Random123's kat_vectors hold for it (philox_test.go).
func philox4x32(ctr [4]uint32, key [2]uint32) [4]uint32 {
	c0, c1, c2, c3 := ctr[0], ctr[1], ctr[2], ctr[3]
	k0, k1 := key[0], key[1]
	for r := 0; r < 10; r++ {
		if r > 0 {
			k0 += philoxW0
			k1 += philoxW1
		}
		hi0, lo0 := bits.Mul32(philoxM0, c0)
		hi1, lo1 := bits.Mul32(philoxM1, c2)
		c0, c1, c2, c3 = hi1^c1^k0, lo1, hi0^c3^k1, lo0
	}
	return [4]uint32{c0, c1, c2, c3}
}

// countInside counts the samples first, first+1, …, first+n-1 of the task
// keyed by seed that fall strictly inside the quarter disc. Sample i is
// Philox4x32-10 of counter (low 32 bits of i, high 32 bits of i, 0, 0)
// under key (low 32 bits of seed, high 32 bits of seed); its first two
// output words are the point's coordinates x and y in units of 2^-32, and
// the point is inside exactly when x² + y² < 2^64, that is when the 64-bit
// sum of the two squares does not carry. gpupi.cu's count_inside computes
// the same, so a count is the same on the CPU and on the GPU, and the count
// of a range is the sum of the counts of any cut of it into pieces.
func countInside(seed, first, n uint64) uint64 {
	// The key schedule does not depend on the counter: compute it once.
	var ka, kb [10]uint32
	ka[0], kb[0] = uint32(seed), uint32(seed>>32)
	for r := 1; r < 10; r++ {
		ka[r], kb[r] = ka[r-1]+philoxW0, kb[r-1]+philoxW1
	}
	a0, a1, a2, a3, a4, a5, a6, a7, a8, a9 := ka[0], ka[1], ka[2], ka[3], ka[4], ka[5], ka[6], ka[7], ka[8], ka[9]
	b0, b1, b2, b3, b4, b5, b6, b7, b8, b9 := kb[0], kb[1], kb[2], kb[3], kb[4], kb[5], kb[6], kb[7], kb[8], kb[9]
	var outside uint64
	for i := first; i < first+n; i++ {
		c0, c1, c2, c3 := philoxRound(uint32(i), uint32(i>>32), 0, 0, a0, b0)
		c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, a1, b1)
		c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, a2, b2)
		c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, a3, b3)
		c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, a4, b4)
		c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, a5, b5)
		c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, a6, b6)
		c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, a7, b7)
		c0, c1, c2, c3 = philoxRound(c0, c1, c2, c3, a8, b8)
		c0, c1, _, _ = philoxRound(c0, c1, c2, c3, a9, b9)
		x, y := uint64(c0), uint64(c1)
		_, carry := bits.Add64(x*x, y*y, 0)
		outside += carry
	}
	return n - outside
}

// philoxRound is one round of Philox4x32 under round key (k0, k1).
func philoxRound(c0, c1, c2, c3, k0, k1 uint32) (uint32, uint32, uint32, uint32) {
	p0 := uint64(philoxM0) * uint64(c0)
	p1 := uint64(philoxM1) * uint64(c2)
	return uint32(p1>>32) ^ c1 ^ k0, uint32(p1), uint32(p0>>32) ^ c3 ^ k1, uint32(p0)
}
