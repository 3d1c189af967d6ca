package enginetest

import (
	"fmt"
	"math"
	"slices"

	"github.com/memtrain/memtrain/engine"
)

// Tolerances, relative to the largest reference magnitude (see the package
// comment). float32's unit roundoff is 6e-8; an elementwise kernel that
// rounds a couple of times stays well inside tolElem, and one that sums K
// float32 terms inside tolSum·√K.
const (
	tolElem = 1e-6
	tolSum  = 2e-6
)

func testMemory(h *harness) {
	be := h.be
	before := be.MemStats()
	a := be.Alloc(engine.F32, 3, 5)
	b := be.Alloc(engine.I32, 7)
	if !slices.Equal(a.Shape, []int{3, 5}) || a.Len() != 15 || a.DType() != engine.F32 || b.DType() != engine.I32 {
		h.t.Fatalf("Alloc gave %v and %v, want f32[3×5] and i32[7]", a, b)
	}
	if a.Device() != be.Device() {
		h.t.Errorf("tensor on %v, backend on %v", a.Device(), be.Device())
	}
	for i, v := range h.get(a) {
		if v != 0 {
			h.t.Fatalf("Alloc'd F32 element %d = %g, want 0", i, v)
		}
	}
	for i, v := range h.getInt(b) {
		if v != 0 {
			h.t.Fatalf("Alloc'd I32 element %d = %d, want 0", i, v)
		}
	}
	during := be.MemStats()
	if during.Allocated-before.Allocated < 15*4+7*4 {
		h.t.Errorf("MemStats().Allocated grew by %d for 88 bytes of tensors", during.Allocated-before.Allocated)
	}
	if during.Peak < during.Allocated {
		h.t.Errorf("MemStats() = %+v: peak below allocated", during)
	}
	be.Free(a)
	be.Free(b)
	after := be.MemStats()
	if after.Allocated != before.Allocated {
		h.t.Errorf("MemStats().Allocated = %d after Free, want %d", after.Allocated, before.Allocated)
	}
	if after.Peak < during.Allocated {
		h.t.Errorf("MemStats().Peak = %d fell below an earlier allocation of %d", after.Peak, during.Allocated)
	}
}

func testTransfer(h *harness) {
	x := h.randn(37, 1)
	t := h.f32(x, 37)
	h.equal("Download after Upload", h.get(t), x)
	ids := []int32{5, -1, 0, 1 << 30, -(1 << 30)}
	it := h.i32(ids, 5)
	h.equalInt("DownloadInt32 after UploadInt32", h.getInt(it), ids)

	// A view of a view: a row of a matrix.
	m := h.f32(nil, 3, 4)
	row := m.Row(1)
	vals := []float32{1, 2, 3, 4}
	h.be.Upload(row, vals)
	h.equal("Upload into Row(1)", h.get(m), []float32{0, 0, 0, 0, 1, 2, 3, 4, 0, 0, 0, 0})
	h.equal("Download of Row(1)", h.get(row), vals)
	if err := h.be.Synchronize(); err != nil {
		h.t.Errorf("Synchronize: %v", err)
	}
}

// gemmOperand is a batch of stored matrices with padding between rows and
// between problems, the padding holding NaN so that reading it shows.
type gemmOperand struct {
	rows, cols, ld, stride, batch int
	data                          []float32
}

func (h *harness) gemmOperand(rows, cols, batch int, fillPad float32) gemmOperand {
	ld := cols + h.rng.IntN(3)
	stride := rows*ld + h.rng.IntN(5)
	n := (batch-1)*stride + rows*ld
	o := gemmOperand{rows: rows, cols: cols, ld: ld, stride: stride, batch: batch, data: fill(max(n, 1), fillPad)}
	for b := 0; b < batch; b++ {
		for i := 0; i < rows; i++ {
			for j := 0; j < cols; j++ {
				o.data[b*stride+i*ld+j] = float32(h.rng.NormFloat64())
			}
		}
	}
	return o
}

// inside reports whether flat index i is an element of one of the
// matrices rather than padding.
func (o gemmOperand) inside(i int) bool {
	b := i / o.stride
	if o.stride == 0 {
		b = 0
	}
	if b >= o.batch {
		return false
	}
	r := i - b*o.stride
	return r/o.ld < o.rows && r%o.ld < o.cols
}

func testGemm(h *harness) {
	sizes := [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 13, 33}, {64, 3, 70}, {2, 19, 1}, {70, 66, 9}}
	coefs := [][2]float32{{1, 0}, {0.5, 1}, {-1.25, 0.75}, {1, 1}}
	for si, s := range sizes {
		for tr := 0; tr < 4; tr++ {
			m, n, k := s[0], s[1], s[2]
			tA, tB := tr&1 != 0, tr&2 != 0
			batch := 1 + 2*((si+tr)%2)
			alpha, beta := coefs[(si+tr)%len(coefs)][0], coefs[(si+tr)%len(coefs)][1]
			name := fmt.Sprintf("Gemm %dx%dx%d tA=%v tB=%v batch %d alpha %g beta %g", m, n, k, tA, tB, batch, alpha, beta)
			h.checkGemm(name, m, n, k, tA, tB, batch, alpha, beta, false)
		}
	}
}

