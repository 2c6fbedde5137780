package fold

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestAssignWithoutShuffle(t *testing.T) {
	tests := []struct {
		rows, k int
		want    []int
	}{
		{2, 2, []int{0, 1}},
		{5, 2, []int{0, 1, 0, 1, 0}},
		{7, 3, []int{0, 1, 2, 0, 1, 2, 0}},
		{4, 4, []int{0, 1, 2, 3}},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("rows=%d,k=%d", tc.rows, tc.k), func(t *testing.T) {
			for _, seed := range []uint64{0, 1, 42} { // the seed is ignored
				got, err := Assign(tc.rows, tc.k, false, seed)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("seed %d (-want +got):\n%s", seed, diff)
				}
			}
		})
	}
	// Row i is in fold i mod k, at any size.
	got, err := Assign(1000, 7, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range got {
		if f != i%7 {
			t.Fatalf("row %d in fold %d, want %d", i, f, i%7)
		}
	}
}

// foldSizes counts the rows of each fold.
func foldSizes(folds []int, k int) []int {
	sizes := make([]int, k)
	for _, f := range folds {
		sizes[f]++
	}
	return sizes
}

func TestAssignShuffle(t *testing.T) {
	for _, tc := range []struct{ rows, k int }{{2, 2}, {10, 3}, {100, 7}, {1000, 10}, {1001, 1000}} {
		t.Run(fmt.Sprintf("rows=%d,k=%d", tc.rows, tc.k), func(t *testing.T) {
			got, err := Assign(tc.rows, tc.k, true, 12345)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.rows {
				t.Fatalf("%d folds for %d rows", len(got), tc.rows)
			}
			// Fold sizes differ by at most one: the first rows%k folds have
			// one row more.
			sizes := foldSizes(got, tc.k)
			for f, n := range sizes {
				want := tc.rows / tc.k
				if f < tc.rows%tc.k {
					want++
				}
				if n != want {
					t.Errorf("fold %d has %d rows, want %d (sizes %v)", f, n, want, sizes)
				}
			}
			// It is the documented construction: the row at permuted
			// position p is in fold p mod k.
			order := make([]int, tc.rows)
			for i := range order {
				order[i] = i
			}
			Permute(order, 12345)
			for p, row := range order {
				if got[row] != p%tc.k {
					t.Fatalf("row %d at permuted position %d is in fold %d, want %d", row, p, got[row], p%tc.k)
				}
			}
			// Deterministic for a seed.
			again, _ := Assign(tc.rows, tc.k, true, 12345)
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("second call differs (-first +second):\n%s", diff)
			}
		})
	}
}

func TestAssignShuffleSeeds(t *testing.T) {
	plain, _ := Assign(100, 5, false, 0)
	seen := map[string]uint64{}
	for seed := range uint64(50) {
		got, err := Assign(100, 5, true, seed)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprint(got)
		if prev, dup := seen[key]; dup {
			t.Errorf("seeds %d and %d give the same assignment", prev, seed)
		}
		seen[key] = seed
		if slices.Equal(got, plain) {
			t.Errorf("seed %d gives the unshuffled assignment", seed)
		}
	}
}

func TestAssignErrors(t *testing.T) {
	tests := []struct {
		rows, k int
		want    string
	}{
		{10, 1, "k must be at least 2, got 1"},
		{10, 0, "got 0"},
		{10, -3, "got -3"},
		{1, 2, "1 rows cannot fill 2 folds"},
		{0, 2, "0 rows"},
		{-1, 2, "-1 rows"},
		{999, 1000, "999 rows cannot fill 1000 folds"},
	}
	for _, tc := range tests {
		for _, shuffle := range []bool{false, true} {
			t.Run(fmt.Sprintf("rows=%d,k=%d,shuffle=%v", tc.rows, tc.k, shuffle), func(t *testing.T) {
				got, err := Assign(tc.rows, tc.k, shuffle, 1)
				if err == nil {
					t.Fatalf("Assign = %v, want an error", got)
				}
				if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "fold: ") {
					t.Errorf("error %q, want \"fold: ...%s...\"", err, tc.want)
				}
			})
		}
	}
}

// splitMix64 is the reference generator (Steele, Lea and Flood, 2014; the
// constants of Vigna's splitmix64.c).
type splitMix64 uint64

func (s *splitMix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// permuteRef is Algorithm P with an unbiased draw by rejection of the
// values below 2^64 mod n, written independently of Permute.
func permuteRef(xs []int, seed uint64) {
	g := splitMix64(seed)
	for i := len(xs) - 1; i > 0; i-- {
		n := uint64(i + 1)
		// 2^64 mod n, computed as (2^64 - n) mod n.
		threshold := (0 - n) % n
		r := g.next()
		for r < threshold {
			r = g.next()
		}
		j := int(r % n)
		xs[i], xs[j] = xs[j], xs[i]
	}
}

func TestPermute(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 10, 1000} {
		for _, seed := range []uint64{0, 1, 0xdeadbeef, 1<<64 - 1} {
			got := make([]int, n)
			want := make([]int, n)
			for i := range got {
				got[i], want[i] = i, i
			}
			Permute(got, seed)
			permuteRef(want, seed)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("n=%d seed=%d: Permute differs from the reference (-want +got):\n%s", n, seed, diff)
			}
			sorted := slices.Clone(got)
			slices.Sort(sorted)
			for i, x := range sorted {
				if x != i {
					t.Fatalf("n=%d seed=%d: %v is not a permutation", n, seed, got)
				}
			}
		}
	}
}

// TestPermuteGolden pins one permutation: job programs compiled to
// WebAssembly and the planner must agree on it forever.
func TestPermuteGolden(t *testing.T) {
	xs := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	Permute(xs, 42)
	want := []int{0, 9, 5, 8, 6, 4, 7, 2, 1, 3}
	if diff := cmp.Diff(want, xs); diff != "" {
		t.Errorf("Permute(0..9, 42) (-want +got):\n%s", diff)
	}
	var g splitMix64
	if got, want := g.next(), uint64(0xe220a8397b1dcdaf); got != want {
		t.Errorf("SplitMix64 from 0: first output %#x, want %#x", got, want)
	}
}

func TestPermuteUniform(t *testing.T) {
	// Over many seeds each of the 6 orders of 3 items appears about equally
	// often. The seeds are fixed, so the test is deterministic.
	const seeds = 60000
	counts := map[[3]int]int{}
	for seed := range uint64(seeds) {
		xs := []int{0, 1, 2}
		Permute(xs, seed)
		counts[[3]int(xs)]++
	}
	if len(counts) != 6 {
		t.Fatalf("%d distinct orders, want 6: %v", len(counts), counts)
	}
	for order, n := range counts {
		if n < seeds/6*9/10 || n > seeds/6*11/10 {
			t.Errorf("order %v appeared %d times, want about %d", order, n, seeds/6)
		}
	}
}
