package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// pairKernels are the pair kernels tried: this CPU's, if it has one, and
// the portable specification.
func pairKernels() []*microKernel {
	if cpuPairKernel != nil {
		return []*microKernel{cpuPairKernel, &genericPairKernel}
	}
	return []*microKernel{&genericPairKernel}
}

// pairSizes are m×n×k shapes for the pair path (m above skinnyMaxM, n
// above half a tile) and around it: odd k, k slices (k above 512 values),
// edge tiles, and shapes that fall back to widening.
var pairSizes = [][3]int{
	{17, 17, 1}, {17, 33, 2}, {40, 70, 3}, {25, 40, 64}, {64, 96, 512},
	{100, 40, 1025}, {200, 300, 513}, {2411, 19, 7},
	{16, 100, 37}, {9, 333, 260}, {300, 16, 70}, {97, 9, 300}, {1, 1, 1},
}

// bf16Operands rounds p's A and B to bf16: it returns their bit patterns
// (NaN padding included) and leaves p.a and p.b their widened values.
func bf16Operands(p *problem) (a16, b16 []uint16) {
	a16, b16 = toBF16(p.a), toBF16(p.b)
	p.a, p.b = widened(a16), widened(b16)
	return a16, b16
}

// runGemmBF16 computes p with GemmBF16 and g on a copy of C.
func (p *problem) runGemmBF16(g Impl, a16, b16 []uint16) []float32 {
	c := append([]float32(nil), p.c...)
	GemmBF16(g, p.transA, p.transB, p.m, p.n, p.k, p.alpha, a16, p.lda, b16, p.ldb, p.beta, c, p.ldc)
	return c
}

// pairsWant computes p (alpha 1, A and B bf16 values) element by element
// as the blocked path with a pair kernel of depth kc does: k slices of
// evenBlock(⌈k/2⌉, kc) pairs, each summed from zero with VDPBF16PS's
// arithmetic (kernelPairs4x4's) and added to C, the first with beta.
func pairsWant(p *problem, kc int) []float32 {
	c := append([]float32(nil), p.c...)
	k2 := ceilDiv(p.k, 2)
	kcMax := evenBlock(k2, kc, 1)
	opA := func(i, l int) float32 {
		switch {
		case l >= p.k:
			return 0
		case p.transA:
			return p.a[l*p.lda+i]
		}
		return p.a[i*p.lda+l]
	}
	opB := func(l, j int) float32 {
		switch {
		case l >= p.k:
			return 0
		case p.transB:
			return p.b[j*p.ldb+l]
		}
		return p.b[l*p.ldb+j]
	}
	for i := 0; i < p.m; i++ {
		for j := 0; j < p.n; j++ {
			ci := i*p.ldc + j
			for pc := 0; pc < k2; pc += kcMax {
				var acc float32
				for q := pc; q < min(pc+kcMax, k2); q++ {
					acc = ftz(acc + opA(i, 2*q+1)*opB(2*q+1, j))
					acc = ftz(acc + opA(i, 2*q)*opB(2*q, j))
				}
				switch {
				case pc > 0 || p.beta == 1:
					c[ci] += acc
				case p.beta == 0:
					c[ci] = acc
				default:
					c[ci] = p.beta*c[ci] + acc
				}
			}
		}
	}
	return c
}

