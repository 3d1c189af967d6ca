package memorization

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

func TestMean(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{1, 2, 3, 4}, 2.5},
		{[]float64{-1, 1}, 0},
	}
	for _, tt := range tests {
		if got := Mean(tt.in); got != tt.want {
			t.Errorf("Mean(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// TestMeanSD: the mean and the sample standard deviation (n − 1), by hand:
// 1, 2, 3, 6 has mean 3 and squared deviations 4 + 1 + 0 + 9 = 14, so
// sd = √(14/3); one value has no spread (NaN, not 0), none no mean.
func TestMeanSD(t *testing.T) {
	for _, c := range []struct {
		in       []float64
		mean, sd float64 // NaN: undefined
	}{
		{[]float64{1, 2, 3, 6}, 3, math.Sqrt(14.0 / 3)},
		{[]float64{0.8, 0.9}, 0.85, math.Sqrt(0.005)},
		{[]float64{5, 5, 5}, 5, 0},
		{[]float64{0.25}, 0.25, math.NaN()},
		{nil, math.NaN(), math.NaN()},
	} {
		m, sd := MeanSD(c.in)
		if err := numtest.Close([]float64{m, sd}, []float64{c.mean, c.sd}, numtest.Tol{Abs: 1e-12, NonFinite: true}); err != nil {
			t.Errorf("MeanSD(%v) (mean, sd): %v", c.in, err)
		}
	}
}

func TestROCAUC(t *testing.T) {
	tests := []struct {
		name           string
		members, non   []float64
		higherIsMember bool
		want           float64
	}{
		{"perfect separation", []float64{5, 6, 7}, []float64{1, 2, 3}, true, 1},
		{"reversed", []float64{1, 2, 3}, []float64{5, 6, 7}, true, 0},
		{"lower is member", []float64{1, 2, 3}, []float64{5, 6, 7}, false, 1},
		{"all ties", []float64{4, 4, 4}, []float64{4, 4}, true, 0.5},
		{"empty members", nil, []float64{1}, true, 0.5},
		{"empty non-members", []float64{1}, nil, true, 0.5},
		// Pairs (m, n): (2,1)=1 (2,3)=0 (4,1)=1 (4,3)=1 → 3/4.
		{"hand example", []float64{2, 4}, []float64{1, 3}, true, 0.75},
		// Pairs: (3,1)=1 (3,3)=½ (3,5)=0 (5,1)=1 (5,3)=1 (5,5)=½ → 4/6.
		{"hand example with ties", []float64{3, 5}, []float64{1, 3, 5}, true, 4.0 / 6},
		{"hand example with ties, lower is member", []float64{3, 5}, []float64{1, 3, 5}, false, 2.0 / 6},
	}
	for _, tt := range tests {
		if err := numtest.Scalar(ROCAUC(tt.members, tt.non, tt.higherIsMember), tt.want, numtest.Tol{Abs: 1e-4}); err != nil {
			t.Errorf("%s: ROCAUC: %v", tt.name, err)
		}
	}
}

// bruteAUC counts member/non-member pairs directly.
func bruteAUC(members, non []float64) float64 {
	s := 0.0
	for _, m := range members {
		for _, n := range non {
			switch {
			case m > n:
				s++
			case m == n:
				s += 0.5
			}
		}
	}
	return s / float64(len(members)*len(non))
}

func TestROCAUCMatchesPairCount(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		m := make([]float64, 1+rng.IntN(20))
		n := make([]float64, 1+rng.IntN(20))
		for i := range m {
			m[i] = float64(rng.IntN(8)) // small range forces ties
		}
		for i := range n {
			n[i] = float64(rng.IntN(8)) - 1
		}
		want := bruteAUC(m, n)
		if err := numtest.Scalar(ROCAUC(m, n, true), want, numtest.Tol{Abs: 1e-12}); err != nil {
			t.Fatalf("trial %d: ROCAUC against the pair count: %v", trial, err)
		}
		if err := numtest.Scalar(ROCAUC(m, n, false), 1-want, numtest.Tol{Abs: 1e-12}); err != nil {
			t.Fatalf("trial %d: ROCAUC(lower): %v", trial, err)
		}
	}
}

func TestBootstrapCIDeterministic(t *testing.T) {
	vals := []float64{1, 4, 2, 8, 5, 7, 3, 9, 6, 0}
	lo1, hi1 := BootstrapCI(vals, Mean, 500, 42, 0.95)
	lo2, hi2 := BootstrapCI(vals, Mean, 500, 42, 0.95)
	if lo1 != lo2 || hi1 != hi2 {
		t.Errorf("same seed gave (%v, %v) and (%v, %v)", lo1, hi1, lo2, hi2)
	}
	lo3, hi3 := BootstrapCI(vals, Mean, 500, 43, 0.95)
	if lo1 == lo3 && hi1 == hi3 {
		t.Errorf("different seeds gave identical intervals (%v, %v)", lo1, hi1)
	}
	if !(lo1 <= Mean(vals) && Mean(vals) <= hi1 && lo1 < hi1) {
		t.Errorf("interval (%v, %v) does not bracket the sample mean %v", lo1, hi1, Mean(vals))
	}
	// A wider level gives a wider interval.
	lo9, hi9 := BootstrapCI(vals, Mean, 500, 42, 0.5)
	if !(lo1 <= lo9 && hi9 <= hi1) {
		t.Errorf("50%% interval (%v, %v) not inside 95%% interval (%v, %v)", lo9, hi9, lo1, hi1)
	}
}

func TestBootstrapCIEdgeCases(t *testing.T) {
	tests := []struct {
		name      string
		vals      []float64
		resamples int
		level     float64
		lo, hi    float64
	}{
		{"empty", nil, 100, 0.95, 0, 0},
		{"constant", []float64{2, 2, 2}, 100, 0.95, 2, 2},
		{"no resamples", []float64{1, 3}, 0, 0.95, 2, 2},
		{"bad level", []float64{1, 3}, 100, 1.5, 2, 2},
		{"single value", []float64{7}, 100, 0.95, 7, 7},
	}
	for _, tt := range tests {
		lo, hi := BootstrapCI(tt.vals, Mean, tt.resamples, 1, tt.level)
		if lo != tt.lo || hi != tt.hi {
			t.Errorf("%s: BootstrapCI = (%v, %v), want (%v, %v)", tt.name, lo, hi, tt.lo, tt.hi)
		}
	}
}

func TestBootstrapCICoverage(t *testing.T) {
	const trueMean, sd = 3.0, 2.0
	rng := rand.New(rand.NewPCG(7, 11))
	vals := make([]float64, 5000)
	for i := range vals {
		vals[i] = trueMean + sd*rng.NormFloat64()
	}
	lo, hi := BootstrapCI(vals, Mean, 1000, 99, 0.99)
	if !(lo < trueMean && trueMean < hi) {
		t.Errorf("99%% CI (%v, %v) misses the true mean %v", lo, hi, trueMean)
	}
	// Its width should be near 2·2.576·sd/√n.
	want := 2 * 2.576 * sd / math.Sqrt(float64(len(vals)))
	if err := numtest.Scalar(hi-lo, want, numtest.Tol{Rel: 0.2}); err != nil {
		t.Errorf("CI width: %v", err)
	}
}

func TestBootstrapCIOtherStat(t *testing.T) {
	median := func(s []float64) float64 {
		sort.Float64s(s) // allowed: stat may reorder its input
		return s[len(s)/2]
	}
	vals := []float64{5, 1, 4, 2, 3}
	orig := append([]float64(nil), vals...)
	lo, hi := BootstrapCI(vals, median, 200, 3, 0.9)
	if !(lo >= 1 && hi <= 5 && lo <= hi) {
		t.Errorf("median CI (%v, %v) outside the data range", lo, hi)
	}
	if err := numtest.Equal(vals, orig); err != nil {
		t.Fatalf("BootstrapCI modified its input: %v", err)
	}
}

func TestQuantile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5}
	tests := []struct{ q, want float64 }{
		{0, 1}, {1, 5}, {0.5, 3}, {0.25, 2}, {0.1, 1.4}, {0.975, 4.9},
	}
	for _, tt := range tests {
		if err := numtest.Scalar(quantile(s, tt.q), tt.want, numtest.Tol{Abs: 1e-4}); err != nil {
			t.Errorf("quantile(%v): %v", tt.q, err)
		}
	}
}