// checkGemm runs one batched GEMM on padded operands and compares it with
// refGemm; C's padding must come through unchanged.
func (h *harness) checkGemm(name string, m, n, k int, tA, tB bool, batch int, alpha, beta float32, nanC bool) {
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	nan := float32(math.NaN())
	A := h.gemmOperand(ar, ac, batch, nan)
	B := h.gemmOperand(br, bc, batch, nan)
	C := h.gemmOperand(m, n, batch, 777)
	if nanC {
		for i := range C.data {
			if C.inside(i) {
				C.data[i] = nan
			}
		}
	}
	p := engine.GemmParams{TransA: tA, TransB: tB, M: m, N: n, K: k, Alpha: alpha, Beta: beta,
		LDA: A.ld, LDB: B.ld, LDC: C.ld, Batch: batch, StrideA: A.stride, StrideB: B.stride, StrideC: C.stride}
	ta, tb, tc := h.f32(A.data, len(A.data)), h.f32(B.data, len(B.data)), h.f32(C.data, len(C.data))
	h.be.Gemm(p, ta, tb, tc)

	want := f64(C.data)
	a64, b64 := f64(A.data), f64(B.data)
	for i := 0; i < batch; i++ {
		refGemm(tA, tB, m, n, k, float64(alpha), a64[i*A.stride:], A.ld, b64[i*B.stride:], B.ld,
			float64(beta), want[i*C.stride:], C.ld)
	}
	got := h.get(tc)
	var gIn, gPad []float32
	var wIn []float64
	for i := range got {
		if C.inside(i) {
			gIn, wIn = append(gIn, got[i]), append(wIn, want[i])
		} else {
			gPad = append(gPad, got[i])
		}
	}
	h.close(name, gIn, wIn, sqrtTol(tolSum, k))
	for i, v := range gPad {
		if v != 777 {
			h.t.Errorf("%s: padding element %d of C changed to %g", name, i, v)
			break
		}
	}
}

func testGemmBetaZeroNaN(h *harness) {
	h.checkGemm("Gemm beta 0 over NaN", 5, 7, 3, false, false, 1, 1, 0, true)
	h.checkGemm("Gemm beta 0 over NaN, transposed, batched", 33, 9, 17, true, true, 2, -0.5, 0, true)
}

func testGemmKZero(h *harness) {
	for _, beta := range []float32{0, 0.5} {
		c0 := h.randn(6, 1)
		c := h.f32(c0, 2, 3)
		a, b := h.f32(nil, 1), h.f32(nil, 1)
		h.be.Gemm(engine.GemmParams{M: 2, N: 3, K: 0, Alpha: 1, Beta: beta, LDA: 1, LDB: 3, LDC: 3}, a, b, c)
		want := make([]float64, 6)
		for i := range want {
			want[i] = float64(beta) * float64(c0[i])
		}
		h.close(fmt.Sprintf("Gemm K=0 beta %g", beta), h.get(c), want, tolElem)
	}
	// Batched, with strides that would step past A and B were they read.
	c0 := h.randn(12, 1)
	c := h.f32(c0, 2, 2, 3)
	a, b := h.f32(nil, 1), h.f32(nil, 1)
	h.be.Gemm(engine.GemmParams{M: 2, N: 3, K: 0, Alpha: 1, Beta: 2, LDA: 1, LDB: 3, LDC: 3,
		Batch: 2, StrideA: 5, StrideB: 5, StrideC: 6}, a, b, c)
	want := make([]float64, 12)
	for i := range want {
		want[i] = 2 * float64(c0[i])
	}
	h.close("Gemm K=0 batched", h.get(c), want, tolElem)
}

func testElementwise(h *harness) {
	for _, n := range []int{1, 37, 70001} {
		a, b := h.randn(n, 1), h.randn(n, 2)

		t := h.nan(n)
		h.be.Fill(t, 1.5)
		h.equal(fmt.Sprintf("Fill n=%d", n), h.get(t), fill(n, 1.5))

		src, dst := h.f32(a, n), h.nan(n)
		h.be.Copy(dst, src)
		h.equal(fmt.Sprintf("Copy n=%d", n), h.get(dst), a)

		sum := make([]float64, n)
		for i := range sum {
			sum[i] = float64(a[i]) + float64(b[i])
		}
		ta, tb, out := h.f32(a, n), h.f32(b, n), h.nan(n)
		h.be.Add(out, ta, tb)
		h.close(fmt.Sprintf("Add n=%d", n), h.get(out), sum, tolElem)
		h.be.Add(ta, ta, tb) // dst aliases a
		h.close(fmt.Sprintf("Add into a, n=%d", n), h.get(ta), sum, tolElem)
		ta = h.f32(a, n)
		h.be.Add(tb, ta, tb) // dst aliases b
		h.close(fmt.Sprintf("Add into b, n=%d", n), h.get(tb), sum, tolElem)

		y := h.f32(a, n)
		h.be.Axpy(y, -0.75, h.f32(b, n))
		h.close(fmt.Sprintf("Axpy n=%d", n), h.get(y), addScaled(a, -0.75, f64(b)), tolElem)

		s := h.f32(a, n)
		h.be.Scale(s, 0.3)
		want := make([]float64, n)
		for i := range want {
			want[i] = float64(a[i]) * float64(float32(0.3))
		}
		h.close(fmt.Sprintf("Scale n=%d", n), h.get(s), want, tolElem)
	}
}

