package main

import (
	"math"
	"testing"
)

func TestRanks(t *testing.T) {
	got := ranks([]float64{3, 1, 2, 2})
	want := []float64{4, 1, 2.5, 2.5}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ranks = %v, want %v", got, want)
		}
	}
}

// TestSpearman checks the coefficient against values worked by hand:
// identical orders give 1, reversed −1, and one swapped pair of four
// 1 − 6·2/(4·15) = 0.8.
func TestSpearman(t *testing.T) {
	for _, c := range []struct {
		a, b []float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}, 1},
		{[]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},
		{[]float64{1, 2, 3, 4}, []float64{0.1, 0.3, 0.2, 0.4}, 0.8},
	} {
		if got := pearson(ranks(c.a), ranks(c.b)); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("spearman(%v, %v) = %g, want %g", c.a, c.b, got, c.want)
		}
	}
}
