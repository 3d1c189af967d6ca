package gemm

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// problem is one set of GEMM operands. The matrices are stored with row
// strides larger than their widths when pad > 0, and their padding holds
// NaN: a read of it poisons the result and a write to it is seen.
type problem struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        []float32 // c is C before the product
	lda, ldb, ldc  int
}

func (p *problem) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s/%dx%dx%d/alpha=%g/beta=%g/ld+%d", t(p.transA), t(p.transB), p.m, p.n, p.k, p.alpha, p.beta, p.ldc-p.n)
}

// newProblem returns random operands; with beta = 0, C starts as NaN.
func newProblem(rng *rand.Rand, transA, transB bool, m, n, k int, alpha, beta float32, pad int) *problem {
	p := &problem{transA: transA, transB: transB, m: m, n: n, k: k, alpha: alpha, beta: beta}
	ar, ac := m, k
	if transA {
		ar, ac = k, m
	}
	br, bc := k, n
	if transB {
		br, bc = n, k
	}
	p.a, p.lda = randMatrix(rng, ar, ac, pad, 1)
	p.b, p.ldb = randMatrix(rng, br, bc, pad, 1)
	p.c, p.ldc = randMatrix(rng, m, n, pad, 1)
	if beta == 0 {
		for i := range p.c {
			p.c[i] = float32(math.NaN())
		}
	}
	return p
}

// randMatrix returns a rows×cols matrix of values in [−scale, scale) with row
// stride cols+pad (at least 1), NaN in the padding, and no padding after the
// last row.
func randMatrix(rng *rand.Rand, rows, cols, pad int, scale float32) ([]float32, int) {
	ld := max(1, cols+pad)
	s := make([]float32, max(0, (rows-1)*ld+cols))
	for i := range s {
		if i%ld < cols {
			s[i] = scale * (2*rng.Float32() - 1)
		} else {
			s[i] = float32(math.NaN())
		}
	}
	return s, ld
}

// run computes the product with g on a copy of C and returns it.
func (p *problem) run(g Impl) []float32 {
	c := append([]float32(nil), p.c...)
	g.Sgemm(p.transA, p.transB, p.m, p.n, p.k, p.alpha, p.a, p.lda, p.b, p.ldb, p.beta, c, p.ldc)
	return c
}

// want returns the reference result and, per element, a bound on the
// rounding error of any summation order:
//
//	4·(k+2)·ε·(|alpha|·Σ_p |a_ip|·|b_pj| + |beta|·|c_ij|).
func (p *problem) want() (c, bound []float32) {
	c = p.run(Reference{})
	abs := func(s []float32) []float32 {
		t := make([]float32, len(s))
		for i, v := range s {
			t[i] = float32(math.Abs(float64(v)))
			if math.IsNaN(float64(v)) {
				t[i] = 0
			}
		}
		return t
	}
	bound = abs(p.c)
	beta := p.beta
	if beta == 0 {
		clear(bound)
		beta = 1
	}
	Reference{}.Sgemm(p.transA, p.transB, p.m, p.n, p.k, float32(math.Abs(float64(p.alpha))), abs(p.a), p.lda, abs(p.b), p.ldb,
		float32(math.Abs(float64(beta))), bound, p.ldc)
	const eps = 1.0 / (1 << 23)
	for i := range bound {
		bound[i] *= 4 * float32(p.k+2) * eps
	}
	return c, bound
}

// check compares got with want element by element, each within its
// bound, and checks that the padding of C was left alone.
func (p *problem) check(t *testing.T, name string, got, want, bound []float32) {
	t.Helper()
	if len(got) != len(p.c) || len(want) != len(p.c) || len(bound) != len(p.c) {
		t.Errorf("%s: %v: C has %d elements, want %d (bound %d), before %d", name, p, len(got), len(want), len(bound), len(p.c))
		return
	}
	values, padding := p.parts(got)
	wantValues, _ := p.parts(want)
	_, padBefore := p.parts(p.c)
	bounds, _ := p.parts(bound)
	if len(wantValues) > 0 { // an m = 0 or n = 0 product has none
		if err := numtest.CloseBounds(values, wantValues, bounds); err != nil {
			t.Errorf("%s: %v: C (row-major m×n): %v", name, p, err)
		}
	}
	if padding != nil || padBefore != nil {
		if err := numtest.Equal(padding, padBefore); err != nil {
			t.Errorf("%s: %v: padding of C changed: %v", name, p, err)
		}
	}
}

