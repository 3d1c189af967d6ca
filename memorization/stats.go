package memorization

import (
	"math"
	"math/rand/v2"
	"sort"
)

// Mean returns the arithmetic mean of values, or 0 when values is empty.
func Mean(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sum := 0.0
	for _, v := range values {
		sum += v
	}
	return sum / float64(len(values))
}

// MeanSD returns the mean of values and their sample standard deviation
// (divided by n − 1), as a study aggregates a metric over its seeds. With
// fewer than two values the deviation is undefined and sd is NaN, never 0:
// one seed says nothing about the spread over seeds. With no values both
// are NaN.
func MeanSD(values []float64) (mean, sd float64) {
	n := len(values)
	if n == 0 {
		return math.NaN(), math.NaN()
	}
	mean = Mean(values)
	if n < 2 {
		return mean, math.NaN()
	}
	ss := 0.0
	for _, v := range values {
		ss += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(ss / float64(n-1))
}

// ROCAUC returns the area under the ROC curve of a score that separates
// members from nonMembers, computed exactly from ranks as the Mann–Whitney
// statistic U/(n₁·n₀): the probability that a random member scores as more
// member-like than a random non-member, with ties counted as 1/2. If
// higherIsMember is true, higher scores indicate membership; otherwise lower
// scores do (as for a loss). It returns 0.5 (chance) when either set is
// empty. Scores must not be NaN.
func ROCAUC(members, nonMembers []float64, higherIsMember bool) float64 {
	n1, n0 := len(members), len(nonMembers)
	if n1 == 0 || n0 == 0 {
		return 0.5
	}
	type item struct {
		score  float64
		member bool
	}
	items := make([]item, 0, n1+n0)
	sign := 1.0
	if !higherIsMember {
		sign = -1
	}
	for _, s := range members {
		items = append(items, item{sign * s, true})
	}
	for _, s := range nonMembers {
		items = append(items, item{sign * s, false})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].score < items[j].score })
	// Sum the 1-based average ranks of the members.
	rankSum := 0.0
	for i := 0; i < len(items); {
		j := i
		for j < len(items) && items[j].score == items[i].score {
			j++
		}
		avg := float64(i+1+j) / 2 // mean of ranks i+1 .. j
		for t := i; t < j; t++ {
			if items[t].member {
				rankSum += avg
			}
		}
		i = j
	}
	u := rankSum - float64(n1)*float64(n1+1)/2
	return u / (float64(n1) * float64(n0))
}

// BootstrapCI returns a percentile-bootstrap confidence interval at
// confidence level (e.g. 0.95) for the statistic stat of values. It draws
// resamples resamples of len(values) values with replacement, using a PCG
// generator seeded from seed so the result is deterministic for a given
// seed, evaluates stat on each, and returns the (1−level)/2 and (1+level)/2
// quantiles of those statistics, interpolated linearly between order
// statistics.
//
// stat may reorder the slice it is given but must not retain it. When values
// is empty BootstrapCI returns 0, 0; when resamples < 1 or level is not in
// (0, 1) it returns stat(values) for both bounds.
func BootstrapCI(values []float64, stat func([]float64) float64, resamples int, seed uint64, level float64) (lo, hi float64) {
	if len(values) == 0 {
		return 0, 0
	}
	if resamples < 1 || !(level > 0 && level < 1) {
		s := stat(append([]float64(nil), values...))
		return s, s
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sample := make([]float64, len(values))
	stats := make([]float64, resamples)
	for r := range stats {
		for i := range sample {
			sample[i] = values[rng.IntN(len(values))]
		}
		stats[r] = stat(sample)
	}
	sort.Float64s(stats)
	alpha := (1 - level) / 2
	return quantile(stats, alpha), quantile(stats, 1-alpha)
}

// quantile returns the q-quantile of the sorted, non-empty slice s with
// linear interpolation between order statistics (numpy's default method).
func quantile(s []float64, q float64) float64 {
	pos := q * float64(len(s)-1)
	i := int(math.Floor(pos))
	if i >= len(s)-1 {
		return s[len(s)-1]
	}
	frac := pos - float64(i)
	return s[i] + frac*(s[i+1]-s[i])
}

// TPRAtFPR returns the true-positive rate of a membership-inference score at
// a false-positive rate of at most alpha (e.g. 0.01), read exactly off the
// empirical ROC curve: the largest fraction of members flagged by a
// threshold that flags at most alpha of the non-members. A threshold flags
// every document scoring at least as member-like as it, so it cannot split
// tied scores: a tie between a member and a non-member flags both or
// neither (ties are broken conservatively, never in the attack's favour).
// With fewer than 1/alpha non-members no false positive is allowed, and the
// result is the fraction of members scoring strictly more member-like than
// every non-member. higherIsMember orients the score as for [ROCAUC]. It
// returns 0 when either set is empty. Scores must not be NaN.
func TPRAtFPR(members, nonMembers []float64, higherIsMember bool, alpha float64) float64 {
	n1, n0 := len(members), len(nonMembers)
	if n1 == 0 || n0 == 0 {
		return 0
	}
	sign := 1.0
	if !higherIsMember {
		sign = -1
	}
	mem := make([]float64, n1)
	for i, s := range members {
		mem[i] = -sign * s // ascending order: most member-like first
	}
	non := make([]float64, n0)
	for i, s := range nonMembers {
		non[i] = -sign * s
	}
	sort.Float64s(mem)
	sort.Float64s(non)
	// The false positives allowed: floor(alpha·n0), with a little slack so
	// that 0.01·300 is 3 whatever the rounding.
	allowed := int(math.Floor(alpha*float64(n0) + 1e-9))
	if allowed >= n0 {
		return 1
	}
	// The threshold flags every score below non[allowed] (ordered most
	// member-like first): the next non-member, and all tied with it, must
	// stay unflagged, so members tied with it do too.
	cut := non[allowed]
	tp := sort.SearchFloat64s(mem, cut) // members strictly more member-like than cut
	return float64(tp) / float64(n1)
}
