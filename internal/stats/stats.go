// Package stats holds the summary statistics that memtrain's measurements
// share: the median of repeated timings and rounding to significant
// digits. It imports nothing of memtrain.
package stats

import (
	"math"
	"slices"
)

// Median returns the middle value of xs (the mean of the two middle ones
// when there is an even number), or NaN when xs is empty. xs is not
// modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// RoundSig rounds x to digits significant digits (digits ≥ 1); 0, ±Inf
// and NaN are returned as they are.
func RoundSig(x float64, digits int) float64 {
	if x == 0 || math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	p := math.Pow(10, float64(digits-1)-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}
