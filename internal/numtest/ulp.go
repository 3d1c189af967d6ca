package numtest

import (
	"fmt"
	"math"
)

// ULPDiff measures how far got is from want in float32 ulps: units of the
// float32 spacing at want (see ULP).
type ULPDiff struct {
	Max float64 // max_i |got_i − want_i| / ULP(want_i)
	// Worst is the index of the element with the largest error in ulps,
	// Got and Want its values.
	Worst     int
	Got, Want float64
}

// ULP returns the spacing of float32 values at w, the unit of CloseULP:
// 2^(e−24) for |w| in [2^(e−1), 2^e), and the subnormal spacing 2⁻¹⁴⁹ for
// |w| below 2⁻¹²⁶ (zero included). w is taken exactly, so that a float64
// reference is measured where it lies, not where it rounds.
func ULP(w float64) float64 {
	_, e := math.Frexp(w) // w = f·2^e, f in [0.5, 1)
	if w == 0 || e < -125 {
		e = -125
	}
	return math.Ldexp(1, e-24)
}

// CloseULP checks that every got_i is within maxULP float32 ulps of want_i
// (|got_i − want_i| ≤ maxULP·ULP(want_i)), the measure of a float32
// function against its exact value: want is the exact result (a float64
// reference), not its float32 rounding. It refuses what Close refuses: nil,
// empty or unequal slices, and non-finite values on either side. It
// reports the element with the largest error.
func CloseULP[G, W Float](got []G, want []W, maxULP float64) error {
	got, tag := mutate(got, want)
	d, err := measureULP(got, want)
	if err != nil {
		return tagged(err, tag)
	}
	if d.Max <= maxULP {
		return nil
	}
	return tagged(fmt.Errorf("element %d of %d: got %.9g, want %.9g: %.4g ulp exceeds %.4g ulp (float32 ulp at want %.3g)",
		d.Worst, len(want), d.Got, d.Want, d.Max, maxULP, ULP(d.Want)), tag)
}

// MeasureULP returns the error of got in float32 ulps of want, for a
// caller that reports it. It refuses what CloseULP refuses.
func MeasureULP[G, W Float](got []G, want []W) (ULPDiff, error) {
	got, tag := mutate(got, want)
	d, err := measureULP(got, want)
	return d, tagged(err, tag)
}

func measureULP[G, W Float](got []G, want []W) (ULPDiff, error) {
	if err := shapes(got, want); err != nil {
		return ULPDiff{}, err
	}
	if err := finite(got, want, false); err != nil {
		return ULPDiff{}, err
	}
	var d ULPDiff
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		e := math.Abs(g-w) / ULP(w)
		if i == 0 || e > d.Max {
			d.Max, d.Worst, d.Got, d.Want = e, i, g, w
		}
	}
	return d, nil
}
