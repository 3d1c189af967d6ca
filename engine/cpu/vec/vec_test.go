package vec

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// eachLevel runs f once per implementation this machine can run (the Go
// fallback included), with level switched to it.
func eachLevel(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	saved := level
	defer func() { level = saved }()
	for _, l := range levels() {
		level = l
		t.Run(levelNames[l], f)
	}
}

var (
	inf    = float32(math.Inf(1))
	nan    = float32(math.NaN())
	maxF32 = float32(math.MaxFloat32)
)

// expWant is Exp's contract for x: NaN for a NaN, +0 below ExpFlush,
// +Inf where e^x is past 2¹²⁸ (where even a 2-ulp error rounds to +Inf),
// and otherwise e^x within a few float32 ulps, at least 2⁻¹²⁶. It returns
// e^x exactly (in float64) with ulps true where the result is measured in
// ulps of it, or with ulps false the value the result must be.
func expWant(x float32) (want float64, ulps bool) {
	switch {
	case x != x:
		return math.NaN(), false
	case x < ExpFlush:
		return 0, false
	}
	want = math.Exp(float64(x))
	if want > 0x1p128 {
		return math.Inf(1), false
	}
	return want, true
}

// sweepExp checks Exp over every stride-th float32 bit pattern (all of
// them with stride 1), in chunks, against its contract (expWant), within
// maxULP ulps where the result is a rounded e^x, and returns the largest
// ulp error and where it occurred.
func sweepExp(t *testing.T, stride uint64, maxULP float64) (worst float64, at float32) {
	const chunk = 1 << 14
	src := make([]float32, 0, chunk)
	dst := make([]float32, chunk)
	var xs, got, nanGot, nanWant, exactGot, exactWant []float32
	var want []float64
	flush := func() {
		Exp(dst, src)
		xs, got, want = xs[:0], got[:0], want[:0]
		nanGot, nanWant, exactGot, exactWant = nanGot[:0], nanWant[:0], exactGot[:0], exactWant[:0]
		for i, x := range src {
			w, ulps := expWant(x)
			switch {
			case ulps:
				if !(dst[i] >= 0x1p-126) {
					t.Fatalf("Exp(%g) = %g, want at least 2⁻¹²⁶", x, dst[i])
				}
				xs, got, want = append(xs, x), append(got, dst[i]), append(want, w)
			case w != w:
				nanGot, nanWant = append(nanGot, dst[i]), append(nanWant, nan)
			default:
				exactGot, exactWant = append(exactGot, dst[i]), append(exactWant, float32(w))
			}
		}
		if len(want) > 0 {
			d, err := numtest.MeasureULP(got, want)
			if err != nil {
				t.Fatalf("Exp of %d inputs from %g: %v", len(xs), xs[0], err)
			}
			if err := numtest.CloseULP(got, want, maxULP); err != nil {
				t.Fatalf("Exp(%g): %v", xs[d.Worst], err)
			}
			if d.Max > worst {
				worst, at = d.Max, xs[d.Worst]
			}
		}
		if len(nanWant) > 0 {
			if err := numtest.Close(nanGot, nanWant, numtest.Tol{NonFinite: true}); err != nil {
				t.Fatalf("Exp of NaN inputs, want NaN: %v", err)
			}
		}
		if len(exactWant) > 0 {
			// +0 (flushed below ExpFlush) and +Inf, bit for bit.
			if err := numtest.Equal(exactGot, exactWant); err != nil {
				t.Fatalf("Exp of inputs that flush to +0 or overflow to +Inf: %v", err)
			}
		}
		src = src[:0]
	}
	for bits := uint64(0); bits < 1<<32; bits += stride {
		src = append(src, math.Float32frombits(uint32(bits)))
		if len(src) == chunk {
			flush()
		}
	}
	flush()
	return worst, at
}

