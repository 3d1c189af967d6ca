package gemm

import (
	"math"
)

// Products by a bfloat16 B: C = alpha·op(A)·op(B) + beta·C with A and C
// float32 and B bf16 (the bit patterns, each the upper half of a float32),
// for frozen weights kept in their checkpoint's dtype (a LoRA's base
// model) at half the memory and with no float32 copy. A bf16 value widens
// to float32 exactly (a 16-bit shift), so the product is defined as the
// float32 one with the widened B, and computed as it: the Go path widens
// the values while it packs the panels of B, which it packs anyway, and
// then runs the same kernels on the same panels, so the bits of C are
// those of Sgemm with the widened B. Other Impls (gonum, OpenBLAS) get a
// widened float32 copy of B, made for the call.

// BF16BImpl is implemented by an Impl that multiplies by a bf16 B itself,
// without a float32 copy of it: the Go path (New). SgemmBF16B and
// BatchedBF16B use it when an Impl has it.
type BF16BImpl interface {
	// SgemmBF16B computes C = alpha·op(A)·op(B) + beta·C as Sgemm does,
	// with each element of B the bf16 bit pattern of its value, and
	// gives the bits Sgemm gives with the widened B.
	SgemmBF16B(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int)
}

// SgemmBF16B computes C = alpha·op(A)·op(B) + beta·C with g, as g.Sgemm
// does, for a B of bf16 bit patterns (ldb counting bf16 elements): with
// g's own SgemmBF16B when g is a BF16BImpl (the Go path, which widens B's
// values while packing them), else by widening the stored B into a
// temporary float32 copy, with the same row stride, for g.Sgemm — the
// same result, at the cost of that copy. Either way the result is
// g.Sgemm's with the widened B.
func SgemmBF16B(g Impl, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if h, ok := g.(BF16BImpl); ok {
		h.SgemmBF16B(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	checkSizes(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	var wide []float32
	if m > 0 && n > 0 && k > 0 {
		wide = widenedMatrix(b, transB, k, n, ldb)
	}
	g.Sgemm(transA, transB, m, n, k, alpha, a, lda, wide, ldb, beta, c, ldc)
}

// BatchedBF16B is Batched for a B of bf16 bit patterns: each problem is
// computed as SgemmBF16B computes it. When g is a BF16BImpl, the problems
// run as Batched runs them, each by g's SgemmBF16B (or its Serial
// version's); otherwise the whole of B the batch reads, from its first
// element to the last, is widened once into a temporary float32 copy with
// the same strides, for Batched.
func BatchedBF16B(g Impl, batch int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []uint16, ldb, strideB int, beta float32, c []float32, ldc, strideC int) {
	checkBatch(batch, transA, transB, m, n, k, len(a), lda, strideA, len(b), ldb, strideB, len(c), ldc, strideC)
	if batch == 0 || m == 0 || n == 0 {
		return
	}
	if _, ok := g.(BF16BImpl); !ok && k > 0 {
		_, _, br, bc := storedShapes(transA, transB, m, n, k)
		wide := make([]float32, batchSpan("b", len(b), batch, strideB, br, bc, ldb))
		widenBF16(wide, b)
		Batched(g, batch, transA, transB, m, n, k, alpha, a, lda, strideA, wide, ldb, strideB, beta, c, ldc, strideC)
		return
	}
	if k == 0 {
		for i := 0; i < batch; i++ {
			SgemmBF16B(g, transA, transB, m, n, k, alpha, nil, max(1, lda), nil, max(1, ldb), beta, c[i*strideC:], ldc)
		}
		return
	}
	spread(g, batch, m, n, k, func(impl Impl, i int) {
		SgemmBF16B(impl, transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
	})
}

// bf16ToFloat32 widens a bfloat16 bit pattern to the float32 it is the
// upper half of: exact (checkpoints.BF16ToFloat32, which a test compares).
func bf16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// widenBF16 sets dst[i] to src[i] widened, for i < len(dst).
func widenBF16(dst []float32, src []uint16) {
	src = src[:len(dst)]
	for i, h := range src {
		dst[i] = bf16ToFloat32(h)
	}
}

// operandB is the B operand of the Go path: float32 values, bf16 ones
// (half) widened as they are packed, or bf16 ones (pairs) packed in pairs
// of k steps for a pair kernel, k being then the product's depth in values
// (see operandA).
type operandB struct {
	f32         []float32
	bf16        []uint16
	half, pairs bool
	k           int
}

// pack is packB for any operandB: the kc×nc block of op(B) at k step p0
// (pairs for a pair operand) and column j0 into dst's ⌈nc/nr⌉ panels.
func (o operandB) pack(dst []float32, nr int, transB bool, ldb, p0, j0, kc, nc int) {
	switch {
	case o.pairs:
		packPairs(dst, nr, transB, o.bf16, ldb, j0, p0, kc, nc, o.k)
	case o.half:
		packPanelsBF16(dst, nr, transB, o.bf16, ldb, j0, p0, kc, nc)
	default:
		packB(dst, nr, transB, o.f32, ldb, p0, j0, kc, nc)
	}
}

// packRowsBF16 is packRows (alpha 1) from bf16 source rows: step p of
// panel q gets src[p·ld+q·w : p·ld+q·w+w] widened, zero-padded past n.
func packRowsBF16(dst []float32, w int, src []uint16, ld, kc, n int) {
	if !packRowsBF16Fast(dst, w, src, ld, kc, n) {
		packRowsBF16Go(dst, w, src, ld, kc, n)
	}
}

// packRowsBF16Go is packRowsBF16 in portable Go.
func packRowsBF16Go(dst []float32, w int, src []uint16, ld, kc, n int) {
	full := n / w * w
	if rem := n - full; rem > 0 {
		clear(dst[full*kc : full*kc+w*kc])
	}
	for p := 0; p < kc; p++ {
		s := src[p*ld : p*ld+n]
		j := 0
		if w == 16 {
			for ; j < full; j += 16 {
				d, h := (*[16]float32)(dst[j*kc+p*16:]), (*[16]uint16)(s[j:])
				for i := range d {
					d[i] = bf16ToFloat32(h[i])
				}
			}
		}
		for ; j < n; j += w {
			widenBF16(dst[j*kc+p*w:j*kc+p*w+min(w, n-j)], s[j:])
		}
	}
}

// packColsBF16 is packCols (alpha 1) from n ≤ w bf16 source rows: step p
// gets src[i·ld+p] widened for i < n. Its last w−n values must be zero:
// the caller clears the panel when n < w.
func packColsBF16(panel []float32, w int, src []uint16, ld, kc, n int) {
	if !packColsBF16Fast(panel, w, src, ld, kc, n) {
		packColsBF16Go(panel, w, src, ld, kc, n)
	}
}

// packColsBF16Go is packColsBF16 in portable Go, blocked as packColsGo.
func packColsBF16Go(panel []float32, w int, src []uint16, ld, kc, n int) {
	const bk = 8
	p := 0
	for ; p+bk <= kc; p += bk {
		d := panel[p*w : (p+bk)*w]
		i := 0
		for ; i+4 <= n; i += 4 {
			s0 := (*[bk]uint16)(src[i*ld+p:])
			s1 := (*[bk]uint16)(src[(i+1)*ld+p:])
			s2 := (*[bk]uint16)(src[(i+2)*ld+p:])
			s3 := (*[bk]uint16)(src[(i+3)*ld+p:])
			for q := 0; q < bk; q++ {
				o := (*[4]float32)(d[q*w+i:])
				o[0], o[1] = bf16ToFloat32(s0[q]), bf16ToFloat32(s1[q])
				o[2], o[3] = bf16ToFloat32(s2[q]), bf16ToFloat32(s3[q])
			}
		}
		for ; i < n; i++ {
			s := (*[bk]uint16)(src[i*ld+p:])
			for q := 0; q < bk; q++ {
				d[q*w+i] = bf16ToFloat32(s[q])
			}
		}
	}
	for ; p < kc; p++ {
		d := panel[p*w : p*w+n]
		for i := range d {
			d[i] = bf16ToFloat32(src[i*ld+p])
		}
	}
}

// skinnyWiden is about the most values the skinny path widens into its
// buffer at a time: 128 KiB of float32, to be read again from L2.
const skinnyWiden = 1 << 15

// widenRows is the granule, in rows of B, of dotRangeBF16's buffer: a
// multiple of every dot kernel's nb (8, 6, 4, 3, 2), so that the full
// kernels take the rows as they would from B itself.
const widenRows = 24

// dotRangeBF16 is dotRange for a bf16 B: the rows of B are widened into a
// float32 buffer, a few at a time, and dotRange multiplies by the buffer.
// Its kernels' arithmetic on an element of C depends on k alone, not on
// where its row of B lies, so C gets dotRange's bits on the widened B.
func (g *goGEMM) dotRangeBF16(kf *dotKernels, m, j0, j1, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if j0 >= j1 {
		return
	}
	rows := min(max(1, skinnyWiden/(k*widenRows))*widenRows, j1-j0)
	ws := g.workspace(0, rows*k, 0)
	defer g.pool.Put(ws)
	buf := ws.b[:rows*k]
	for jc := j0; jc < j1; jc += rows {
		je := min(jc+rows, j1)
		for j := jc; j < je; j++ {
			widenBF16(buf[(j-jc)*k:(j-jc+1)*k], b[j*ldb:])
		}
		dotRange(kf, m, 0, je-jc, k, alpha, a, lda, buf, k, beta, c[jc:], ldc)
	}
}

// axpyRangeBF16 is axpyRange for a bf16 B: for each of axpyRange's blocks
// of k in turn, blocks of at most axpyChunk columns of B are widened into
// a float32 buffer and axpyRange multiplies by them, over that one block of
// k (beta on the first, 1 after). An axpy kernel's arithmetic on an
// element of C does not depend on the columns around it, so C gets
// axpyRange's bits on the widened B.
func (g *goGEMM) axpyRangeBF16(kf *axpyKernels, m, j0, j1, k int, alpha float32, a []float32, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if j0 >= j1 {
		return
	}
	kcMax := evenBlock(k, axpyKC, 1)
	cols := min(axpyChunk, j1-j0)
	ws := g.workspace(0, kcMax*cols, 0)
	defer g.pool.Put(ws)
	for pc := 0; pc < k; pc += kcMax {
		kc := min(kcMax, k-pc)
		bet := beta
		if pc > 0 {
			bet = 1
		}
		for jc := j0; jc < j1; jc += cols {
			w := min(cols, j1-jc)
			buf := ws.b[:kc*w]
			for p := 0; p < kc; p++ {
				widenBF16(buf[p*w:(p+1)*w], b[(pc+p)*ldb+jc:])
			}
			axpyRange(kf, m, 0, w, kc, alpha, a[pc:], lda, buf, w, bet, c[jc:], ldc)
		}
	}
}
