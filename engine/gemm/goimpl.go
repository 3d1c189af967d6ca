package gemm

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/memtrain/memtrain/internal/team"
)

// minThreadFlops is the least work, in floating-point operations, worth
// handing to one more goroutine: about 2 µs of one core's time. Below it,
// handing the work over and waiting for it costs more than the thread
// saves (measured: 48³ is faster on one thread, 64³ on two).
const minThreadFlops = 1 << 18

// goGEMM is the pure-Go GEMM: Goto/BLIS-style blocking with packed panels
// around an assembly micro-kernel.
//
// C is split into one rectangle per thread, on the micro-kernel's tile
// grid, and each goroutine runs the whole blocked algorithm on its own
// rectangle with its own packing buffers. Every element of C is therefore
// computed by one goroutine, by the same kernel, summing over k in the same
// order, whatever the thread count: the result is bit-identical for any
// number of threads on the same CPU.
type goGEMM struct {
	threads int
	kern    *microKernel
	// pairs, if not nil, is the kernel of GemmBF16: bf16 operands packed
	// in pairs of k steps (see pairs.go).
	pairs *microKernel
	// pool holds *workspace values: packing buffers sized for kern.
	pool *sync.Pool

	// noSkinny sends every product down the blocked path, and skinnyAny
	// sends down the skinny path products of any m it has kernels for:
	// for tests and benchmarks.
	noSkinny, skinnyAny bool
	// noShare has the goroutines of a row or column of rectangles each
	// pack the operand they all need, as 2-D grids do (see rowsShared):
	// for tests and benchmarks.
	noShare bool

	teamOnce sync.Once
	team     *team.Team // threads−1 workers, started by the first parallel call
}

// New returns the pure-Go GEMM running on up to threads goroutines
// (runtime.GOMAXPROCS(0) when threads ≤ 0). It uses the fastest
// micro-kernel this CPU supports: AVX-512, AVX2+FMA or portable Go.
//
// Products too small to gain from threads (under about 64³) run on the
// calling goroutine. Larger ones split C among the caller and a team of
// threads−1 worker goroutines, started on first use and owned by the Impl;
// between calls the workers poll for 200 µs, yielding to other goroutines
// every microsecond or so, before they sleep, since waking a sleeping one
// costs more than a small product takes. They stop when the Impl is garbage collected.
//
// Products at most skinnyMaxM (16) rows high take the skinny path, which
// does not pack B (see skinny).
//
// The returned Impl also implements Serialer and Teamer. Its results depend only on
// the operands and the CPU's micro-kernel, not on the thread count.
func New(threads int) Impl {
	return newGo(threads, cpuKernels[0])
}

func newGo(threads int, k *microKernel) *goGEMM {
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	return &goGEMM{threads: threads, kern: k, pairs: cpuPairKernel, pool: new(sync.Pool)}
}

// parallel calls f(w) for w = 0, …, n−1, n ≤ g.threads, f(0) on the calling
// goroutine and the others on g's team of workers, or on new goroutines if
// the team is busy with a concurrent call.
func (g *goGEMM) parallel(n int, f func(w int)) {
	if n <= 1 {
		f(0)
		return
	}
	g.Team().Parallel(n, f)
}

// Team returns g's team of threads−1 workers, starting it on first use.
func (g *goGEMM) Team() *team.Team {
	g.teamOnce.Do(func() {
		g.team = team.New(g.threads - 1)
		// The workers do not refer to g: stop them when g goes.
		runtime.AddCleanup(g, (*team.Team).Close, g.team)
	})
	return g.team
}

// Name returns "go".
func (g *goGEMM) Name() string { return "go" }

// Threads returns the most goroutines one Sgemm uses.
func (g *goGEMM) Threads() int { return g.threads }

// Kernel names the micro-kernel in use: "avx512", "avx2" or "generic".
// (Products at most 16 columns wide use the AVX-512 kernel's narrow
// variant.)
func (g *goGEMM) Kernel() string { return g.kern.name }

// Serial returns a single-threaded GEMM sharing g's kernel and buffers.
func (g *goGEMM) Serial() Impl {
	if g.threads == 1 {
		return g
	}
	return &goGEMM{threads: 1, kern: g.kern, pairs: g.pairs, pool: g.pool, noSkinny: g.noSkinny, skinnyAny: g.skinnyAny, noShare: g.noShare}
}