func testSumSquares(h *harness) {
	for _, n := range []int{1, 5, 100003} {
		x := h.randn(n, 3)
		var want float64
		for _, v := range x {
			want += float64(v) * float64(v)
		}
		dst := h.nan(1)
		h.be.SumSquares(dst, h.f32(x, n))
		// Accumulated in float64: only the final rounding remains.
		h.close(fmt.Sprintf("SumSquares n=%d", n), h.get(dst), []float64{want}, tolElem)
	}
}

// testSumSquaresMulti: SumSquaresMulti's sums are bit for bit
// SumSquares' of each tensor — empty ones, views, tensors of several
// blocks among small ones — and as close to the float64 sums.
func testSumSquaresMulti(h *harness) {
	lens := []int{5, 0, 100003, 1, 40000, 16384, 3}
	var xs []*engine.Tensor
	var want []float64
	for i, n := range lens {
		x := h.randn(n+2, float64(i+1))
		var s float64
		for _, v := range x[1 : n+1] {
			s += float64(v) * float64(v)
		}
		want = append(want, s)
		xs = append(xs, h.f32(x, n+2).View(1, n)) // a view inside its storage
	}
	dst := h.nan(len(xs))
	h.be.SumSquaresMulti(dst, xs)
	got := h.get(dst)
	h.close("SumSquaresMulti", got, want, tolElem)
	for i, x := range xs {
		one := h.nan(1)
		h.be.SumSquares(one, x)
		if w := h.get(one)[0]; math.Float32bits(got[i]) != math.Float32bits(w) {
			h.t.Errorf("SumSquaresMulti: tensor %d (%d elements): %v, SumSquares %v", i, lens[i], got[i], w)
		}
	}
	// Twice the same, and a shorter list into a view of dst (the table
	// changes between calls).
	h.be.SumSquaresMulti(dst.View(2, 2), xs[2:4])
	again := h.get(dst)
	for i := range got {
		if math.Float32bits(again[i]) != math.Float32bits(got[i]) {
			h.t.Errorf("SumSquaresMulti again: tensor %d: %v, first %v", i, again[i], got[i])
		}
	}
	h.be.SumSquaresMulti(h.nan(0), nil)
}

// testEmpty checks Empty: tensors of the shape and dtype asked for,
// counted in MemStats as Alloc's are, that hold what is written into
// them — and, on a poisoned backend (Config.Poisoned), NaN (I32: −1)
// before that, every element, however many tensors were freed before
// (a caching allocator's reused blocks are poisoned too).
func testEmpty(h *harness) {
	be := h.be
	for round := range 2 {
		before := be.MemStats().Allocated
		ts := []*engine.Tensor{be.Empty(engine.F32, 3, 5), be.Empty(engine.BF16, 17), be.Empty(engine.I32, 7), be.Empty(engine.F32, 0)}
		if got := be.MemStats().Allocated - before; got != 15*4+17*2+7*4 {
			h.t.Errorf("round %d: MemStats().Allocated grew by %d for 122 bytes of Empty tensors", round, got)
		}
		for i, want := range [][]int{{3, 5}, {17}, {7}, {0}} {
			if !slices.Equal(ts[i].Shape, want) || ts[i].Device() != be.Device() {
				h.t.Fatalf("round %d: Empty gave %v on %v, want shape %v on %v", round, ts[i], ts[i].Device(), want, be.Device())
			}
		}
		if h.poisoned {
			for _, t := range ts[:2] {
				for i, v := range h.get(t) {
					if v == v {
						h.t.Fatalf("round %d: poisoned Empty %v element %d = %g, want NaN", round, t, i, v)
					}
				}
			}
			for i, v := range h.getInt(ts[2]) {
				if v != -1 {
					h.t.Fatalf("round %d: poisoned Empty I32 element %d = %d, want -1", round, i, v)
				}
			}
		}
		// Written, then read: the values written.
		x := h.randn(15, 1)
		be.Upload(ts[0], x)
		h.equal("Empty F32 after Upload", h.get(ts[0]), x)
		be.Fill(ts[1], 2.5)
		h.equal("Empty BF16 after Fill", h.get(ts[1]), fill(17, 2.5))
		ids := []int32{3, 1, 4, 1, 5, 9, 2}
		be.UploadInt32(ts[2], ids)
		h.equalInt("Empty I32 after UploadInt32", h.getInt(ts[2]), ids)
		// Dirty them and free them: the next round's tensors may reuse
		// their memory, which must then be poisoned again.
		for _, t := range ts {
			be.Free(t)
		}
		if got := be.MemStats().Allocated; got != before {
			h.t.Errorf("round %d: MemStats().Allocated = %d after freeing the Empty tensors, want %d", round, got, before)
		}
	}
}