// TestExpAccuracy measures Exp against math.Exp over a dense sweep of all
// float32 values (every 251st bit pattern, 17 million inputs; set
// VEC_FULL_SWEEP=1 for all 2³² of them). The bound tested is the 2 ulp
// promised; the sweep reports the actual maximum.
func TestExpAccuracy(t *testing.T) {
	stride := uint64(251)
	if os.Getenv("VEC_FULL_SWEEP") != "" {
		stride = 1
	} else if testing.Short() {
		stride = 4099
	}
	eachLevel(t, func(t *testing.T) {
		worst, at := sweepExp(t, stride, 2)
		t.Logf("%s: max error %.4f ulp (at x = %g) over every %d-th float32", Impl(), worst, at, stride)
	})
}

func TestExpSpecialValues(t *testing.T) {
	below := math.Nextafter32(ExpFlush, float32(math.Inf(-1)))
	cases := []struct {
		x, want float32
	}{
		{0, 1},
		{float32(math.Copysign(0, -1)), 1},
		{math.SmallestNonzeroFloat32, 1},
		{-math.SmallestNonzeroFloat32, 1},
		{1, math.E},
		{inf, inf},
		{float32(math.Inf(-1)), 0},
		{maxF32, inf},
		{-maxF32, 0},
		{1e30, inf},
		{-1e30, 0},
		{88.72283, 3.40279852e+38}, // the largest finite result
		{88.72284, inf},
		{89, inf},
		{100, inf},
		{-100, 0},
		{-103.98, 0},
		{below, 0},
	}
	eachLevel(t, func(t *testing.T) {
		for _, c := range cases {
			got := make([]float32, 1)
			Exp(got, []float32{c.x})
			// Within an ulp of a finite, nonzero result; +0 and +Inf bit
			// for bit.
			err := numtest.Equal(got, []float32{c.want})
			if !math.IsInf(float64(c.want), 0) && c.want != 0 {
				err = numtest.CloseULP(got, []float32{c.want}, 1)
			}
			if err != nil {
				t.Errorf("Exp(%g): %v", c.x, err)
			}
		}
		got := make([]float32, 3)
		Exp(got, []float32{nan, float32(math.Float32frombits(0xffc00001)), ExpFlush})
		if err := numtest.Close(got[:2], []float32{nan, nan}, numtest.Tol{NonFinite: true}); err != nil {
			t.Errorf("Exp(NaN), want NaN: %v", err)
		}
		if !(got[2] >= 0x1p-126 && got[2] <= 0x1.0001p-126) {
			t.Errorf("Exp(ExpFlush) = %g, want 2⁻¹²⁶ (the smallest normal)", got[2])
		}
	})
}

// expModel is the assembly's algorithm written out in Go, with exactly
// rounded float32 FMAs: the assembly must match it bit for bit.
func expModel(x float32) float32 {
	if x < ExpFlush {
		return 0
	}
	xc := x
	if 89 < x {
		xc = 89
	}
	const magic = 0x1.8p23
	ln2hi := float32(math.Ln2)
	ln2lo := float32(math.Ln2 - float64(ln2hi))
	t := fma32(xc, float32(math.Log2E), magic)
	n := t - magic
	r := fma32(n, -ln2hi, xc)
	r = fma32(n, -ln2lo, r)
	p := math.Float32frombits(0x3ab61a88)
	for _, c := range []uint32{0x3c092384, 0x3d2aab1c, 0x3e2aaa3f, 0x3effffff, 0x3f800000, 0x3f800000} {
		p = fma32(p, r, math.Float32frombits(c))
	}
	if x != x {
		return x
	}
	// One rounding of p·2ⁿ: the first factor is exact.
	ni := int(n)
	n1 := ni >> 1
	return p * float32(math.Ldexp(1, n1)) * float32(math.Ldexp(1, ni-n1))
}

