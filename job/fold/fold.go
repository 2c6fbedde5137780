// Package fold assigns the rows of a data set to the folds of k-fold
// cross-validation. It is tiny and dependency-free so that job programs
// compiled to WebAssembly can import it and agree with the planner exactly.
//
// Row i (0-based, header not counted) belongs to fold i mod k. With
// shuffling, the rows are first permuted by a Fisher–Yates shuffle driven by
// SplitMix64 seeded with the permutation seed, and fold membership is taken
// over the permuted positions: the row at permuted position p belongs to
// fold p mod k.
package fold

import "fmt"

// Assign returns, for each of rows rows, the fold (0..k-1) it is tested in.
// With shuffle false the seed is ignored and row i is in fold i mod k. It
// returns an error when rows < k or k < 2.
func Assign(rows, k int, shuffle bool, seed uint64) ([]int, error) {
	if k < 2 {
		return nil, fmt.Errorf("fold: k must be at least 2, got %d", k)
	}
	if rows < k {
		return nil, fmt.Errorf("fold: %d rows cannot fill %d folds", rows, k)
	}
	order := make([]int, rows)
	for i := range order {
		order[i] = i
	}
	if shuffle {
		Permute(order, seed)
	}
	folds := make([]int, rows)
	for pos, row := range order {
		folds[row] = pos % k
	}
	return folds, nil
}

// Permute shuffles xs in place with the Fisher–Yates algorithm (Knuth,
// TAOCP vol. 2, Algorithm P), drawing from SplitMix64 (Steele, Lea and
// Flood, 2014) seeded with seed, and an unbiased bounded draw by rejection.
// The same seed always gives the same permutation on every platform.
func Permute(xs []int, seed uint64) {
	s := seed
	next := func() uint64 {
		s += 0x9e3779b97f4a7c15
		z := s
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		return z ^ (z >> 31)
	}
	for i := len(xs) - 1; i > 0; i-- {
		n := uint64(i + 1)
		limit := -n % n // 2^64 mod n: draws below it are rejected
		var r uint64
		for {
			r = next()
			if r >= limit {
				break
			}
		}
		j := int(r % n)
		xs[i], xs[j] = xs[j], xs[i]
	}
}
