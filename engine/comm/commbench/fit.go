package commbench

import (
	"math"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/internal/stats"
)

// Fits fits, per group size in the order of results, time = α + sent/β
// over every operation and size, where sent = bytes × ring factor, by
// least squares weighted by 1/time² (relative errors, so that
// microsecond and millisecond calls count alike). Without a rising line
// it falls back to the largest size's bus bandwidth and the fastest
// call.
func Fits(results []Result) []Fit {
	var fits []Fit
	byRanks := map[int][]Result{}
	var order []int
	for _, r := range results {
		if _, ok := byRanks[r.Ranks]; !ok {
			order = append(order, r.Ranks)
		}
		byRanks[r.Ranks] = append(byRanks[r.Ranks], r)
	}
	for _, p := range order {
		rs := byRanks[p]
		var sw, sx, sy, sxx, sxy float64
		largest := int64(0)
		for _, r := range rs {
			x := float64(r.Bytes) * comm.SentFactor(ops[r.Op], p) // bytes sent
			y := r.TimeUS * 1e-6
			w := 1 / (y * y)
			sw += w
			sx += w * x
			sy += w * y
			sxx += w * x * x
			sxy += w * x * y
			largest = max(largest, r.Bytes)
		}
		fit := Fit{Transport: rs[0].Transport, Op: "fit", Ranks: p, Groups: rs[0].Groups}
		var top []float64
		fastest := math.Inf(1)
		for _, r := range rs {
			if r.Bytes == largest {
				top = append(top, r.BusBW)
			}
			fastest = min(fastest, r.TimeUS)
		}
		fit.LargestBusBW = stats.RoundSig(stats.Median(top), 3)
		den := sw*sxx - sx*sx
		slope := 0.0
		if den > 0 {
			slope = (sw*sxy - sx*sy) / den
		}
		if slope > 0 {
			fit.BusBW = stats.RoundSig(1/slope/1e9, 3)
			fit.LatencyUS = stats.RoundSig(max(0, (sy-slope*sx)/sw)*1e6, 3)
		} else {
			// Times that do not grow with the size (one size, or sizes
			// so small that noise decides): no line to fit. The largest
			// size's bandwidth and the fastest call are the best words.
			fit.BusBW, fit.LatencyUS = fit.LargestBusBW, fastest
		}
		fits = append(fits, fit)
	}
	return fits
}
