package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/internal/numtest"
)

// toBF16 rounds float32 values to bf16 bit patterns as checkpoints do.
// NaN padding stays NaN.
func toBF16(x []float32) []uint16 {
	h := make([]uint16, len(x))
	for i, v := range x {
		h[i] = checkpoints.Float32ToBF16(v)
	}
	return h
}

// widened is h widened with the checkpoints package's conversion: the
// float32 B that a bf16 B must multiply as.
func widened(h []uint16) []float32 {
	x := make([]float32, len(h))
	for i, v := range h {
		x[i] = checkpoints.BF16ToFloat32(v)
	}
	return x
}

func TestBF16ToFloat32(t *testing.T) {
	got, want := make([]float32, 1<<16), make([]float32, 1<<16)
	for h := range got {
		got[h], want[h] = bf16ToFloat32(uint16(h)), checkpoints.BF16ToFloat32(uint16(h))
	}
	if err := numtest.Equal(got, want); err != nil {
		t.Errorf("bf16ToFloat32 (element = bf16 bit pattern): %v", err)
	}
}

// TestPackBF16 checks the bf16 packing routines, portable and this CPU's,
// against the float32 ones on the widened source: the same panels, bit for
// bit, padding included.
func TestPackBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	type rowsFunc func(dst []float32, w int, src []uint16, ld, kc, n int)
	for _, w := range []int{4, 6, 8, 16, 24, 32} {
		for _, kc := range []int{1, 7, 8, 15, 16, 17, 40, 53} {
			// Rows: kc source rows of n values, n spanning panels.
			for _, n := range []int{1, w - 1, w, 2 * w, 3*w + 5, 9*w + 2} {
				if n < 1 {
					continue
				}
				ld := n + rng.IntN(3)
				src32, _ := randMatrix(rng, kc, ld, 0, 1)
				src := toBF16(src32)
				want := make([]float32, ceilDiv(n, w)*w*kc)
				packRowsGo(want, w, widened(src), ld, kc, n, 1)
				for name, f := range map[string]rowsFunc{"packRowsBF16": packRowsBF16, "packRowsBF16Go": packRowsBF16Go} {
					got := make([]float32, len(want))
					for i := range got {
						got[i] = float32(math.NaN()) // padding must be written
					}
					f(got, w, src, ld, kc, n)
					if err := numtest.Equal(got, want); err != nil {
						t.Errorf("%s(w=%d, kc=%d, n=%d): %v", name, w, kc, n, err)
					}
				}
			}
			// Columns: n ≤ w source rows of kc values.
			for _, n := range []int{1, 3, w - 1, w} {
				if n < 1 || n > w {
					continue
				}
				ld := kc + rng.IntN(4)
				src32, _ := randMatrix(rng, n, ld, 0, 1)
				src := toBF16(src32)[:(n-1)*ld+kc]
				want := make([]float32, w*kc)
				packColsGo(want, w, widened(src), ld, kc, n, 1)
				for name, f := range map[string]rowsFunc{"packColsBF16": packColsBF16, "packColsBF16Go": packColsBF16Go} {
					got := make([]float32, len(want)) // cleared, as callers do
					f(got, w, src, ld, kc, n)
					if err := numtest.Equal(got, want); err != nil {
						t.Errorf("%s(w=%d, kc=%d, n=%d): %v", name, w, kc, n, err)
					}
				}
			}
		}
	}
}

// bf16Problem is p with its B rounded to bf16: b16 holds the bit patterns
// (NaN padding included) and p.b their widened values.
func bf16Problem(p *problem) []uint16 {
	b16 := toBF16(p.b)
	p.b = widened(b16)
	return b16
}

// runBF16 computes p with SgemmBF16B and g on a copy of C.
func (p *problem) runBF16(g Impl, b16 []uint16) []float32 {
	c := append([]float32(nil), p.c...)
	SgemmBF16B(g, p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, b16, p.ldb, p.beta, c, p.ldc)
	return c
}

// bf16Sizes are testSizes and the shapes of the skinny path (m ≤ 16,
// blocks of k beyond one axpy block) and of a model's weights used as B:
// forward x·Wᵀ and the input gradient dy·W.
var bf16Sizes = append(append([][3]int(nil), testSizes...),
	[3]int{1, 100, 37}, [3]int{5, 333, 260}, [3]int{16, 257, 515}, [3]int{9, 1000, 64},
	[3]int{17, 130, 300}, [3]int{64, 96, 512}, [3]int{70, 200, 96},
)