// TestGemmBF16Pairs checks the pair path bit for bit against pairsWant —
// this CPU's assembly pair kernel and the portable one, on 1 to 3
// threads, with shared packing and without — and that it is within
// float32 rounding of the float64 product.
func TestGemmBF16Pairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, pk := range pairKernels() {
		var gs []*goGEMM
		for _, th := range []int{1, 2, 3} {
			g := newGo(th, cpuKernels[0])
			g.pairs = pk
			gs = append(gs, g)
		}
		apart := newGo(2, cpuKernels[0])
		apart.pairs, apart.noShare = pk, true
		gs = append(gs, apart)
		for _, sz := range pairSizes {
			m, n, k := sz[0], sz[1], sz[2]
			if m <= skinnyMaxM || 2*n <= pk.nr {
				continue
			}
			for ti := 0; ti < 4; ti++ {
				for bi, beta := range []float32{0, 1, 0.5} {
					if m*n*k > 1<<24 && bi != ti%3 {
						continue // the big shapes: one beta for each layout
					}
					p := newProblem(rng, ti&1 != 0, ti&2 != 0, m, n, k, 1, beta, rng.IntN(3))
					a16, b16 := bf16Operands(p)
					want := pairsWant(p, pk.kc)
					ref, bound := p.want()
					for _, g := range gs {
						got := p.runGemmBF16(g, a16, b16)
						name := fmt.Sprintf("%s on %d threads (noShare %v)", pk.name, g.threads, g.noShare)
						if err := numtest.Equal(got, want); err != nil {
							t.Errorf("%s: %v: not the bits of VDPBF16PS's order: %v", name, p, err)
						}
						p.check(t, name, got, ref, bound)
					}
				}
			}
		}
	}
}

// TestGemmBF16Widened checks the products GemmBF16 widens — with no pair
// kernel, and with one for products it does not take (alpha ≠ 1, m ≤ 16,
// n at most half a tile) — bit for bit against Sgemm on the widened
// operands, and every Impl, gonum's and OpenBLAS's copies included,
// within rounding of the reference.
func TestGemmBF16Widened(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 44))
	plain := newGo(2, cpuKernels[0])
	plain.pairs = nil
	impls := []Impl{plain, Reference{}}
	if pk := cpuPairKernel; pk != nil {
		impls = append(impls, newGo(2, cpuKernels[0]))
	}
	if ob, err := OpenBLAS(2); err == nil {
		impls = append(impls, ob)
	}
	for _, sz := range append(append([][3]int(nil), testSizes...), pairSizes...) {
		m, n, k := sz[0], sz[1], sz[2]
		if m*n*k > 1<<25 {
			continue // TestGemmBF16Pairs has the big shapes
		}
		for ti := 0; ti < 4; ti++ {
			for _, sc := range []scalars{{1, 0}, {1, 0.25}, {-0.5, 1}, {2, 0}} {
				p := newProblem(rng, ti&1 != 0, ti&2 != 0, m, n, k, sc.alpha, sc.beta, rng.IntN(3))
				a16, b16 := bf16Operands(p)
				ref, bound := p.want()
				for _, g := range impls {
					got := p.runGemmBF16(g, a16, b16)
					p.check(t, g.Name(), got, ref, bound)
					gg, ok := g.(*goGEMM)
					if !ok {
						continue
					}
					pairs := gg.pairs != nil && p.alpha == 1 && m > skinnyMaxM && 2*n > gg.pairs.nr && k > 0
					if pairs || len(p.c) == 0 {
						continue // the pair path's bits, or no C to compare
					}
					if err := numtest.Equal(got, p.run(newGo(2, cpuKernels[0]))); err != nil {
						t.Errorf("go (pairs %v): %v: not the bits of Sgemm on the widened operands: %v", gg.pairs != nil, p, err)
					}
				}
			}
		}
	}
}

