// Package philox is the counter-based random number generator
// Philox4x32-10 of Salmon, Moraes, Dror and Shaw, "Parallel random numbers:
// as easy as 1, 2, 3" (SC'11), for the example job programs whose GPU
// kernels draw the same numbers: the n-th number of a stream is a pure
// function of (key, n), so a GPU thread and a CPU loop that compute the
// same counters get the same bits, in any order and any cut into pieces.
//
// Word order is Random123's (the reference implementation of the paper):
// ctr[0] and key[0] are the lowest words. The known-answer vectors of
// Random123's kat_vectors hold (philox_test.go).
//
// The package uses only the standard library so that it compiles with
// GOOS=wasip1 GOARCH=wasm.
package philox

// Philox4x32 constants (SC'11, table 2 and section 5.3; Random123's
// philox.h): the round multipliers and the Weyl key bumps (the golden
// ratio and sqrt(3)-1 as 32-bit fractions).
const (
	M0 = 0xD2511F53
	M1 = 0xCD9E8D57
	W0 = 0x9E3779B9
	W1 = 0xBB67AE85
)

// Rounds is the number of rounds of Philox4x32-10.
const Rounds = 10

// Block returns Philox4x32-10 of counter ctr under key key.
func Block(ctr [4]uint32, key [2]uint32) [4]uint32 {
	ka, kb := Keys(key)
	c0, c1, c2, c3 := ctr[0], ctr[1], ctr[2], ctr[3]
	for r := range Rounds {
		c0, c1, c2, c3 = Round(c0, c1, c2, c3, ka[r], kb[r])
	}
	return [4]uint32{c0, c1, c2, c3}
}

// Keys returns the round keys of key: round r uses (ka[r], kb[r]), key
// bumped r times by (W0, W1). Loops that draw many counters under one key
// compute them once.
func Keys(key [2]uint32) (ka, kb [Rounds]uint32) {
	ka[0], kb[0] = key[0], key[1]
	for r := 1; r < Rounds; r++ {
		ka[r], kb[r] = ka[r-1]+W0, kb[r-1]+W1
	}
	return ka, kb
}

// Round is one round of Philox4x32 under the round key (k0, k1): the
// S-box of SC'11 section 5.3, two 32×32→64-bit multiplies.
func Round(c0, c1, c2, c3, k0, k1 uint32) (uint32, uint32, uint32, uint32) {
	p0 := uint64(M0) * uint64(c0)
	p1 := uint64(M1) * uint64(c2)
	return uint32(p1>>32) ^ c1 ^ k0, uint32(p1), uint32(p0>>32) ^ c3 ^ k1, uint32(p0)
}

// Counter returns the counter of the n-th block of a stream: (low 32 bits
// of n, high 32 bits of n, 0, 0).
func Counter(n uint64) [4]uint32 { return [4]uint32{uint32(n), uint32(n >> 32), 0, 0} }

// Key returns the key of a 64-bit seed: (low 32 bits, high 32 bits).
func Key(seed uint64) [2]uint32 { return [2]uint32{uint32(seed), uint32(seed >> 32)} }