// TestSgemmBF16B checks that a bf16 B gives, bit for bit, the product with
// the widened float32 B: on the Go path with every kernel of this CPU, on
// 1 to 3 threads, through the blocked and the skinny paths; and on gonum's
// reference and OpenBLAS, which multiply a widened copy.
func TestSgemmBF16B(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	var gs []Impl
	for i, kn := range cpuKernels {
		threads := []int{1, 2, 3}
		if i > 0 {
			threads = []int{1, 2}
		}
		for _, th := range threads {
			gs = append(gs, newGo(th, kn))
		}
		blocked := newGo(2, kn)
		blocked.noSkinny = true
		gs = append(gs, blocked)
		if kn.dot != nil || kn.axpy != nil {
			skinny := newGo(2, kn)
			skinny.skinnyAny = true
			gs = append(gs, skinny)
		}
	}
	gs = append(gs, Reference{})
	if o, err := OpenBLAS(1); err == nil {
		gs = append(gs, o)
	} else {
		t.Logf("OpenBLAS not tested: %v", err)
	}
	name := func(g Impl) string {
		if gg, ok := g.(*goGEMM); ok {
			s := fmt.Sprintf("go/%s/%d", gg.kern.name, gg.threads)
			if gg.noSkinny {
				s += "/blocked"
			}
			if gg.skinnyAny {
				s += "/skinny"
			}
			return s
		}
		return g.Name()
	}
	for si, sz := range bf16Sizes {
		m, n, k := sz[0], sz[1], sz[2]
		for ti := 0; ti < 4; ti++ {
			transA, transB := ti&1 != 0, ti&2 != 0
			s := allScalars[(si+3*ti)%len(allScalars)]
			p := newProblem(rng, transA, transB, m, n, k, s.alpha, s.beta, (si+ti)%3*2)
			b16 := bf16Problem(p)
			for _, g := range gs {
				if _, ok := g.(*goGEMM); !ok && m*n*k > 1<<22 {
					continue // the reference is slow
				}
				want, got := p.run(g), p.runBF16(g, b16)
				if len(p.c) == 0 {
					continue // no C: nothing to compare
				}
				if err := numtest.Equal(got, want); err != nil {
					t.Errorf("%s: %v: bf16 B differs from the widened float32 B: %v", name(g), p, err)
				}
			}
		}
	}
}

// TestSgemmBF16BModelShapes checks the two products a frozen weight W
// [o, k] enters as B: the forward out = in·Wᵀ and the input gradient
// din = dout·W, with W a view of a wider matrix (LDB > k), against the
// widened W, on 1 and 2 threads.
func TestSgemmBF16BModelShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 26))
	const rows, o, k, pad = 67, 136, 200, 8
	for _, th := range []int{1, 2} {
		g := New(th)
		w32, ldw := randMatrix(rng, o, k, pad, 1)
		w := toBF16(w32)
		ww := widened(w)
		x, _ := randMatrix(rng, rows, k, 0, 1)
		out := make([]float32, rows*o)
		want := make([]float32, rows*o)
		SgemmBF16B(g, false, true, rows, o, k, 1, x, k, w, ldw, 0, out, o)
		g.Sgemm(false, true, rows, o, k, 1, x, k, ww, ldw, 0, want, o)
		if err := numtest.Equal(out, want); err != nil {
			t.Errorf("threads %d: forward in·Wᵀ differs from the widened W: %v", th, err)
		}
		dy, _ := randMatrix(rng, rows, o, 0, 1)
		din := make([]float32, rows*k)
		want = make([]float32, rows*k)
		SgemmBF16B(g, false, false, rows, k, o, 1, dy, o, w, ldw, 0, din, k)
		g.Sgemm(false, false, rows, k, o, 1, dy, o, ww, ldw, 0, want, k)
		if err := numtest.Equal(din, want); err != nil {
			t.Errorf("threads %d: input gradient dout·W differs from the widened W: %v", th, err)
		}
	}
}

// TestBatchedBF16B checks BatchedBF16B against Batched with the widened B,
// for the Go path (side by side and one at a time) and the reference, with
// a shared B (stride 0), and with K = 0.
func TestBatchedBF16B(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 28))
	for _, tc := range []struct {
		batch, m, n, k, threads int
		transA, transB          bool
		shareB                  bool
	}{
		{5, 7, 13, 5, 2, false, true, false},
		{8, 64, 64, 64, 2, true, false, false},
		{3, 33, 20, 17, 3, false, false, true},
		{4, 30, 40, 50, 1, true, true, false},
		{2, 300, 300, 400, 2, false, true, false}, // big items: one at a time
		{3, 4, 5, 0, 2, false, false, false},
	} {
		name := fmt.Sprintf("%dx%dx%dx%d/threads=%d/tA=%v/tB=%v", tc.batch, tc.m, tc.n, tc.k, tc.threads, tc.transA, tc.transB)
		ar, ac, br, bc := tc.m, tc.k, tc.k, tc.n
		if tc.transA {
			ar, ac = ac, ar
		}
		if tc.transB {
			br, bc = bc, br
		}
		lda, ldb, ldc := max(1, ac+1), max(1, bc+2), tc.n+1
		strideA, strideB, strideC := ar*lda+3, br*ldb+5, tc.m*ldc+2
		if tc.shareB {
			strideB = 0
		}
		a, _ := randMatrix(rng, tc.batch*strideA, 1, 0, 1)
		b32, _ := randMatrix(rng, (tc.batch-1)*strideB+br*ldb, 1, 0, 1)
		c, _ := randMatrix(rng, tc.batch*strideC, 1, 0, 1)
		b := toBF16(b32)
		for _, g := range []Impl{newGo(tc.threads, cpuKernels[0]), Reference{}} {
			want := append([]float32(nil), c...)
			Batched(g, tc.batch, tc.transA, tc.transB, tc.m, tc.n, tc.k, 0.5, a, lda, strideA, widened(b), ldb, strideB, 0.25, want, ldc, strideC)
			got := append([]float32(nil), c...)
			BatchedBF16B(g, tc.batch, tc.transA, tc.transB, tc.m, tc.n, tc.k, 0.5, a, lda, strideA, b, ldb, strideB, 0.25, got, ldc, strideC)
			if err := numtest.Equal(got, want); err != nil {
				t.Errorf("%s/%s: BatchedBF16B differs from Batched with the widened B: %v", name, g.Name(), err)
			}
		}
	}
}