// TestBatchedBF16 checks that BatchedBF16 gives each problem GemmBF16's
// bits, with the batch spread over threads or not, and with shared or
// strided operands.
func TestBatchedBF16(t *testing.T) {
	rng := rand.New(rand.NewPCG(45, 46))
	for _, tc := range []struct {
		batch, m, n, k, threads int
		transA, transB          bool
		shareB                  bool
	}{
		{3, 40, 50, 33, 2, false, true, false},
		{5, 17, 64, 64, 3, true, false, true},
		{2, 300, 200, 129, 2, false, false, false},
		{4, 8, 20, 9, 2, false, true, false},
	} {
		ar, ac := tc.m, tc.k
		if tc.transA {
			ar, ac = ac, ar
		}
		br, bc := tc.k, tc.n
		if tc.transB {
			br, bc = bc, br
		}
		a32, lda := randMatrix(rng, ar, ac, 1, 1)
		b32, ldb := randMatrix(rng, br, bc, 2, 1)
		strideA, strideB := len(a32)+3, len(b32)+1
		if tc.shareB {
			strideB = 0
		}
		a := toBF16(make([]float32, tc.batch*strideA))
		b := toBF16(make([]float32, max(1, tc.batch)*max(strideB, len(b32))))
		for i := 0; i < tc.batch; i++ {
			copy(a[i*strideA:], toBF16(a32))
			if i == 0 || strideB > 0 {
				copy(b[i*strideB:], toBF16(b32))
			}
			for j := range a32 {
				a32[j] = 2*rng.Float32() - 1
			}
		}
		ldc := tc.n + 1
		strideC := tc.m*ldc + 2
		c0 := make([]float32, tc.batch*strideC)
		for i := range c0 {
			c0[i] = 2*rng.Float32() - 1
		}
		g := newGo(tc.threads, cpuKernels[0])
		got := append([]float32(nil), c0...)
		BatchedBF16(g, tc.batch, tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, a, lda, strideA, b, ldb, strideB, 0.5, got, ldc, strideC)
		want := append([]float32(nil), c0...)
		for i := 0; i < tc.batch; i++ {
			g.Serial().(BF16Impl).GemmBF16(tc.transA, tc.transB, tc.m, tc.n, tc.k, 1, a[i*strideA:], lda, b[i*strideB:], ldb, 0.5, want[i*strideC:], ldc)
		}
		if err := numtest.Equal(got, want); err != nil {
			t.Errorf("BatchedBF16 %+v: not the bits of GemmBF16 problem by problem: %v", tc, err)
		}
	}
}

// TestPackPairs checks packPairs against its definition, word by word,
// the padding included, for either layout of the source, odd depths and
// slices that start past the first pair.
func TestPackPairs(t *testing.T) {
	rng := rand.New(rand.NewPCG(47, 48))
	for _, w := range []int{4, 12, 32} {
		for _, k := range []int{1, 2, 7, 16, 17, 40, 53} {
			for _, n := range []int{1, w - 1, w, 2*w + 3} {
				for _, alongK := range []bool{true, false} {
					for pi, p0 := range []int{0, 1, 3, 0} {
						if 2*p0 >= k {
							continue
						}
						kc := ceilDiv(k-2*p0, 2)
						rows, cols := k, n
						if alongK {
							rows, cols = n, k
						}
						// Odd and even strides: the AVX-512 transpose takes
						// pairs as words only at an even one.
						ld := cols + pi%3
						src := make([]uint16, (rows-1)*ld+cols)
						for i := range src {
							src[i] = uint16(rng.Uint32())
						}
						at := func(line, l int) uint32 {
							if l >= k {
								return 0
							}
							if alongK {
								return uint32(src[line*ld+l])
							}
							return uint32(src[l*ld+line])
						}
						dst := make([]float32, ceilDiv(n, w)*w*kc)
						for i := range dst {
							dst[i] = math.Float32frombits(0xdeadbeef)
						}
						packPairs(dst, w, alongK, src, ld, 0, p0, kc, n, k)
						// Line j's pair q is word j/w·w·kc + q·w + j%w.
						want := make([]float32, len(dst))
						for j := 0; j < ceilDiv(n, w)*w; j++ {
							for q := 0; q < kc; q++ {
								var pair uint32
								if j < n {
									l := 2 * (p0 + q)
									pair = at(j, l) | at(j, l+1)<<16
								}
								want[j/w*w*kc+q*w+j%w] = math.Float32frombits(pair)
							}
						}
						if err := numtest.Equal(dst, want); err != nil {
							t.Fatalf("packPairs(w=%d, k=%d, n=%d, alongK=%v, p0=%d): %v", w, k, n, alongK, p0, err)
						}
					}
				}
			}
		}
	}
}

