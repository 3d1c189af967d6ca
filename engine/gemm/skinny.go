package gemm

import "unsafe"

// The skinny path: products with few rows of C, as when decoding a batch
// of a few sequences, C[B,out] = x[B,in]·Wᵀ with W[out,in] as Linear layers
// store it. There each element of B is used only m times, so that packing
// B (a transpose, for Wᵀ) costs more than the product itself. The skinny
// path does not pack B: it streams each row of B (transB) or each row of a
// block of columns of B (not transB) once from memory and multiplies it
// with the m rows of A held in registers and L1.
//
// Its kernels sum each element of C in an order fixed by k alone, and every
// kernel of a family (the block shapes of one instruction set) performs the
// same arithmetic on a given element, so the result does not depend on how
// C is cut among threads or blocks: for a given (m, n, k) the bits are the
// same for any thread count. They differ from the blocked path's, whose
// rounding differs, and between instruction sets.

// dotKernel computes an mb×nb block of C = alpha·A·Bᵀ + beta·C from mb rows
// of A (row stride lda) and nb rows of B (row stride ldb), k long, for the
// mb and nb of its table entry; C has row stride ldc. With beta = 0, C is
// not read.
//
// Each element is summed as follows, the same in every kernel of a family:
// W lanes (16 for AVX-512, 8 for AVX2, 4 for Go), lane l accumulating the
// products of k indices p ≡ l (mod W) in increasing p with one fused (or,
// in Go, unfused) multiply-add each; then the lanes are added pairwise by a
// fixed tree (lanes l and l+W/2, then l and l+W/4, …); finally alpha·sum +
// beta·C.
type dotKernel func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32)

// dotKernels is a family of dot kernels.
type dotKernels struct {
	name  string
	maxMB int // the most rows of A a kernel takes
	// nb[mb] is the number of rows of B of full[mb]; each divides
	// skinnyChunk.
	nb []int
	// full[mb] is the mb×nb[mb] kernel, one[mb] the mb×1 kernel for the
	// rows of B left over.
	full, one []dotKernel
}

// axpyKernel computes an mb×cols block of C = alpha·A·B + beta·C from mb
// rows of A (row stride lda) and a k×cols block of B (row stride ldb),
// cols ≤ 16·nv[mb]: for p < k in increasing order, acc[i][j] +=
// A[i,p]·B[p,j] (one fused multiply-add each), then alpha·acc + beta·C.
// With beta = 0, C is not read.
type axpyKernel func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32, cols int)

// axpyKernels is a family of axpy kernels: k[mb] takes mb rows of A and up
// to 16·nv[mb] columns of B.
type axpyKernels struct {
	maxMB int
	nv    []int
	k     []axpyKernel
}

// skinnyMaxM is the most rows of C (m) the skinny path takes; above it the
// blocked path's packing starts to pay for itself. Measured on 2 cores of
// an AVX-512 Xeon (BenchmarkSkinnyCrossover, fastest of several runs), the
// skinny path was, with transB, 2.7× faster than the blocked one at m = 8
// (n×k = 1024×384, 384×1024), 1.5–2.7× at 12–16, 1.2–1.5× at 20–24 and
// 0.8–1.5× at 32, and 1.3–1.6× faster at 16 on 4096×4096 (B 64 MB); without
// transB, 2.6–3.2× at 8, 1.3–1.6× at 12–16 on the small shapes, and about
// even on 4096×4096.
const skinnyMaxM = 16

// skinnyChunk is the granule, in rows of B, in which the transB skinny
// path cuts n among threads: a multiple of every dot kernel's nb, so that
// only the last thread has rows left over for the mb×1 kernels.
const skinnyChunk = 48

// skinny computes C = alpha·op(A)·op(B) + beta·C on the skinny path and
// reports true, or reports false, doing nothing, if the product is not for
// it: m above skinnyMaxM, or no kernels for its transB on this CPU (the Go
// kernels do the transB case only). Arguments are as for Sgemm, already
// checked, with m, n, k > 0 and alpha ≠ 0.
func (g *goGEMM) skinny(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) bool {
	return g.skinnyB(transA, transB, m, n, k, alpha, a, lda, operandB{f32: b}, ldb, beta, c, ldc)
}