// Sgemm computes C = alpha·op(A)·op(B) + beta·C; see Impl.
func (g *goGEMM) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	checkArgs(transA, transB, m, n, k, a, lda, b, ldb, c, ldc)
	g.sgemm(transA, transB, m, n, k, alpha, operandA{f32: a}, lda, operandB{f32: b}, ldb, beta, c, ldc)
}

// SgemmBF16B computes C = alpha·op(A)·op(B) + beta·C for a B of bfloat16
// values; see BF16BImpl. The blocked path widens B's values as it packs its
// panels, and the skinny path a few rows or a block of B at a time into a
// float32 buffer, so that the kernels, and so the bits of C, are those of
// Sgemm with the widened B.
func (g *goGEMM) SgemmBF16B(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	checkSizes(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	g.sgemm(transA, transB, m, n, k, alpha, operandA{f32: a}, lda, operandB{bf16: b, half: true}, ldb, beta, c, ldc)
}

// sgemm is Sgemm, SgemmBF16B and GemmBF16's widening path after their
// checks. Only a float32 A takes the skinny path.
func (g *goGEMM) sgemm(transA, transB bool, m, n, k int, alpha float32, a operandA, lda int, b operandB, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	if !a.half && g.skinnyB(transA, transB, m, n, k, alpha, a.f32, lda, b, ldb, beta, c, ldc) {
		return
	}
	kn := g.kern
	if kn.narrow != nil && n <= kn.narrow.nr {
		kn = kn.narrow
	}
	g.blocked(kn, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// blocked computes C = alpha·op(A)·op(B) + beta·C with kernel kn on the
// blocked path, m, n, k > 0, C split among the threads; k counts the
// kernel's steps (pairs of k values for a pair kernel).
func (g *goGEMM) blocked(kn *microKernel, transA, transB bool, m, n, k int, alpha float32, a operandA, lda int, b operandB, ldb int, beta float32, c []float32, ldc int) {
	tm, tn := split(m, n, kn.mr, kn.nr, g.workers(m, n, k))
	shared := g.shares(m, n, tm, tn)
	switch {
	case tm*tn == 1:
		g.region(kn, transA, transB, 0, m, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	case shared && tn == 1:
		g.rowsShared(kn, tm, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	case shared:
		g.colsShared(kn, tn, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	// Rectangle (ti, tj) holds tiles [ti·mt/tm, (ti+1)·mt/tm) of the
	// tile rows and likewise for the columns.
	mt, nt := ceilDiv(m, kn.mr), ceilDiv(n, kn.nr)
	g.parallel(tm*tn, func(t int) {
		ti, tj := t/tn, t%tn
		i0, i1 := min(ti*mt/tm*kn.mr, m), min((ti+1)*mt/tm*kn.mr, m)
		j0, j1 := min(tj*nt/tn*kn.nr, n), min((tj+1)*nt/tn*kn.nr, n)
		g.region(kn, transA, transB, i0, i1, j0, j1, k, alpha, a, lda, b, ldb, beta, c, ldc)
	})
}

// workers returns how many goroutines an m×n×k product deserves.
func (g *goGEMM) workers(m, n, k int) int {
	flops := 2 * float64(m) * float64(n) * float64(k)
	return max(1, min(g.threads, int(flops/minThreadFlops)))
}

// region computes rows [i0, i1) and columns [j0, j1) of C with kernel kn on
// the calling goroutine, blocked for the caches:
//
//	for each mc-row block of the region        (A block in L3)
//	  for each kc-deep slice of k
//	    pack the mc×kc block of op(A)
//	    for each nc-column block of the region (B block in L2)
//	      pack the kc×nc block of op(B)
//	      for each mr-row panel of the A block  (A panel in L1)
//	        for each nr-column panel of the B block
//	          micro-kernel: mr×nr tile of C += A panel · B panel
//
// The block sizes are the kernel's, evened out so that no block is much
// smaller than the others. The k slices depend on k alone, so every
// element of C sums its products in the same order in any region.
func (g *goGEMM) region(kn *microKernel, transA, transB bool, i0, i1, j0, j1, k int, alpha float32, a operandA, lda int, b operandB, ldb int, beta float32, c []float32, ldc int) {
	mr, nr := kn.mr, kn.nr
	kcMax := evenBlock(k, kn.kc, 1)
	mcMax := evenBlock(i1-i0, kn.mc, mr)
	ncMax := evenBlock(j1-j0, kn.nc, nr)
	ws := g.workspace(mcMax*kcMax, ncMax*kcMax, mr*nr)
	defer g.pool.Put(ws)
	for ic := i0; ic < i1; ic += mcMax {
		mc := min(mcMax, i1-ic)
		for pc := 0; pc < k; pc += kcMax {
			kc := min(kcMax, k-pc)
			a.pack(ws.a, mr, transA, lda, ic, pc, mc, kc, alpha)
			sweepB(kn, ws, ws.a, transB, b, ldb, pc, kc, ic, mc, j0, j1, ncMax, sliceBeta(beta, pc), c, ldc)
		}
	}
}

// sweepB runs a packed mc×kc block of op(A), ap, against columns [j0, j1)
// of op(B)'s k slice [pc, pc+kc), packing it into ws.b ncMax columns at a
// time: C's rows [ic, ic+mc) of those columns get bet·C + the product.
func sweepB(kn *microKernel, ws *workspace, ap []float32, transB bool, b operandB, ldb, pc, kc, ic, mc, j0, j1, ncMax int, bet float32, c []float32, ldc int) {
	for jc := j0; jc < j1; jc += ncMax {
		nc := min(ncMax, j1-jc)
		b.pack(ws.b, kn.nr, transB, ldb, pc, jc, kc, nc)
		macro(kn, ws.tile, ap, ws.b, ic, mc, jc, nc, kc, c, ldc, bet)
	}
}

// sliceBeta is the beta of the k slice starting at pc: beta for the
// first, which scales C, and 1 for the others, which add to it.
func sliceBeta(beta float32, pc int) float32 {
	if pc > 0 {
		return 1
	}
	return beta
}

// macro runs kn over a packed mc×kc block of op(A), ap, and kc×nc block
// of op(B), bp: C's rows [ic, ic+mc) and columns [jc, jc+nc) get
// bet·C + the block's product, mr×nr tile by tile. Edge tiles go through
// tile (mr·nr values), so that their elements get the same arithmetic as
// the others.
func macro(kn *microKernel, tile, ap, bp []float32, ic, mc, jc, nc, kc int, c []float32, ldc int, bet float32) {
	mr, nr, fn := kn.mr, kn.nr, kn.fn
	for ir := 0; ir < mc; ir += mr {
		rows := min(mr, mc-ir)
		a := &ap[ir*kc]
		for jr := 0; jr < nc; jr += nr {
			cols := min(nr, nc-jr)
			b := &bp[jr*kc]
			ci := (ic+ir)*ldc + jc + jr
			if rows == mr && cols == nr {
				fn(kc, a, b, &c[ci], ldc, bet)
				continue
			}
			clear(tile)
			if bet != 0 {
				for r := 0; r < rows; r++ {
					copy(tile[r*nr:r*nr+cols], c[ci+r*ldc:])
				}
			}
			fn(kc, a, b, &tile[0], nr, bet)
			for r := 0; r < rows; r++ {
				copy(c[ci+r*ldc:ci+r*ldc+cols], tile[r*nr:])
			}
		}
	}
}

// shares reports whether the tm×tn rectangles of an m×n product share the
// packing of one operand (rowsShared, colsShared): a row of rectangles
// shares op(B) and a column op(A), when that operand is at least half as
// wide (tall) as a rectangle h rows high (w wide): each goroutine then
// packs h + n/t values a k step instead of h + n, at least a sixth less on
// 2 threads. Thinner, the saving is less than the barriers cost (measured
// on the LM head's 2048×256×32000 and 32000×256×2048 products on 2
// threads, interleaved against packing apart: 0–8% slower).
//
// Nor do more goroutines than GOMAXPROCS share: those that run must wait
// at each barrier for those that cannot (measured: 517×301×413 on 3
// goroutines and 2 cores, 35 GFLOP/s shared against 61 apart).
func (g *goGEMM) shares(m, n, tm, tn int) bool {
	switch {
	case g.noShare || tm*tn == 1 || tm*tn > runtime.GOMAXPROCS(0):
		return false
	case tn == 1:
		return 2*n >= ceilDiv(m, tm)
	case tm == 1:
		return 2*m >= ceilDiv(n, tn)
	}
	return false
}

// evenBlock returns the block size, a multiple of unit, that cuts n into as
// few blocks of at most limit (rounded up to unit) as possible, all of about
// the same size.
func evenBlock(n, limit, unit int) int {
	if n <= 0 {
		return unit
	}
	blocks := ceilDiv(n, limit)
	return ceilDiv(ceilDiv(n, blocks), unit) * unit
}

// workspace is one goroutine's packing buffers.
type workspace struct {
	a, b, tile []float32
}

// workspace takes a workspace from g's pool with room for at least na, nb
// and nt values in its A, B and tile buffers.
func (g *goGEMM) workspace(na, nb, nt int) *workspace {
	ws, _ := g.pool.Get().(*workspace)
	if ws == nil {
		ws = new(workspace)
	}
	if len(ws.a) < na {
		ws.a = alignedFloats(na)
	}
	if len(ws.b) < nb {
		ws.b = alignedFloats(nb)
	}
	if cap(ws.tile) < nt {
		ws.tile = alignedFloats(nt)
	}
	ws.tile = ws.tile[:nt]
	return ws
}

// alignedFloats returns n zeroed float32s starting on a 64-byte boundary,
// the width of a cache line and of a zmm register.
func alignedFloats(n int) []float32 {
	const align = 64 / 4
	s := make([]float32, n+align)
	off := int(uintptr(unsafe.Pointer(unsafe.SliceData(s)))%64) / 4
	if off != 0 {
		off = align - off
	}
	return s[off : off+n : off+n]
}

// packWeight is the time to pack one element of A or B, in units of one
// multiply-add of the micro-kernel: a packed element costs about 0.3 ns,
// a kernel core does about 50 multiply-adds a nanosecond.
const packWeight = 16

// split chooses a grid of tm×tn rectangles, at most threads of them, for an
// m×n product cut on an mr×nr tile grid: the grid whose largest rectangle
// costs least, counting for each k step its h·w multiply-adds and the h + w
// elements of A and B its goroutine packs (packWeight each), and among
// those the one whose rectangles are most square. Counting the packing
// matters for thin products with a long k: splitting the 256 columns of a
// 2048×256×32000 product in two would have each goroutine pack all of A.
func split(m, n, mr, nr, threads int) (tm, tn int) {
	mt, nt := ceilDiv(m, mr), ceilDiv(n, nr)
	tm, tn = 1, 1
	cost := func(h, w int) int { return h*w + packWeight*(h+w) }
	bestCost, bestPerim := cost(mt*mr, nt*nr), mt*mr+nt*nr
	for t := 2; t <= threads; t++ {
		for p := 1; p <= t; p++ {
			if t%p != 0 {
				continue
			}
			q := t / p
			if p > mt || q > nt {
				continue
			}
			h, w := ceilDiv(mt, p)*mr, ceilDiv(nt, q)*nr
			if c, perim := cost(h, w), h+w; c < bestCost || c == bestCost && perim < bestPerim {
				tm, tn, bestCost, bestPerim = p, q, c, perim
			}
		}
	}
	return tm, tn
}

// scale sets C = beta·C, clearing it (NaNs included) when beta is 0.
func scale(m, n int, beta float32, c []float32, ldc int) {
	if beta == 1 {
		return
	}
	for i := 0; i < m; i++ {
		row := c[i*ldc : i*ldc+n]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
}

// checkArgs panics, as BLAS implementations do, if the dimensions are
// negative, a leading dimension is shorter than its row or a slice is too
// short for the matrix it holds.
func checkArgs(transA, transB bool, m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	checkSizes(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
}

// checkSizes is checkArgs with the lengths of the slices.
func checkSizes(transA, transB bool, m, n, k int, na, lda, nb, ldb, nc, ldc int) {
	if m < 0 || n < 0 || k < 0 {
		panic(fmt.Sprintf("gemm: negative dimension m=%d n=%d k=%d", m, n, k))
	}
	ar, ac, br, bc := storedShapes(transA, transB, m, n, k)
	check := func(name string, size, rows, cols, ld int) {
		if ld < max(1, cols) {
			panic(fmt.Sprintf("gemm: ld%s = %d is less than the %d columns of %s", name, ld, cols, name))
		}
		if rows > 0 && cols > 0 && size < (rows-1)*ld+cols {
			panic(fmt.Sprintf("gemm: %s has %d elements, too few for %d×%d with stride %d", name, size, rows, cols, ld))
		}
	}
	if m > 0 && n > 0 && k > 0 {
		check("a", na, ar, ac, lda)
		check("b", nb, br, bc, ldb)
	}
	check("c", nc, m, n, ldc)
}

// storedShapes returns the rows and columns A and B are stored in: op(A)
// is m×k, so A is stored k×m when transposed, and op(B) is k×n.
func storedShapes(transA, transB bool, m, n, k int) (ar, ac, br, bc int) {
	ar, ac, br, bc = m, k, k, n
	if transA {
		ar, ac = ac, ar
	}
	if transB {
		br, bc = bc, br
	}
	return ar, ac, br, bc
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
