// Package numtest is the one home of numeric comparison in memtrain's tests:
// every check that a computed value is close to a reference — a gradient
// against PyTorch's, one rank's against a grid's, bf16 against float32, the
// CUDA stand-in against the CPU — goes through it, so that all of them
// refuse the same things:
//
//   - a NaN or an infinity on either side (unless Tol.NonFinite asks that
//     they match), because |NaN − x| > tol is false and a NaN would pass;
//   - a nil or empty slice, because a comparison of nothing proves nothing;
//   - slices of different lengths, because a loop over one of them would
//     ignore the other's missing or extra values;
//   - two sets of named tensors that do not hold the same names.
//
// Failures name the worst element: its index, both values and the bound it
// exceeded. The tolerance is stated at the call, as a Tol or a number.
//
// The functions return errors rather than taking a testing.TB, so that a
// caller adds its own context (`t.Errorf("%s gradient: %v", name, err)`) and
// so that the package's own tests can check what it refuses.
//
// # Mutation
//
// A comparison that cannot fail proves nothing, so the helpers can be made
// to see wrong numbers: with MEMTRAIN_NUMTEST_MUTATE set, every comparison
// first corrupts its got side (a copy; the caller's values are untouched):
//
//   - element: the middle element moved far outside any tolerance (by four
//     times the reference's L2 norm plus its largest magnitude plus one);
//   - nan: the middle element replaced by NaN;
//   - drop: the last element dropped (a short slice), one named tensor
//     dropped from a set (Each), a scalar replaced by NaN (a missing value).
//
// scripts/mutation-check.sh runs the golden, grid, bf16, LoRA and stand-in
// tests under each mutation and requires each to fail, so that a helper or
// a test that stops biting is noticed.
package numtest

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"unsafe"
)

// Float is the element type of the slices the package compares.
type Float interface{ ~float32 | ~float64 }

// Tol is how far a value may be from its reference. Element i passes when
//
//	|got_i − want_i| ≤ Abs + Rel·|want_i| + Max·max(max_j |want_j|, Floor)
//
// Rel bounds each element by its own size (one rounding of each result),
// Max by the largest reference magnitude (a float32 computation's error,
// which does not shrink with a small element), Abs absolutely. Floor keeps
// Max meaningful when the reference cancels to nearly zero. The zero Tol
// demands equal values (−0 equals +0; Equal compares bits).
//
// NonFinite allows non-finite values, which must then match: NaN where the
// reference is NaN, and the same infinity.
type Tol struct {
	Abs, Rel, Max, Floor float64
	NonFinite            bool
}

func (t Tol) String() string {
	var parts []string
	if t.Abs != 0 {
		parts = append(parts, fmt.Sprintf("%.3g", t.Abs))
	}
	if t.Rel != 0 {
		parts = append(parts, fmt.Sprintf("%.3g·|want_i|", t.Rel))
	}
	if t.Max != 0 {
		if t.Floor != 0 {
			parts = append(parts, fmt.Sprintf("%.3g·max(max|want|, %.3g)", t.Max, t.Floor))
		} else {
			parts = append(parts, fmt.Sprintf("%.3g·max|want|", t.Max))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " + ")
}

// Close checks got against want element by element within tol. It reports
// the element that exceeds its bound by the largest factor, a non-finite
// one first.
func Close[G, W Float](got []G, want []W, tol Tol) error {
	got, tag := mutate(got, want)
	return tagged(closeTo(got, want, tol), tag)
}

func closeTo[G, W Float](got []G, want []W, tol Tol) error {
	if err := shapes(got, want); err != nil {
		return err
	}
	if err := finite(got, want, tol.NonFinite); err != nil {
		return err
	}
	scale := tol.Floor
	for _, w := range want {
		if a := math.Abs(float64(w)); !math.IsInf(a, 1) && a > scale {
			scale = a
		}
	}
	x := excess{at: -1}
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if tol.NonFinite && (isNonFinite(g) || isNonFinite(w)) {
			continue // matched by finite
		}
		x.add(i, math.Abs(g-w), tol.Abs+tol.Rel*math.Abs(w)+tol.Max*scale)
	}
	if x.at < 0 {
		return nil
	}
	g, w := float64(got[x.at]), float64(want[x.at])
	return fmt.Errorf("element %d of %d: got %.9g, want %.9g: |Δ| %.3g exceeds %.3g (%v, max|want| %.3g)",
		x.at, len(got), g, w, math.Abs(g-w), x.bound, tol, scale)
}

// excess tracks the element that exceeds its bound by the largest factor
// (at −1 while none does).
type excess struct {
	ratio, bound float64
	at           int
}

// add considers element i, off by e where b is allowed.
func (x *excess) add(i int, e, b float64) {
	if e <= b {
		return
	}
	r := math.Inf(1)
	if b > 0 {
		r = e / b
	}
	if x.at < 0 || r > x.ratio {
		x.ratio, x.bound, x.at = r, b, i
	}
}