// fma32 is a·b + c rounded once to float32: the product is exact in
// float64, the float64 sum is made round-to-odd, which a second rounding
// to float32 then turns into the correctly rounded result.
func fma32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	cc := float64(c)
	s := p + cc
	bb := s - p
	if e := (p - (s - bb)) + (cc - bb); e != 0 {
		bits := math.Float64bits(s)
		if bits&1 == 0 {
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

// TestExpMatchesModel checks the assembly bit for bit against expModel,
// so that AVX-512 and AVX2 compute the same function and the function
// documented.
func TestExpMatchesModel(t *testing.T) {
	if len(levels()) == 1 {
		t.Skip("no assembly in this build")
	}
	var src []float32
	for bits := uint64(0); bits < 1<<32; bits += 2003 {
		src = append(src, math.Float32frombits(uint32(bits)))
	}
	// The model's numbers bit for bit; where it gives NaN, any NaN.
	var num, nans []int
	var want, nanWant []float32
	for i, x := range src {
		if w := expModel(x); w == w {
			num, want = append(num, i), append(want, w)
		} else {
			nans, nanWant = append(nans, i), append(nanWant, w)
		}
	}
	dst := make([]float32, len(src))
	eachLevel(t, func(t *testing.T) {
		if level == levelGo {
			t.Skip("the Go path rounds math.Exp instead")
		}
		Exp(dst, src)
		got, gotNaN := make([]float32, len(num)), make([]float32, len(nans))
		for j, i := range num {
			got[j] = dst[i]
		}
		for j, i := range nans {
			gotNaN[j] = dst[i]
		}
		if err := numtest.Equal(got, want); err != nil {
			t.Fatalf("Exp of every 2003rd bit pattern (not NaN) against the model: %v", err)
		}
		if err := numtest.Close(gotNaN, nanWant, numtest.Tol{NonFinite: true}); err != nil {
			t.Fatalf("Exp of every 2003rd bit pattern that is NaN: %v", err)
		}
	})
}

// randInputs returns n values spread over [−lo, hi] with some special
// values mixed in.
func randInputs(rng *rand.Rand, n int, lo, hi float32) []float32 {
	specials := []float32{0, inf, -inf, nan, 88.8, -88.8, 87.4, -87.4, 30, -30, 100, -100}
	x := make([]float32, n)
	for i := range x {
		if rng.IntN(8) == 0 {
			x[i] = specials[rng.IntN(len(specials))]
		} else {
			x[i] = lo + (hi-lo)*rng.Float32()
		}
	}
	return x
}

// TestExpTails checks lengths 0..67 at unaligned offsets: every element
// gets the same bits as in one long call, whether it falls in the vector
// body or in the padded tail, and dst past the length is not touched.
func TestExpTails(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	src := randInputs(rng, 200, -110, 110)
	eachLevel(t, func(t *testing.T) {
		whole := make([]float32, len(src))
		Exp(whole, src)
		for n := 0; n <= 67; n++ {
			for off := 0; off < 4; off++ {
				dst := make([]float32, 200)
				for i := range dst {
					dst[i] = -7
				}
				Exp(dst[off:], src[off:off+n])
				want := make([]float32, len(dst))
				for i := range want {
					want[i] = -7
					if i >= off && i < off+n {
						want[i] = whole[i]
					}
				}
				if err := numtest.Equal(dst, want); err != nil {
					t.Fatalf("n=%d off=%d: %v", n, off, err)
				}
			}
		}
		// In place.
		x := append([]float32(nil), src[3:70]...)
		Exp(x, x)
		if err := numtest.Equal(x, whole[3:70]); err != nil {
			t.Fatalf("in place: %v", err)
		}
	})
}

func TestExpSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	eachLevel(t, func(t *testing.T) {
		for _, n := range append(seq(0, 67), 100, 1000, 32000) {
			for off := 0; off < 3; off++ {
				src := make([]float32, n)
				for i := range src {
					src[i] = -30 + 35*rng.Float32()
				}
				const shift = 2.5
				dst := make([]float32, n+1)
				dst[n] = -7
				sum := ExpSum(dst, src, shift)
				// The same exponentials as Exp of the differences, and the
				// documented lane order.
				diff := make([]float32, n)
				for i, x := range src {
					diff[i] = x - shift
				}
				want := make([]float32, n)
				Exp(want, diff)
				var lanes [16]float64
				exact := 0.0
				for i, e := range want {
					lanes[i%16] += float64(e)
					exact += math.Exp(float64(src[i]) - shift)
				}
				// dst[n], past the length, keeps its −7.
				if err := numtest.Equal(dst, append(want, -7)); err != nil {
					t.Fatalf("n=%d: dst against Exp of the differences: %v", n, err)
				}
				if err := numtest.Scalar(sum, sumLanes(&lanes), numtest.Tol{}); err != nil {
					t.Fatalf("n=%d: sum against the lane order: %v", n, err)
				}
				if err := numtest.Scalar(sum, exact, numtest.Tol{Rel: 2e-7}); err != nil {
					t.Fatalf("n=%d: sum against the exact sum: %v", n, err)
				}
			}
		}
		// In place, and a flushed tail.
		x := []float32{0, -200, 1, -90, 2}
		sum := ExpSum(x, x, 2)
		if err := numtest.Scalar(sum, math.Exp(-2)+math.Exp(-1)+1, numtest.Tol{Rel: 1e-7}); err != nil {
			t.Errorf("ExpSum in place: %v: sum: %v", x, err)
		}
		if err := numtest.Equal([]float32{x[1], x[3], x[4]}, []float32{0, 0, 1}); err != nil {
			t.Errorf("ExpSum in place: %v: elements 1, 3 and 4: %v", x, err)
		}
	})
}

func seq(lo, hi int) []int {
	var s []int
	for i := lo; i <= hi; i++ {
		s = append(s, i)
	}
	return s
}

// TestSwiGLU checks SwiGLU and its backward against float64 references,
// including saturated gates, and their consistency over tails, offsets
// and aliasing.
func TestSwiGLU(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	const n = 300
	gate := randInputs(rng, n, -12, 12)
	for i := range gate {
		if gate[i] != gate[i] || math.IsInf(float64(gate[i]), 0) {
			gate[i] = 3
		}
	}
	gate[0], gate[1], gate[2], gate[3], gate[4], gate[5] = 0, -1.2785, 1e-30, -1e-30, 1e4, -1e4
	up, dOut := randInputs(rng, n, -3, 3), randInputs(rng, n, -3, 3)
	for i := range up {
		if up[i] != up[i] || math.IsInf(float64(up[i]), 0) {
			up[i] = 1
		}
		if dOut[i] != dOut[i] || math.IsInf(float64(dOut[i]), 0) {
			dOut[i] = -1
		}
	}
	eachLevel(t, func(t *testing.T) {
		out := make([]float32, n)
		dg, du := make([]float32, n), make([]float32, n)
		SwiGLU(out, gate, up)
		SwiGLUBackward(dg, du, dOut, gate, up)
		// Within 6 float32 ulps of the result, or 1e-35 absolutely: below
		// a gate of −88.7, e^−g overflows and σ is flushed to zero where
		// it would be a subnormal float32.
		const ulps, floor = 6 * 0x1p-24, 1e-35
		wantOut, wantDU := make([]float64, n), make([]float64, n)
		for i := range gate {
			g, u, d := float64(gate[i]), float64(up[i]), float64(dOut[i])
			s := 1 / (1 + math.Exp(-g))
			wantOut[i], wantDU[i] = g*s*u, d*g*s
			// The derivative's factor 1 + g(1−s) cancels near g = −1.28:
			// bound the error by the terms' size, not the result's.
			wantG := d * u * s * (1 + g*(1-s))
			scale := math.Abs(d*u*s) * (1 + math.Abs(g*(1-s)))
			if err := numtest.Scalar(float64(dg[i]), wantG, numtest.Tol{Abs: ulps*scale + floor}); err != nil {
				t.Fatalf("SwiGLUBackward dGate(gate %g): %v", gate[i], err)
			}
		}
		if err := numtest.Close(out, wantOut, numtest.Tol{Rel: ulps, Abs: floor}); err != nil {
			t.Fatalf("SwiGLU: %v", err)
		}
		if err := numtest.Close(du, wantDU, numtest.Tol{Rel: ulps, Abs: floor}); err != nil {
			t.Fatalf("SwiGLUBackward dUp: %v", err)
		}
		for m := 0; m <= 67; m++ {
			for off := 0; off < 3; off++ {
				o := make([]float32, m)
				SwiGLU(o, gate[off:off+m], up[off:off+m])
				g2, u2 := make([]float32, m), make([]float32, m)
				SwiGLUBackward(g2, u2, dOut[off:off+m], gate[off:off+m], up[off:off+m])
				if m == 0 {
					continue // nothing to compare
				}
				for _, c := range []struct {
					name      string
					got, want []float32
				}{{"SwiGLU", o, out[off : off+m]}, {"dGate", g2, dg[off : off+m]}, {"dUp", u2, du[off : off+m]}} {
					if err := numtest.Equal(c.got, c.want); err != nil {
						t.Fatalf("n=%d off=%d: %s differs from the whole call: %v", m, off, c.name, err)
					}
				}
			}
		}
		// Aliased: out = gate; dGate = gate and dUp = dOut.
		a := append([]float32(nil), gate...)
		SwiGLU(a, a, up)
		b, c := append([]float32(nil), gate...), append([]float32(nil), dOut...)
		SwiGLUBackward(b, c, c, b, up)
		for _, r := range []struct {
			name      string
			got, want []float32
		}{{"SwiGLU", a, out}, {"dGate", b, dg}, {"dUp", c, du}} {
			if err := numtest.Equal(r.got, r.want); err != nil {
				t.Fatalf("aliased: %s differs: %v", r.name, err)
			}
		}
	})
}

func TestSwiGLUSaturated(t *testing.T) {
	gate := []float32{30, -30, 100, -100, 88, -88, 89, -89, 1e30, -1e30}
	up := make([]float32, len(gate))
	d := make([]float32, len(gate))
	for i := range up {
		up[i], d[i] = 1.5, -0.5
	}
	eachLevel(t, func(t *testing.T) {
		out, dg, du := make([]float32, len(gate)), make([]float32, len(gate)), make([]float32, len(gate))
		SwiGLU(out, gate, up)
		SwiGLUBackward(dg, du, d, gate, up)
		for i, g := range gate {
			x := float64(g)
			s := 1 / (1 + math.Exp(-x))
			for _, c := range []struct {
				what      string
				got, want float64
			}{
				{"SwiGLU", float64(out[i]), x * s * 1.5},
				{"dUp", float64(du[i]), -0.5 * x * s},
				{"dGate", float64(dg[i]), -0.75 * s * (1 + x*(1-s))},
			} {
				if err := numtest.Scalar(c.got, c.want, numtest.Tol{Rel: 1e-6, Abs: 1e-30}); err != nil {
					t.Errorf("%s(gate %g): %v", c.what, g, err)
				}
			}
		}
	})
}

// dotRef is Dot's documented order in plain Go.
func dotRef(a, b []float32) float32 {
	var lanes [16]float32
	for i := range a {
		lanes[i%16] += float32(a[i] * b[i])
	}
	for w := 8; w >= 1; w /= 2 {
		for k := range w {
			lanes[k] += lanes[k+w]
		}
	}
	return lanes[0]
}

func TestDot(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	a, b := make([]float32, 5000), make([]float32, 5000)
	for i := range a {
		a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
	}
	eachLevel(t, func(t *testing.T) {
		for _, n := range append(seq(0, 67), 64, 128, 1000, 4099) {
			for off := 0; off < 3; off++ {
				x, y := a[off:off+n], b[1+off:1+off+n]
				got := Dot(x, y)
				if err := numtest.Equal([]float32{got}, []float32{dotRef(x, y)}); err != nil {
					t.Fatalf("n=%d off=%d: Dot against the documented order: %v", n, off, err)
				}
				var exact, mag float64
				for i := range x {
					exact += float64(x[i]) * float64(y[i])
					mag += math.Abs(float64(x[i]) * float64(y[i]))
				}
				if err := numtest.Scalar(float64(got), exact, numtest.Tol{Abs: 1e-6 * mag}); err != nil {
					t.Fatalf("n=%d: Dot against the exact sum: %v", n, err)
				}
			}
		}
		if err := numtest.Scalar(float64(Dot([]float32{1, nan}, []float32{1, 1})), math.NaN(), numtest.Tol{NonFinite: true}); err != nil {
			t.Errorf("Dot with NaN, want NaN: %v", err)
		}
	})
}

func TestAxpyScaleSubMul(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	x, y, p := randInputs(rng, 100, -5, 5), randInputs(rng, 100, -5, 5), randInputs(rng, 100, 0, 1)
	const alpha, s = 0.37, 0.81
	eachLevel(t, func(t *testing.T) {
		for n := 0; n <= 67; n++ {
			for off := 0; off < 3; off++ {
				yy := append([]float32(nil), y...)
				Axpy(alpha, x[off:off+n], yy[off:])
				xx := append([]float32(nil), x...)
				Scale(alpha, xx[off:off+n])
				dd := append([]float32(nil), y...)
				SubMul(dd[off:off+n], s, p[off:])
				wy, wx, wd := append([]float32(nil), y...), append([]float32(nil), x...), append([]float32(nil), y...)
				for i := off; i < off+n; i++ {
					wy[i] = y[i] + float32(alpha*x[i])
					wx[i] = x[i] * alpha
					wd[i] = (y[i] - s) * p[i]
				}
				for _, c := range []struct {
					name      string
					got, want []float32
				}{{"Axpy", yy, wy}, {"Scale", xx, wx}, {"SubMul", dd, wd}} {
					if err := numtest.Equal(c.got, c.want); err != nil {
						t.Fatalf("n=%d off=%d: %s: %v", n, off, c.name, err)
					}
				}
			}
		}
	})
}

func TestMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	eachLevel(t, func(t *testing.T) {
		if err := numtest.Scalar(float64(Max(nil)), math.Inf(-1), numtest.Tol{NonFinite: true}); err != nil {
			t.Errorf("Max(empty), want -Inf: %v", err)
		}
		for _, n := range append(seq(1, 67), 100, 1000, 32000) {
			x := make([]float32, n+2)
			for i := range x {
				x[i] = float32(rng.NormFloat64() * 10)
			}
			for off := 0; off < 2; off++ {
				v := x[off : off+n]
				want := v[0]
				for _, e := range v {
					want = max(want, e)
				}
				if err := numtest.Scalar(float64(Max(v)), float64(want), numtest.Tol{}); err != nil {
					t.Fatalf("n=%d: Max: %v", n, err)
				}
				for _, at := range []int{0, n / 2, n - 1} {
					saved := v[at]
					for _, special := range []float32{nan, inf} {
						v[at] = special
						if err := numtest.Scalar(float64(Max(v)), float64(special), numtest.Tol{NonFinite: true}); err != nil {
							t.Fatalf("n=%d: Max with %g at %d: %v", n, special, at, err)
						}
					}
					v[at] = saved
				}
			}
		}
		allNegInf := []float32{-inf, -inf, -inf}
		if err := numtest.Scalar(float64(Max(allNegInf)), math.Inf(-1), numtest.Tol{NonFinite: true}); err != nil {
			t.Errorf("Max(-Inf…): %v", err)
		}
	})
}

