package main

import (
	"math"
	"slices"
)

// gaussianNB is a fitted Gaussian naive Bayes classifier.
type gaussianNB struct {
	classes  []int       // sorted distinct labels of the training rows
	logPrior []float64   // log(count_c / n), per class
	mean     [][]float64 // per class, per feature
	variance [][]float64 // per class, per feature, smoothing included
}

// fitGaussianNB fits Gaussian naive Bayes as scikit-learn 1.2.1's
// GaussianNB(var_smoothing=1e-9).fit does: per class, the mean and the
// population variance of each feature over the class's rows (numpy's
// np.mean and np.var along axis 0: a plain running sum per column, divided
// by n), plus epsilon = 1e-9 times the largest population variance of any
// feature over all training rows; the prior is the class's share of rows.
// train must not be empty.
func fitGaussianNB(train dataset) gaussianNB {
	classes := slices.Clone(train.Y)
	slices.Sort(classes)
	classes = slices.Compact(classes)

	_, allVar := meanVar(train.X)
	epsilon := 1e-9 * slices.Max(allVar)

	nb := gaussianNB{classes: classes}
	n := float64(len(train.Y))
	for _, c := range classes {
		var rows [][]float64
		for i, y := range train.Y {
			if y == c {
				rows = append(rows, train.X[i])
			}
		}
		mean, variance := meanVar(rows)
		for j := range variance {
			variance[j] += epsilon
		}
		nb.logPrior = append(nb.logPrior, math.Log(float64(len(rows))/n))
		nb.mean = append(nb.mean, mean)
		nb.variance = append(nb.variance, variance)
	}
	return nb
}

// meanVar returns the mean and the population variance of each column of
// rows, summing in row order as numpy does along axis 0:
// mean = Σx / n, var = Σ(x - mean)² / n.
func meanVar(rows [][]float64) (mean, variance []float64) {
	d := len(rows[0])
	n := float64(len(rows))
	mean = make([]float64, d)
	variance = make([]float64, d)
	for _, x := range rows {
		for j, v := range x {
			mean[j] += v
		}
	}
	for j := range mean {
		mean[j] /= n
	}
	for _, x := range rows {
		for j, v := range x {
			dev := v - mean[j]
			variance[j] += float64(dev * dev)
		}
	}
	for j := range variance {
		variance[j] /= n
	}
	return mean, variance
}

// predict returns the class with the largest joint log likelihood, the
// lowest label on a tie. The likelihood is evaluated in scikit-learn
// 1.2.1's order (GaussianNB._joint_log_likelihood):
//
//	log prior + (-0.5 Σ_j log(2π var_j) - 0.5 Σ_j (x_j - mean_j)² / var_j)
//
// with both sums taken as numpy's np.sum does (pairwiseSum).
func (nb gaussianNB) predict(x []float64) int {
	d := len(x)
	logs := make([]float64, d)
	terms := make([]float64, d)
	best, bestJLL := 0, math.Inf(-1)
	for c := range nb.classes {
		mean, variance := nb.mean[c], nb.variance[c]
		for j := range d {
			logs[j] = math.Log(float64(2*math.Pi) * variance[j])
			dev := x[j] - mean[j]
			terms[j] = float64(dev*dev) / variance[j]
		}
		nij := -0.5 * pairwiseSum(logs)
		nij -= float64(0.5 * pairwiseSum(terms))
		jll := nb.logPrior[c] + nij
		if jll > bestJLL {
			best, bestJLL = c, jll
		}
	}
	return nb.classes[best]
}

// pairwiseSum adds xs as numpy's pairwise summation does for a contiguous
// float64 array (numpy/_core/src/umath/loops_utils.h.src, pairwise_sum):
// below 8 elements a plain running sum; up to 128, eight interleaved
// partial sums combined as a tree, then the remainder; beyond, the halves
// (rounded down to a multiple of 8) recursively.
func pairwiseSum(xs []float64) float64 {
	n := len(xs)
	switch {
	case n < 8:
		var s float64
		for _, v := range xs {
			s += v
		}
		return s
	case n <= 128:
		var r [8]float64
		copy(r[:], xs[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for k := range r {
				r[k] += xs[i+k]
			}
		}
		s := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			s += xs[i]
		}
		return s
	default:
		n2 := n / 2
		n2 -= n2 % 8
		return pairwiseSum(xs[:n2]) + pairwiseSum(xs[n2:])
	}
}

// knn classifies x by majority vote among its k nearest training rows by
// squared Euclidean distance (summed in feature order), brute force. A
// distance tie goes to the lower row index and a vote tie to the lowest
// label.
func knn(train dataset, x []float64, k int) int {
	type neighbour struct {
		dist float64
		row  int
	}
	// nearest holds the best neighbours so far, sorted by (dist, row).
	// Rows arrive in increasing order, so a later row with an equal
	// distance never displaces an earlier one.
	nearest := make([]neighbour, 0, k+1)
	for i, t := range train.X {
		var d float64
		for j, v := range t {
			dev := v - x[j]
			d += float64(dev * dev)
		}
		if len(nearest) == k && d >= nearest[k-1].dist {
			continue
		}
		pos := len(nearest)
		for pos > 0 && nearest[pos-1].dist > d {
			pos--
		}
		nearest = slices.Insert(nearest, pos, neighbour{d, i})
		if len(nearest) > k {
			nearest = nearest[:k]
		}
	}
	votes := make(map[int]int, k)
	for _, nb := range nearest {
		votes[train.Y[nb.row]]++
	}
	best, bestVotes := 0, -1
	for label, v := range votes {
		if v > bestVotes || (v == bestVotes && label < best) {
			best, bestVotes = label, v
		}
	}
	return best
}