func TestTPRAtFPR(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mem, non []float64
		higher   bool
		alpha    float64
		want     float64
	}{
		// 3 non-members: 1% allows no false positive; members above the
		// best non-member (0.7) are 0.9 and 0.8.
		{"no false positive", []float64{0.9, 0.8, 0.6, 0.1}, []float64{0.7, 0.5, 0.2}, true, 0.01, 0.5},
		{"0.1% is 1% at n=3", []float64{0.9, 0.8, 0.6, 0.1}, []float64{0.7, 0.5, 0.2}, true, 0.001, 0.5},
		// A member tied with the best non-member is not flagged.
		{"tie at the cut", []float64{0.9, 0.7, 0.7}, []float64{0.7, 0.1}, true, 0.01, 1.0 / 3},
		// Lower is member (a loss): the same case mirrored.
		{"lower is member", []float64{-0.9, -0.7, -0.7}, []float64{-0.7, -0.1}, false, 0.01, 1.0 / 3},
		// 10 non-members at 10% FPR: one false positive allowed; the next
		// non-member (0.8) bounds the members flagged: 0.95, 0.9, 0.85.
		{"one allowed", []float64{0.95, 0.9, 0.85, 0.8, 0.3}, []float64{0.99, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0}, true, 0.1, 0.6},
		// Two non-members tied at the top with one allowed: flagging one
		// flags both, so none may be, and no member beats them.
		{"tied non-members", []float64{0.9, 0.5}, []float64{0.9, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}, true, 0.1, 0},
		{"perfect", []float64{3, 2}, []float64{1, 0}, true, 0.001, 1},
		{"all tied", []float64{1, 1}, []float64{1, 1}, true, 0.01, 0},
		{"alpha 1", []float64{0, 1}, []float64{2}, true, 1, 1},
		{"no members", nil, []float64{1}, true, 0.01, 0},
		{"no non-members", []float64{1}, nil, true, 0.01, 0},
		// 300 non-members at 1%: three false positives allowed.
		{"rounding", []float64{0.5}, append([]float64{1, 1, 1}, make([]float64, 297)...), true, 0.01, 1},
	} {
		if err := numtest.Scalar(TPRAtFPR(tc.mem, tc.non, tc.higher, tc.alpha), tc.want, numtest.Tol{Abs: 1e-12}); err != nil {
			t.Errorf("%s: TPR: %v", tc.name, err)
		}
	}
}