// skinnyB is skinny for a B of either type: a bf16 B is widened a few rows
// (transB) or a block (not transB) at a time into a float32 buffer that the
// same kernels read, so that the result is skinny's on the widened B.
func (g *goGEMM) skinnyB(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b operandB, ldb int, beta float32, c []float32, ldc int) bool {
	kn := g.kern
	if g.noSkinny || m > skinnyMaxM && !g.skinnyAny {
		return false
	}
	var dot *dotKernels
	var axpy *axpyKernels
	if transB {
		if dot = kn.dot; dot == nil {
			return false
		}
	} else if axpy = kn.axpy; axpy == nil {
		return false
	}
	if transA {
		// The kernels read rows of op(A): transpose A (k×m) into an
		// m×k copy, m·k values against the product's m·n·k.
		ws := g.workspace(m*k, 0, 0)
		defer g.pool.Put(ws)
		at := ws.a[:m*k]
		for p := 0; p < k; p++ {
			row := a[p*lda : p*lda+m]
			for i, v := range row {
				at[i*k+p] = v
			}
		}
		a, lda = at, k
	}
	gran := skinnyChunk
	if !transB {
		gran = axpyChunk
	}
	chunks := ceilDiv(n, gran)
	workers := min(g.workers(m, n, k), chunks)
	run := func(w int) {
		j0 := min(w*chunks/workers*gran, n)
		j1 := min((w+1)*chunks/workers*gran, n)
		switch {
		case b.half && transB:
			g.dotRangeBF16(dot, m, j0, j1, k, alpha, a, lda, b.bf16, ldb, beta, c, ldc)
		case b.half:
			g.axpyRangeBF16(axpy, m, j0, j1, k, alpha, a, lda, b.bf16, ldb, beta, c, ldc)
		case transB:
			dotRange(dot, m, j0, j1, k, alpha, a, lda, b.f32, ldb, beta, c, ldc)
		default:
			axpyRange(axpy, m, j0, j1, k, alpha, a, lda, b.f32, ldb, beta, c, ldc)
		}
	}
	if workers <= 1 {
		run(0)
	} else {
		g.parallel(workers, run)
	}
	return true
}

// rowBlocks cuts m rows into the fewest blocks of at most maxMB rows, of
// sizes differing by at most one, and calls f for each.
func rowBlocks(m, maxMB int, f func(i0, mb int)) {
	nblk := ceilDiv(m, maxMB)
	for q := 0; q < nblk; q++ {
		i0, i1 := q*m/nblk, (q+1)*m/nblk
		f(i0, i1-i0)
	}
}

// dotRange computes columns [j0, j1) of C (rows j0… of B) with family kf.
func dotRange(kf *dotKernels, m, j0, j1, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if j0 >= j1 {
		return
	}
	// Bounds: every row read or written, up to its last element.
	_ = a[(m-1)*lda+k-1]
	_ = b[(j1-1)*ldb+k-1]
	_ = c[(m-1)*ldc+j1-1]
	// With more than one block of rows of A, B is taken a chunk of rows
	// at a time, small enough to stay in L1 or L2 while each block of A
	// sweeps it.
	chunk := j1 - j0
	if m > kf.maxMB {
		chunk = max(1, 16384/(k*skinnyChunk)) * skinnyChunk
	}
	for jc := j0; jc < j1; jc += chunk {
		je := min(jc+chunk, j1)
		rowBlocks(m, kf.maxMB, func(i0, mb int) {
			full, one, nb := kf.full[mb], kf.one[mb], kf.nb[mb]
			ap := &a[i0*lda]
			j := jc
			for ; j+nb <= je; j += nb {
				full(k, ap, lda, &b[j*ldb], ldb, &c[i0*ldc+j], ldc, alpha, beta)
			}
			for ; j < je; j++ {
				one(k, ap, lda, &b[j*ldb], ldb, &c[i0*ldc+j], ldc, alpha, beta)
			}
		})
	}
}

// axpyKC is the most rows of B an axpy kernel call sweeps. A kernel reads
// a short run of each row of B, and with rows far apart (n large) each run
// is on its own page: the next block of columns should find those pages
// in the TLB.
const axpyKC = 256