// CloseBounds checks |got_i − want_i| ≤ bound_i for every element, for an
// error analysis that bounds each element on its own (a GEMM's
// γ_k·Σ|a||b|). A bound must be finite and not negative; it reports the
// element that exceeds its bound by the largest factor.
func CloseBounds[G, W, B Float](got []G, want []W, bound []B) error {
	got, tag := mutate(got, want)
	if err := shapes(got, want); err != nil {
		return tagged(err, tag)
	}
	if len(bound) != len(want) {
		return tagged(fmt.Errorf("%d bounds for %d values", len(bound), len(want)), tag)
	}
	if err := finite(got, want, false); err != nil {
		return tagged(err, tag)
	}
	x := excess{at: -1}
	for i := range got {
		b := float64(bound[i])
		if !(b >= 0) || math.IsInf(b, 0) {
			return tagged(fmt.Errorf("element %d: bound %g, want a finite bound ≥ 0", i, b), tag)
		}
		x.add(i, math.Abs(float64(got[i])-float64(want[i])), b)
	}
	if x.at < 0 {
		return nil
	}
	g, w := float64(got[x.at]), float64(want[x.at])
	return tagged(fmt.Errorf("element %d of %d: got %.9g, want %.9g: |Δ| %.3g exceeds its bound %.3g",
		x.at, len(got), g, w, math.Abs(g-w), x.bound), tag)
}

// CloseL2 checks the relative L2 error ‖got − want‖₂ / ‖want‖₂ ≤ tol, the
// measure of a whole gradient: a reference of norm zero needs got zero.
func CloseL2[G, W Float](got []G, want []W, tol float64) error {
	got, tag := mutate(got, want)
	d, err := measure(got, want)
	if err != nil {
		return tagged(err, tag)
	}
	if d.L2 <= tol {
		return nil
	}
	return tagged(fmt.Errorf("relative L2 error %.3g exceeds %.3g (%d elements; worst element %d: got %.9g, want %.9g)",
		d.L2, tol, len(want), d.Worst, d.Got, d.Want), tag)
}

// CloseMax checks max_i |got_i − want_i| / max_i |want_i| ≤ tol, the error of
// the worst element relative to the largest reference magnitude: Close with
// Tol{Max: tol}.
func CloseMax[G, W Float](got []G, want []W, tol float64) error {
	return Close(got, want, Tol{Max: tol})
}

// Scalar checks one value against its reference within tol (the slice of
// one: Rel and Max both scale by |want|).
func Scalar(got, want float64, tol Tol) error {
	m := mode()
	switch m {
	case "element":
		got = want + 4*(math.Abs(want)+1)
	case "nan", "drop":
		got = math.NaN()
	}
	if err := closeTo([]float64{got}, []float64{want}, tol); err != nil {
		msg := strings.TrimPrefix(err.Error(), "element 0 of 1: ")
		return tagged(errors.New(msg), m)
	}
	return nil
}

// Equal checks got against want bit for bit (a NaN equals only the same
// NaN; −0 is not +0), naming the first element that differs.
func Equal[T Float](got, want []T) error {
	got, tag := mutate(got, want)
	if err := shapes(got, want); err != nil {
		return tagged(err, tag)
	}
	for i := range got {
		if bits(got[i]) != bits(want[i]) {
			return tagged(fmt.Errorf("element %d of %d: got %.9g (%#x), want %.9g (%#x)",
				i, len(got), float64(got[i]), bits(got[i]), float64(want[i]), bits(want[i])), tag)
		}
	}
	return nil
}

// Diff measures how far got is from want.
type Diff struct {
	MaxAbs float64 // max_i |got_i − want_i|
	MaxRel float64 // MaxAbs / max_i |want_i| (MaxAbs when the reference is zero)
	L2     float64 // ‖got − want‖₂ / ‖want‖₂ (‖got − want‖₂ when the reference is zero)
	// Worst is the index of the element with the largest |got_i − want_i|,
	// Got and Want its values.
	Worst     int
	Got, Want float64
}

// Measure returns the difference of got from want, for a caller that
// reports or bounds it itself. It refuses what Close refuses: nil, empty
// or unequal slices, and non-finite values on either side.
func Measure[G, W Float](got []G, want []W) (Diff, error) {
	got, tag := mutate(got, want)
	d, err := measure(got, want)
	return d, tagged(err, tag)
}

