package stats

import (
	"math"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{-1, -5}, -3},
		{[]float64{2, 2, 2, 9}, 2},
		{[]float64{1, math.Inf(1), 0}, 1},
	} {
		in := append([]float64(nil), c.xs...)
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", in, got, c.want)
		}
		if err := numtest.Equal(c.xs, in); err != nil {
			t.Errorf("Median(%v) reordered its input to %v: %v", in, c.xs, err)
		}
	}
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
}

func TestRoundSig(t *testing.T) {
	for _, c := range []struct {
		x      float64
		digits int
		want   float64
	}{
		{123456, 3, 123000},
		{0.0012345, 3, 0.00123},
		{1.2355, 3, 1.24},
		{-98.76, 2, -99},
		{9.996, 3, 10},
		{42, 1, 40},
		{0.5, 3, 0.5},
		{0, 3, 0},
		{math.Inf(1), 3, math.Inf(1)},
		{math.Inf(-1), 3, math.Inf(-1)},
	} {
		if got := RoundSig(c.x, c.digits); got != c.want {
			t.Errorf("RoundSig(%v, %d) = %v, want %v", c.x, c.digits, got, c.want)
		}
	}
	if got := RoundSig(math.NaN(), 3); !math.IsNaN(got) {
		t.Errorf("RoundSig(NaN, 3) = %v, want NaN", got)
	}
}