// TestLevelsAgree checks that Dot, Axpy-style and Exp-based functions of
// the assembly levels agree bit for bit with each other.
func TestLevelsAgree(t *testing.T) {
	ls := levels()
	if len(ls) < 3 {
		t.Skip("needs both AVX-512 and AVX2")
	}
	rng := rand.New(rand.NewPCG(7, 7))
	g, u, d := randInputs(rng, 4099, -100, 100), randInputs(rng, 4099, -3, 3), randInputs(rng, 4099, -3, 3)
	saved := level
	defer func() { level = saved }()
	run := func(l int) [][]float32 {
		level = l
		e, o, dg, du := make([]float32, len(g)), make([]float32, len(g)), make([]float32, len(g)), make([]float32, len(g))
		Exp(e, g)
		s := make([]float32, len(g))
		sum := ExpSum(s, u, 1)
		SwiGLU(o, g, u)
		SwiGLUBackward(dg, du, d, g, u)
		return [][]float32{e, s, o, dg, du, {float32(sum), Dot(g[:4001], u[:4001]), Max(u)}}
	}
	a, b := run(levelAVX512), run(levelAVX2)
	for k := range a {
		if err := numtest.Equal(b[k], a[k]); err != nil {
			t.Fatalf("result %d: AVX2 against AVX-512: %v", k, err)
		}
	}
}