// parts returns C's m×n values and its padding, each in order, to be
// compared apart: a change to a value is not hidden among the padding's
// NaN.
func (p *problem) parts(c []float32) (values, padding []float32) {
	for i, v := range c {
		if i%p.ldc < p.n {
			values = append(values, v)
		} else {
			padding = append(padding, v)
		}
	}
	return values, padding
}

// testSizes are the m×n×k shapes tried: empty, tiny, primes, exact tiles
// and sizes that straddle every block of every kernel.
var testSizes = [][3]int{
	{0, 0, 0}, {0, 5, 3}, {4, 0, 3}, {3, 4, 0},
	{1, 1, 1}, {2, 3, 1}, {7, 13, 5}, {12, 32, 16}, {6, 16, 9}, {13, 33, 17},
	{33, 65, 129}, {24, 64, 385}, {37, 700, 11}, {2411, 19, 7},
	{300, 16, 70}, {97, 9, 300}, {25, 1, 17}, // narrow: at most 16 columns
	{200, 300, 257}, {513, 257, 1031},
}

type scalars struct{ alpha, beta float32 }

var allScalars = []scalars{
	{1, 0}, {1, 1}, {1, 0.25}, {-0.5, 0}, {-0.5, 1}, {-0.5, 0.25}, {2, 0}, {2, 1}, {2, 0.25},
}

// impls returns the Go path with each kernel this CPU runs and the thread
// counts tried with it: all of them for the fastest kernel, fewer for the
// slower ones.
func goImpls(t *testing.T) []*goGEMM {
	var gs []*goGEMM
	for i, k := range cpuKernels {
		threads := []int{1, 2, 3, 7}
		if i > 0 {
			threads = []int{1, 3}
		}
		for _, th := range threads {
			gs = append(gs, newGo(th, k))
		}
	}
	return gs
}

func TestSgemm(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	gs := goImpls(t)
	for si, sz := range testSizes {
		m, n, k := sz[0], sz[1], sz[2]
		sc := allScalars
		if m*n*k > 1<<18 {
			// Large: three of the nine, a different three each size.
			sc = []scalars{allScalars[si%9], allScalars[(si+4)%9], allScalars[(si+8)%9]}
		}
		for ti := 0; ti < 4; ti++ {
			transA, transB := ti&1 != 0, ti&2 != 0
			for _, s := range sc {
				p := newProblem(rng, transA, transB, m, n, k, s.alpha, s.beta, (si+ti)%3*2)
				want, bound := p.want()
				for _, g := range gs {
					p.check(t, fmt.Sprintf("go/%s/%d", g.kern.name, g.threads), p.run(g), want, bound)
				}
			}
		}
	}
}

// TestSgemmThreadsBitIdentical checks that the Go path gives the same bits
// on repeated calls and for every thread count.
func TestSgemmThreadsBitIdentical(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, kern := range cpuKernels {
		for ti := 0; ti < 4; ti++ {
			for _, n := range []int{517, 13} { // 13: the narrow kernel
				p := newProblem(rng, ti&1 != 0, ti&2 != 0, 301, n, 413, 0.5, 0.25, 1)
				first := p.run(newGo(1, kern))
				for _, th := range []int{1, 2, 3, 4, 7} {
					g := newGo(th, kern)
					for rep := 0; rep < 2; rep++ {
						if err := numtest.Equal(p.run(g), first); err != nil {
							t.Fatalf("%s: %v: %d threads, call %d: result differs from 1 thread: %v", kern.name, p, th, rep, err)
						}
					}
				}
			}
		}
	}
}

