package vec

import (
	"math"
	"math/rand/v2"
	"os"
	"testing"
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

// ulpErr is |got − want| in units of the float32 spacing at want (want
// exact, in float64). +Inf counts as 2¹²⁸, the float after MaxFloat32.
func ulpErr(got float32, want float64) float64 {
	g := float64(got)
	if math.IsInf(g, 1) {
		g = 0x1p128
	}
	if want == 0 {
		if g == 0 {
			return 0
		}
		return math.Inf(1)
	}
	_, e := math.Frexp(want) // want = f·2^e, f in [0.5, 1)
	e = max(e, -125)         // subnormal spacing below 2⁻¹²⁶
	return math.Abs(g-want) / math.Ldexp(1, e-24)
}

// checkExp checks Exp's contract for one input and result. It returns
// the ulp error where the result is a rounded e^x, and a description of
// the violation if there is one.
func checkExp(x, got float32) (ulps float64, bad string) {
	switch {
	case x != x:
		if got == got {
			return 0, "want NaN"
		}
		return 0, ""
	case x < ExpFlush:
		if got != 0 || math.Signbit(float64(got)) {
			return 0, "want +0 (flushed below ExpFlush)"
		}
		return 0, ""
	}
	want := math.Exp(float64(x))
	if want > 0x1p128 {
		// Past 2¹²⁸ even a 2-ulp error still rounds to +Inf.
		if !math.IsInf(float64(got), 1) {
			return 0, "want +Inf"
		}
		return 0, ""
	}
	if got < 0x1p-126 {
		return 0, "subnormal or zero, want at least 2⁻¹²⁶"
	}
	return ulpErr(got, want), ""
}

// sweepExp checks Exp over every stride-th float32 bit pattern (all of
// them with stride 1), in chunks, and returns the largest ulp error and
// where it occurred.
func sweepExp(t *testing.T, stride uint64) (worst float64, at float32) {
	const chunk = 1 << 14
	src := make([]float32, 0, chunk)
	dst := make([]float32, chunk)
	flush := func() {
		Exp(dst, src)
		for i, x := range src {
			e, bad := checkExp(x, dst[i])
			if bad != "" {
				t.Fatalf("Exp(%g) = %g: %s", x, dst[i], bad)
			}
			if e > worst {
				worst, at = e, x
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
		worst, at := sweepExp(t, stride)
		t.Logf("%s: max error %.4f ulp (at x = %g) over every %d-th float32", Impl(), worst, at, stride)
		if worst > 2 {
			t.Errorf("max error %.3f ulp at x = %g exceeds 2 ulp", worst, at)
		}
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
			ok := got[0] == c.want
			if !math.IsInf(float64(c.want), 0) && c.want != 0 {
				ok = ulpErr(got[0], float64(c.want)) <= 1
			}
			if !ok || math.Signbit(float64(got[0])) {
				t.Errorf("Exp(%g) = %g, want %g", c.x, got[0], c.want)
			}
		}
		got := make([]float32, 3)
		Exp(got, []float32{nan, float32(math.Float32frombits(0xffc00001)), ExpFlush})
		if got[0] == got[0] || got[1] == got[1] {
			t.Errorf("Exp(NaN) = %g, %g, want NaN", got[0], got[1])
		}
		if got[2] < 0x1p-126 || got[2] > 0x1.0001p-126 {
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
	dst := make([]float32, len(src))
	eachLevel(t, func(t *testing.T) {
		if level == levelGo {
			t.Skip("the Go path rounds math.Exp instead")
		}
		Exp(dst, src)
		for i, x := range src {
			want := expModel(x)
			if math.Float32bits(dst[i]) != math.Float32bits(want) && !(want != want && dst[i] != dst[i]) {
				t.Fatalf("Exp(%g) = %g (%#x), the model gives %g (%#x)", x, dst[i], math.Float32bits(dst[i]), want, math.Float32bits(want))
			}
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

func sameBits(a, b float32) bool {
	return math.Float32bits(a) == math.Float32bits(b) || (a != a && b != b)
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
				for i := range dst {
					want := float32(-7)
					if i >= off && i < off+n {
						want = whole[i]
					}
					if !sameBits(dst[i], want) {
						t.Fatalf("n=%d off=%d: dst[%d] = %g, want %g", n, off, i, dst[i], want)
					}
				}
			}
		}
		// In place.
		x := append([]float32(nil), src[3:70]...)
		Exp(x, x)
		for i, v := range x {
			if !sameBits(v, whole[3+i]) {
				t.Fatalf("in place: element %d = %g, want %g", i, v, whole[3+i])
			}
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
					if !sameBits(dst[i], e) {
						t.Fatalf("n=%d: dst[%d] = %g, Exp gives %g", n, i, dst[i], e)
					}
					lanes[i%16] += float64(e)
					exact += math.Exp(float64(src[i]) - shift)
				}
				if dst[n] != -7 {
					t.Fatalf("n=%d: dst[n] overwritten", n)
				}
				if ws := sumLanes(&lanes); ws != sum {
					t.Fatalf("n=%d: sum %v, the lane order gives %v", n, sum, ws)
				}
				if math.Abs(sum-exact) > 2e-7*exact {
					t.Fatalf("n=%d: sum %v, exactly %v", n, sum, exact)
				}
			}
		}
		// In place, and a flushed tail.
		x := []float32{0, -200, 1, -90, 2}
		sum := ExpSum(x, x, 2)
		want := math.Exp(-2) + math.Exp(-1) + 1
		if math.Abs(sum-want) > 1e-7*want || x[1] != 0 || x[3] != 0 || x[4] != 1 {
			t.Errorf("ExpSum in place: %v, sum %v, want sum %v", x, sum, want)
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
		for i := range gate {
			g, u, d := float64(gate[i]), float64(up[i]), float64(dOut[i])
			s := 1 / (1 + math.Exp(-g))
			checkRel(t, "SwiGLU", gate[i], out[i], g*s*u, math.Abs(g*s*u))
			checkRel(t, "SwiGLUBackward dUp", gate[i], du[i], d*g*s, math.Abs(d*g*s))
			wantG := d * u * s * (1 + g*(1-s))
			// The derivative's factor 1 + g(1−s) cancels near g = −1.28:
			// bound the error by the terms' size, not the result's.
			checkRel(t, "SwiGLUBackward dGate", gate[i], dg[i], wantG, math.Abs(d*u*s)*(1+math.Abs(g*(1-s))))
		}
		for m := 0; m <= 67; m++ {
			for off := 0; off < 3; off++ {
				o := make([]float32, m)
				SwiGLU(o, gate[off:off+m], up[off:off+m])
				g2, u2 := make([]float32, m), make([]float32, m)
				SwiGLUBackward(g2, u2, dOut[off:off+m], gate[off:off+m], up[off:off+m])
				for i := range m {
					if !sameBits(o[i], out[off+i]) || !sameBits(g2[i], dg[off+i]) || !sameBits(u2[i], du[off+i]) {
						t.Fatalf("n=%d off=%d: element %d differs from the whole call", m, off, i)
					}
				}
			}
		}
		// Aliased: out = gate; dGate = gate and dUp = dOut.
		a := append([]float32(nil), gate...)
		SwiGLU(a, a, up)
		b, c := append([]float32(nil), gate...), append([]float32(nil), dOut...)
		SwiGLUBackward(b, c, c, b, up)
		for i := range a {
			if !sameBits(a[i], out[i]) || !sameBits(b[i], dg[i]) || !sameBits(c[i], du[i]) {
				t.Fatalf("aliased: element %d differs", i)
			}
		}
	})
}

// checkRel checks got against want to 6 float32 ulps of scale, or 1e-35
// absolutely: below a gate of −88.7, e^−g overflows and σ is flushed to
// zero where it would be a subnormal float32.
func checkRel(t *testing.T, what string, x, got float32, want, scale float64) {
	t.Helper()
	if math.Abs(float64(got)-want) > 6*0x1p-24*scale+1e-35 {
		t.Fatalf("%s(gate %g) = %g, want %g", what, x, got, want)
	}
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
				if math.IsNaN(c.got) || math.Abs(c.got-c.want) > 1e-6*math.Abs(c.want)+1e-30 {
					t.Errorf("%s(gate %g) = %g, want %g", c.what, g, c.got, c.want)
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
				if want := dotRef(x, y); !sameBits(got, want) {
					t.Fatalf("n=%d off=%d: Dot = %v, the documented order gives %v", n, off, got, want)
				}
				var exact, mag float64
				for i := range x {
					exact += float64(x[i]) * float64(y[i])
					mag += math.Abs(float64(x[i]) * float64(y[i]))
				}
				if math.Abs(float64(got)-exact) > 1e-6*mag {
					t.Fatalf("n=%d: Dot = %v, exactly %v", n, got, exact)
				}
			}
		}
		if got := Dot([]float32{1, nan}, []float32{1, 1}); got == got {
			t.Errorf("Dot with NaN = %g", got)
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
				for i := range y {
					wy, wx, wd := y[i], x[i], y[i]
					if i >= off && i < off+n {
						wy = y[i] + float32(alpha*x[i])
						wx = x[i] * alpha
						wd = (y[i] - s) * p[i]
					}
					if !sameBits(yy[i], wy) || !sameBits(xx[i], wx) || !sameBits(dd[i], wd) {
						t.Fatalf("n=%d off=%d element %d: Axpy %g (want %g), Scale %g (want %g), SubMul %g (want %g)",
							n, off, i, yy[i], wy, xx[i], wx, dd[i], wd)
					}
				}
			}
		}
	})
}

func TestMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	eachLevel(t, func(t *testing.T) {
		if m := Max(nil); !math.IsInf(float64(m), -1) {
			t.Errorf("Max(empty) = %g, want -Inf", m)
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
				if got := Max(v); got != want {
					t.Fatalf("n=%d: Max = %g, want %g", n, got, want)
				}
				for _, at := range []int{0, n / 2, n - 1} {
					saved := v[at]
					v[at] = nan
					if got := Max(v); got == got {
						t.Fatalf("n=%d: Max with NaN at %d = %g, want NaN", n, at, got)
					}
					v[at] = inf
					if got := Max(v); got != inf {
						t.Fatalf("n=%d: Max with +Inf at %d = %g", n, at, got)
					}
					v[at] = saved
				}
			}
		}
		allNegInf := []float32{-inf, -inf, -inf}
		if m := Max(allNegInf); !math.IsInf(float64(m), -1) {
			t.Errorf("Max(-Inf…) = %g", m)
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
		for i := range a[k] {
			if !sameBits(a[k][i], b[k][i]) {
				t.Fatalf("result %d element %d: AVX-512 %g, AVX2 %g", k, i, a[k][i], b[k][i])
			}
		}
	}
}