// axpyRange computes columns [j0, j1) of C with family kf, k cut into
// blocks of at most axpyKC steps that depend on k alone: for each block in
// turn, C = alpha·(A·B over the block) + beta·C, beta 1 after the first.
// With more than one block of rows of A, the columns are taken
// axpyChunk at a time, so that the block of B they span stays in L2 while
// each block of A sweeps it.
func axpyRange(kf *axpyKernels, m, j0, j1, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if j0 >= j1 {
		return
	}
	_ = a[(m-1)*lda+k-1]
	_ = b[(k-1)*ldb+j1-1]
	_ = c[(m-1)*ldc+j1-1]
	kcMax := evenBlock(k, axpyKC, 1)
	chunk := j1 - j0
	if m > kf.maxMB {
		chunk = axpyChunk
	}
	for pc := 0; pc < k; pc += kcMax {
		kc := min(kcMax, k-pc)
		bet := beta
		if pc > 0 {
			bet = 1
		}
		for jc := j0; jc < j1; jc += chunk {
			je := min(jc+chunk, j1)
			rowBlocks(m, kf.maxMB, func(i0, mb int) {
				fn, w := kf.k[mb], 16*kf.nv[mb]
				ap := &a[i0*lda+pc]
				for j := jc; j < je; j += w {
					fn(kc, ap, lda, &b[pc*ldb+j], ldb, &c[i0*ldc+j], ldc, alpha, bet, min(w, je-j))
				}
			})
		}
	}
}

// axpyChunk is the width of the blocks of columns of axpyRange, and the
// granule in which the skinny path cuts n among threads without transB: a
// multiple of every axpy kernel's width (48 and 64).
const axpyChunk = 192

// goDot is the portable dot kernel family: mb ≤ 4 rows of A by nb ≤ 4
// rows of B, each element summed in four lanes.
var goDot = func() *dotKernels {
	kf := &dotKernels{name: "generic", maxMB: 4, nb: []int{0, 4, 4, 4, 4}}
	kf.full = make([]dotKernel, 5)
	kf.one = make([]dotKernel, 5)
	for mb := 1; mb <= 4; mb++ {
		kf.full[mb] = func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32) {
			dotGo(mb, 4, k, a, lda, b, ldb, c, ldc, alpha, beta)
		}
		kf.one[mb] = func(k int, a *float32, lda int, b *float32, ldb int, c *float32, ldc int, alpha, beta float32) {
			dotGo(mb, 1, k, a, lda, b, ldb, c, ldc, alpha, beta)
		}
	}
	return kf
}()

// dotGo computes an mb×nb block of C = alpha·A·Bᵀ + beta·C, each element as
// four lanes of k indices p ≡ l (mod 4), (s0+s2)+(s1+s3), then
// alpha·sum + beta·C.
func dotGo(mb, nb, k int, ap *float32, lda int, bp *float32, ldb int, cp *float32, ldc int, alpha, beta float32) {
	a := unsafe.Slice(ap, (mb-1)*lda+k)
	b := unsafe.Slice(bp, (nb-1)*ldb+k)
	c := unsafe.Slice(cp, (mb-1)*ldc+nb)
	for j := 0; j < nb; j++ {
		bj := b[j*ldb : j*ldb+k : j*ldb+k]
		for i := 0; i < mb; i++ {
			ai := a[i*lda : i*lda+k : i*lda+k]
			var s0, s1, s2, s3 float32
			p := 0
			for ; p+4 <= k; p += 4 {
				x, y := ai[p:p+4:p+4], bj[p:p+4:p+4]
				s0 += x[0] * y[0]
				s1 += x[1] * y[1]
				s2 += x[2] * y[2]
				s3 += x[3] * y[3]
			}
			if p < k {
				s0 += ai[p] * bj[p]
			}
			if p+1 < k {
				s1 += ai[p+1] * bj[p+1]
			}
			if p+2 < k {
				s2 += ai[p+2] * bj[p+2]
			}
			s := float32(s0+s2) + float32(s1+s3)
			ci := &c[i*ldc+j]
			switch beta {
			case 0:
				*ci = alpha * s
			case 1:
				*ci = alpha*s + *ci
			default:
				*ci = float32(alpha*s) + beta**ci
			}
		}
	}
}