// TestSgemmSharedPacking checks that a row or column of rectangles whose
// goroutines share the packing of one operand gives the bits of one
// goroutine, on shapes with several blocks of every kind: rows past two
// A blocks a goroutine (4820 on 2), columns past two B blocks, and more
// than one k slice.
func TestSgemmSharedPacking(t *testing.T) {
	// Goroutines share packing only up to GOMAXPROCS of them: allow the
	// 7 tried here on a machine with fewer cores.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(7, runtime.GOMAXPROCS(0))))
	rng := rand.New(rand.NewPCG(7, 8))
	shapes := []struct{ m, n, k, threads int }{
		{4820, 1300, 70, 2}, // rows: two A blocks each
		{2500, 1500, 70, 2}, // columns: two A blocks, two B blocks each
		{250, 900, 600, 3},
		{600, 400, 300, 7},
	}
	for i, kern := range cpuKernels {
		todo := shapes
		if i > 0 {
			todo = shapes[2:] // the slower kernels: the smaller shapes
		}
		for _, s := range todo {
			for ti := 0; ti < 4; ti++ {
				p := newProblem(rng, ti&1 != 0, ti&2 != 0, s.m, s.n, s.k, 0.5, 0.25, 1)
				wantV, wantP := p.parts(p.run(newGo(1, kern)))
				g := newGo(s.threads, kern)
				tm, tn := split(s.m, s.n, kern.mr, kern.nr, g.workers(s.m, s.n, s.k))
				if !g.shares(s.m, s.n, tm, tn) {
					t.Fatalf("%s: %v: %d threads (%d×%d) do not share packing", kern.name, p, s.threads, tm, tn)
				}
				gotV, gotP := p.parts(p.run(g))
				if err := errors.Join(numtest.Equal(gotV, wantV), numtest.Equal(gotP, wantP)); err != nil {
					t.Errorf("%s: %v: %d threads (%d×%d), shared packing: result differs from 1 thread: %v", kern.name, p, s.threads, tm, tn, err)
				}
				g.noShare = true
				gotV, gotP = p.parts(p.run(g))
				if err := errors.Join(numtest.Equal(gotV, wantV), numtest.Equal(gotP, wantP)); err != nil {
					t.Errorf("%s: %v: %d threads, packing apart: result differs from 1 thread: %v", kern.name, p, s.threads, err)
				}
			}
		}
	}
}

func TestSgemmNaNOperands(t *testing.T) {
	// A NaN in A must reach C (no spurious skipping), and alpha = 0 must
	// not read A and B at all, as in BLAS.
	g := New(2)
	a := []float32{1, float32(math.NaN()), 3, 4}
	b := []float32{1, 2, 3, 4}
	c := make([]float32, 4)
	g.Sgemm(false, false, 2, 2, 2, 1, a, 2, b, 2, 0, c, 2)
	nan := float32(math.NaN())
	if err := numtest.Close(c, []float32{nan, nan, 15, 22}, numtest.Tol{NonFinite: true}); err != nil {
		t.Errorf("NaN in A: C = %v: %v", c, err)
	}
	c = []float32{1, 2, 3, 4}
	g.Sgemm(false, false, 2, 2, 2, 0, a, 2, b, 2, 0.5, c, 2)
	if err := numtest.Equal(c, []float32{0.5, 1, 1.5, 2}); err != nil {
		t.Errorf("alpha 0: %v", err)
	}
}