func TestSgemmBF16BPanics(t *testing.T) {
	for _, g := range []Impl{New(1), Reference{}} {
		for _, tc := range []struct {
			name, want string
			f          func()
		}{
			{"short b", "b has 3 elements", func() {
				SgemmBF16B(g, false, false, 2, 2, 2, 1, make([]float32, 4), 2, make([]uint16, 3), 2, 0, make([]float32, 4), 2)
			}},
			{"ldb", "ldb = 1", func() {
				SgemmBF16B(g, false, true, 2, 2, 2, 1, make([]float32, 4), 2, make([]uint16, 4), 1, 0, make([]float32, 4), 2)
			}},
			{"batched short b", "too few", func() {
				BatchedBF16B(g, 2, false, false, 2, 2, 2, 1, make([]float32, 8), 2, 4, make([]uint16, 5), 2, 4, 0, make([]float32, 8), 2, 4)
			}},
		} {
			t.Run(g.Name()+"/"+tc.name, func(t *testing.T) { mustPanicWith(t, tc.want, tc.f) })
		}
	}
}

// goAxpyForTest is a portable axpy family for the tests, the skinny path
// without transB having kernels on AVX-512 only: up to 3 rows of A by 16
// or 32 columns of B, each element summed over k in order (unfused), then
// alpha·sum + beta·C.
var goAxpyForTest = func() *axpyKernels {
	kf := &axpyKernels{maxMB: 3, nv: []int{0, 2, 1, 1}, k: make([]axpyKernel, 4)}
	for mb := 1; mb <= 3; mb++ {
		kf.k[mb] = func(k int, ap *float32, lda int, bp *float32, ldb int, cp *float32, ldc int, alpha, beta float32, cols int) {
			a := unsafe.Slice(ap, (mb-1)*lda+k)
			b := unsafe.Slice(bp, (k-1)*ldb+cols)
			c := unsafe.Slice(cp, (mb-1)*ldc+cols)
			for i := 0; i < mb; i++ {
				for j := 0; j < cols; j++ {
					var acc float32
					for p := 0; p < k; p++ {
						acc += float32(a[i*lda+p] * b[p*ldb+j])
					}
					if beta == 0 {
						c[i*ldc+j] = alpha * acc
					} else {
						c[i*ldc+j] = float32(alpha*acc) + beta*c[i*ldc+j]
					}
				}
			}
		}
	}
	return kf
}()

// TestSkinnyAxpyBF16B checks the skinny path without transB for a bf16 B
// (widened a block at a time) against the float32 path on the widened B,
// with a portable axpy family standing in for AVX-512's: several blocks of
// k, of columns and of rows of A.
func TestSkinnyAxpyBF16B(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	kn := genericKernel
	kn.axpy = goAxpyForTest
	for _, th := range []int{1, 2} {
		g := newGo(th, &kn)
		g.skinnyAny = true
		for _, sz := range [][3]int{{1, 1, 1}, {2, 17, 5}, {3, 200, 257}, {5, 450, 600}, {8, 33, 1000}, {16, 193, 40}} {
			for _, transA := range []bool{false, true} {
				p := newProblem(rng, transA, false, sz[0], sz[1], sz[2], 0.5, 0.25, 3)
				b16 := bf16Problem(p)
				want := p.runSkinny(t, g)
				c := append([]float32(nil), p.c...)
				if !g.skinnyB(p.transA, false, p.m, p.n, p.k, p.alpha, p.a, p.lda, operandB{bf16: b16, half: true}, p.ldb, p.beta, c, p.ldc) {
					t.Fatalf("%v: skinny path declined a bf16 B", p)
				}
				if err := numtest.Equal(c, want); err != nil {
					t.Errorf("threads %d: %v: bf16 B differs from the widened float32 B: %v", th, p, err)
				}
				if err := numtest.Equal(p.runBF16(g, b16), want); err != nil {
					t.Errorf("threads %d: %v: SgemmBF16B differs from the widened float32 B: %v", th, p, err)
				}
			}
		}
	}
}