func measure[G, W Float](got []G, want []W) (Diff, error) {
	if err := shapes(got, want); err != nil {
		return Diff{}, err
	}
	if err := finite(got, want, false); err != nil {
		return Diff{}, err
	}
	var d Diff
	var num, den, scale float64
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		e := math.Abs(g - w)
		if i == 0 || e > d.MaxAbs {
			d.MaxAbs, d.Worst, d.Got, d.Want = e, i, g, w
		}
		num += e * e
		den += w * w
		scale = math.Max(scale, math.Abs(w))
	}
	d.MaxRel, d.L2 = d.MaxAbs, math.Sqrt(num)
	if scale > 0 {
		d.MaxRel = d.MaxAbs / scale
	}
	if den > 0 {
		d.L2 = math.Sqrt(num / den)
	}
	return d, nil
}

// Each compares two sets of named tensors with cmp: they must hold the same
// names, and every pair must pass. Errors name their tensor, in name order.
func Each[G, W Float](got map[string][]G, want map[string][]W, cmp func(got []G, want []W) error) error {
	if mode() == "drop" && len(got) > 0 {
		got = maps.Clone(got)
		delete(got, slices.Sorted(maps.Keys(got))[0])
	}
	if len(want) == 0 {
		return tagged(errors.New("no tensors to compare"), mode())
	}
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[n]
		if !ok {
			errs = append(errs, fmt.Errorf("tensor %q missing", n))
			continue
		}
		if err := cmp(g, want[n]); err != nil {
			errs = append(errs, fmt.Errorf("tensor %q: %w", n, err))
		}
	}
	for _, n := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[n]; !ok {
			errs = append(errs, fmt.Errorf("tensor %q not in the reference", n))
		}
	}
	return tagged(errors.Join(errs...), mode())
}

// EachClose is Each with Close at tol.
func EachClose[G, W Float](got map[string][]G, want map[string][]W, tol Tol) error {
	return Each(got, want, func(g []G, w []W) error { return Close(g, w, tol) })
}

// EachL2 is Each with CloseL2 at tol.
func EachL2[G, W Float](got map[string][]G, want map[string][]W, tol float64) error {
	return Each(got, want, func(g []G, w []W) error { return CloseL2(g, w, tol) })
}

// shapes refuses nil, empty and unequal slices.
func shapes[G, W Float](got []G, want []W) error {
	switch {
	case got == nil && want == nil:
		return errors.New("both slices are nil")
	case got == nil:
		return fmt.Errorf("got is nil, want %d values", len(want))
	case want == nil:
		return fmt.Errorf("want is nil, got %d values", len(got))
	case len(got) != len(want):
		return fmt.Errorf("got %d values, want %d", len(got), len(want))
	case len(want) == 0:
		return errors.New("no values to compare")
	}
	return nil
}

// finite refuses a NaN or an infinity on either side, or with nonFinite
// one that the other side does not match.
func finite[G, W Float](got []G, want []W, nonFinite bool) error {
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if !isNonFinite(g) && !isNonFinite(w) {
			continue
		}
		if nonFinite && (math.IsNaN(g) && math.IsNaN(w) || g == w) {
			continue
		}
		return fmt.Errorf("element %d of %d: got %.9g, want %.9g: not finite", i, len(got), g, w)
	}
	return nil
}

func isNonFinite(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }

// bits returns x's bit pattern at its own width.
func bits[T Float](x T) uint64 {
	if unsafe.Sizeof(x) == 4 {
		return uint64(math.Float32bits(float32(x)))
	}
	return math.Float64bits(float64(x))
}

// MutateEnv names the environment variable that switches on a mutation.
const MutateEnv = "MEMTRAIN_NUMTEST_MUTATE"

// Mutations returns the values MutateEnv takes.
func Mutations() []string { return []string{"element", "nan", "drop"} }

// mode returns the mutation switched on, or "". An unknown value panics: a
// misspelt switch must not pass silently as no mutation.
func mode() string {
	m := os.Getenv(MutateEnv)
	if m != "" && !slices.Contains(Mutations(), m) {
		panic(fmt.Sprintf("numtest: %s=%q, want one of %v", MutateEnv, m, Mutations()))
	}
	return m
}

// mutate returns got as the switched-on mutation corrupts it (a copy), and
// the mutation's name.
func mutate[G, W Float](got []G, want []W) ([]G, string) {
	m := mode()
	if m == "" || len(got) == 0 {
		return got, m
	}
	c := slices.Clone(got)
	i := len(c) / 2
	switch m {
	case "element":
		var norm, peak float64
		for _, w := range want {
			norm += float64(w) * float64(w)
			peak = math.Max(peak, math.Abs(float64(w)))
		}
		c[i] += G(4 * (math.Sqrt(norm) + peak + 1))
	case "nan":
		c[i] = G(math.NaN())
	case "drop":
		c = c[:len(c)-1]
	}
	return c, m
}

// tagged marks an error produced under a mutation, so that a failure in
// the mutation check can be told from another.
func tagged(err error, m string) error {
	if err == nil || m == "" {
		return err
	}
	return fmt.Errorf("%w [numtest mutation %s]", err, m)
}