func TestSgemmPanics(t *testing.T) {
	g := New(1)
	for _, tc := range []struct {
		name, want string
		f          func()
	}{
		{"negative", "negative dimension", func() { g.Sgemm(false, false, -1, 1, 1, 1, nil, 1, nil, 1, 0, nil, 1) }},
		{"short a", "a has 3 elements", func() {
			g.Sgemm(false, false, 2, 2, 2, 1, make([]float32, 3), 2, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		}},
		{"short c", "c has 3 elements", func() {
			g.Sgemm(false, true, 2, 2, 2, 1, make([]float32, 4), 2, make([]float32, 4), 2, 0, make([]float32, 3), 2)
		}},
		{"lda", "lda = 1", func() {
			g.Sgemm(true, false, 2, 2, 2, 1, make([]float32, 4), 1, make([]float32, 4), 2, 0, make([]float32, 4), 2)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { mustPanicWith(t, tc.want, tc.f) })
	}
}

// mustPanicWith checks that f panics with a message containing want.
func mustPanicWith(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		r := recover()
		if s := fmt.Sprint(r); r == nil || !strings.Contains(s, want) {
			t.Errorf("panic %v, want one containing %q", r, want)
		}
	}()
	f()
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		m, n, threads, tm, tn int
	}{
		{100, 100, 1, 1, 1},
		{1200, 1200, 2, 1, 2}, // equal areas: the squarer rectangles
		{12, 6400, 2, 1, 2},   // one tile row: split the columns
		{12, 32, 4, 1, 1},     // one tile: nothing to split
		{2048, 2048, 4, 2, 2}, // 1032×1024 packs less than 2052×512 for about the same area
		{2048, 2048, 2, 1, 2}, // 2052×1024: less padding than 1032×2048
		{2048, 256, 2, 2, 1},  // thin: split the rows, or each would pack all of A
		{32000, 256, 2, 2, 1},
		{2048, 32000, 2, 1, 2}, // wide: split the columns
		{2048, 2048, 7, 7, 1},
		{24, 64, 7, 2, 2}, // 2×2 tiles: only four rectangles
	} {
		tm, tn := split(tc.m, tc.n, 12, 32, tc.threads)
		if tm != tc.tm || tn != tc.tn {
			t.Errorf("split(%d, %d, 12, 32, %d) = %d×%d, want %d×%d", tc.m, tc.n, tc.threads, tm, tn, tc.tm, tc.tn)
		}
	}
}

func TestBatched(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, tc := range []struct {
		batch, m, n, k, threads int
		transA, transB          bool
		shareB                  bool
	}{
		{5, 7, 13, 5, 2, false, true, false},
		{8, 64, 64, 64, 2, true, false, false},
		{3, 33, 20, 17, 7, false, false, true},
		{4, 130, 140, 150, 3, true, true, false},
		{2, 400, 300, 500, 2, false, false, false}, // big items: one at a time
		{1, 20, 20, 20, 2, false, false, false},
	} {
		name := fmt.Sprintf("%dx%dx%dx%d/threads=%d", tc.batch, tc.m, tc.n, tc.k, tc.threads)
		// Each problem sits in a larger stride, and the batch shares one
		// set of leading dimensions.
		ps := make([]*problem, tc.batch)
		for i := range ps {
			ps[i] = newProblem(rng, tc.transA, tc.transB, tc.m, tc.n, tc.k, 0.5, 0.25, 3)
			if tc.shareB {
				ps[i].b = ps[0].b
			}
		}
		p0 := ps[0]
		strideA, strideB, strideC := len(p0.a)+5, len(p0.b)+7, len(p0.c)+3
		if tc.shareB {
			strideB = 0
		}
		a := make([]float32, strideA*tc.batch)
		b := make([]float32, strideB*tc.batch+len(p0.b))
		c := make([]float32, strideC*tc.batch)
		for i, p := range ps {
			copy(a[i*strideA:], p.a)
			copy(b[i*strideB:], p.b)
			copy(c[i*strideC:], p.c)
		}
		for _, g := range []Impl{newGo(tc.threads, cpuKernels[0]), Reference{}} {
			got := append([]float32(nil), c...)
			Batched(g, tc.batch, tc.transA, tc.transB, tc.m, tc.n, tc.k, 0.5, a, p0.lda, strideA, b, p0.ldb, strideB, 0.25, got, p0.ldc, strideC)
			for i, p := range ps {
				want, bound := p.want()
				gi := got[i*strideC : i*strideC+len(p.c)]
				p.check(t, name+"/"+g.Name(), gi, want, bound)
				if g.Name() != "go" {
					continue
				}
				if err := numtest.Equal(gi, p.run(newGo(1, cpuKernels[0]))); err != nil {
					t.Errorf("%s: problem %d differs from a lone one-thread Sgemm: %v", name, i, err)
				}
			}
			for i := range ps {
				gap := got[i*strideC+len(p0.c) : (i+1)*strideC]
				if err := numtest.Equal(gap, make([]float32, len(gap))); err != nil {
					t.Fatalf("%s: %s wrote between the blocks of C: %v", name, g.Name(), err)
				}
			}
		}
	}
}