// TestPairKernelSubnormals checks the flushing the portable pair kernel
// specifies, and that this CPU's pair kernel does the same: a subnormal
// operand counts as zero, and so does a subnormal partial sum.
func TestPairKernelSubnormals(t *testing.T) {
	const tiny = 0x0040 // a bf16 subnormal: 2⁻¹²⁷·2⁻¹
	const one = 0x3f80
	for _, pk := range pairKernels() {
		mr, nr := pk.mr, pk.nr
		a := make([]float32, mr)
		b := make([]float32, nr)
		// Row 0: a subnormal times 1 in the first value of the pair.
		// Row 1, column 1: 1·2⁻¹²⁶ (the second values), then
		// 1·(−2⁻¹²⁶·(2−2⁻⁷)): their sum, −2⁻¹²⁶·(1−2⁻⁷), a subnormal, is
		// flushed.
		a[0] = math.Float32frombits(tiny | one<<16)
		a[1] = math.Float32frombits(one | one<<16)
		for j := range b {
			b[j] = math.Float32frombits(one)
		}
		b[1] = math.Float32frombits(0x80ff | 0x0080<<16)
		c := make([]float32, mr*nr)
		pk.fn(1, &a[0], &b[0], &c[0], nr, 0)
		if err := numtest.Scalar(float64(c[0]), 0, numtest.Tol{}); err != nil {
			t.Errorf("%s: subnormal·1: %v", pk.name, err)
		}
		if err := numtest.Scalar(float64(c[nr+1]), 0, numtest.Tol{}); err != nil {
			t.Errorf("%s: 2⁻¹²⁶ − 2⁻¹²⁶·(1−2⁻⁷), flushed: %v", pk.name, err)
		}
		if err := numtest.Scalar(float64(c[nr]), 1, numtest.Tol{}); err != nil {
			t.Errorf("%s: 1·1 + 1·0: %v", pk.name, err)
		}
	}
}

// TestGemmBF16Panics: operands too short for their shapes, strides or
// batch panic with a message naming the operand, on every Impl, rather
// than with a slice bound deep in the packing.
func TestGemmBF16Panics(t *testing.T) {
	for _, g := range []Impl{New(1), New(2), Reference{}} {
		for _, tc := range []struct {
			name, want string
			f          func()
		}{
			{"short a", "a has 3 elements", func() {
				GemmBF16(g, false, false, 20, 20, 2, 1, make([]uint16, 3), 2, make([]uint16, 40), 20, 0, make([]float32, 400), 20)
			}},
			{"short b", "b has 39 elements", func() {
				GemmBF16(g, false, false, 20, 20, 2, 1, make([]uint16, 40), 2, make([]uint16, 39), 20, 0, make([]float32, 400), 20)
			}},
			{"lda", "lda = 1", func() {
				GemmBF16(g, false, false, 20, 20, 2, 1, make([]uint16, 40), 1, make([]uint16, 40), 20, 0, make([]float32, 400), 20)
			}},
			{"batched b past its end", "b has 40 elements, too few for 3", func() {
				BatchedBF16(g, 3, false, false, 20, 20, 2, 1, make([]uint16, 120), 2, 40, make([]uint16, 40), 20, 40, 0, make([]float32, 1200), 20, 400)
			}},
			{"batched short c", "c has 799 elements", func() {
				BatchedBF16(g, 2, false, false, 20, 20, 2, 1, make([]uint16, 80), 2, 40, make([]uint16, 40), 20, 0, 0, make([]float32, 799), 20, 400)
			}},
		} {
			t.Run(fmt.Sprintf("%s-%d/%s", g.Name(), g.Threads(), tc.name), func(t *testing.T) { mustPanicWith(t, tc.want, tc.f) })
		}
	}
}
