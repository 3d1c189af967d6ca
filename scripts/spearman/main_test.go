package main

import (
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

func TestRanks(t *testing.T) {
	got := ranks([]float64{3, 1, 2, 2})
	want := []float64{4, 1, 2.5, 2.5}
	if err := numtest.Equal(got, want); err != nil {
		t.Fatalf("ranks = %v: %v", got, err)
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
		if err := numtest.Scalar(pearson(ranks(c.a), ranks(c.b)), c.want, numtest.Tol{Abs: 1e-12}); err != nil {
			t.Errorf("spearman(%v, %v): %v", c.a, c.b, err)
		}
	}
}