// TestBatchedEmptyK checks that with k = 0 Batched only scales C, without
// slicing A and B by their strides.
func TestBatchedEmptyK(t *testing.T) {
	for _, g := range []Impl{New(2), Reference{}} {
		c := []float32{1, 2, 3, 4, 5, 6, float32(math.NaN()), 8}
		Batched(g, 2, false, false, 2, 2, 0, 1, nil, 1, 100, nil, 2, 100, 0.5, c, 2, 4)
		if err := numtest.Equal(c, []float32{0.5, 1, 1.5, 2, 2.5, 3, float32(math.NaN()), 4}); err != nil {
			t.Errorf("%s: %v", g.Name(), err)
		}
	}
}

func TestBatchParallel(t *testing.T) {
	for _, tc := range []struct {
		batch, workers int
		flops          float64
		want           bool
	}{
		{3, 2, 1e5, true},  // small: always side by side
		{3, 2, 1e9, false}, // big, 3 over 2: 75% busy
		{4, 2, 1e9, true},
		{13, 2, 1e9, true}, // 13 over 2 → 7 rounds: 93% busy
	} {
		if got := batchParallel(tc.batch, tc.workers, tc.flops); got != tc.want {
			t.Errorf("batchParallel(%d, %d, %g) = %v, want %v", tc.batch, tc.workers, tc.flops, got, tc.want)
		}
	}
}

func TestSelect(t *testing.T) {
	for _, choice := range []string{"go", "", "auto", " Go "} {
		g, err := Select(choice, 3)
		if err != nil || g.Name() != "go" || g.Threads() != 3 {
			t.Errorf("Select(%q, 3) = %v, %v; want go with 3 threads", choice, g, err)
		}
	}
	if g, err := Select("openblas", 2); err != nil {
		if !errors.Is(err, ErrOpenBLASUnavailable) {
			t.Errorf("Select(openblas) error %v does not match ErrOpenBLASUnavailable", err)
		}
	} else if g.Name() != "openblas" {
		t.Errorf("Select(openblas) = %s", g.Name())
	}
	if _, err := Select("mkl", 1); err == nil || !strings.Contains(err.Error(), `"mkl"`) {
		t.Errorf("Select(mkl) error = %v", err)
	}
}

func TestNewThreads(t *testing.T) {
	if g := New(0); g.Threads() < 1 {
		t.Errorf("New(0).Threads() = %d", g.Threads())
	}
	if g := New(5); g.Threads() != 5 || g.Name() != "go" {
		t.Errorf("New(5) = %s with %d threads", g.Name(), g.Threads())
	}
	if s := New(4).(Serialer).Serial(); s.Threads() != 1 || s.Name() != "go" {
		t.Errorf("Serial() = %s with %d threads", s.Name(), s.Threads())
	}
}

// TestSharesNotOversubscribed: more goroutines than GOMAXPROCS pack apart.
func TestSharesNotOversubscribed(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	g := newGo(3, cpuKernels[0])
	if g.shares(1200, 1200, 3, 1) {
		t.Error("3 goroutines on GOMAXPROCS 2 share packing")
	}
	if !g.shares(1200, 1200, 2, 1) {
		t.Error("2 goroutines on GOMAXPROCS 2 do not share packing")
	}
}
