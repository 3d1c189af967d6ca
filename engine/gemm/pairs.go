package gemm

import (
	"math"
	"unsafe"
)

// Products of two bfloat16 operands: C = alpha·op(A)·op(B) + beta·C with A
// and B bf16 (bit patterns) and C float32, the GEMM of bf16 mixed
// precision. The product of two bf16 values is exact in float32 (8-bit
// significands make a 16-bit one), so the result is defined as the sum of
// the exact products in float32, in an order each Impl chooses: a bf16
// product is as accurate as the float32 one on the widened operands.
//
// On a CPU with AVX512_BF16 the Go path multiplies them natively, at twice
// the multiply-adds an instruction of its float32 kernel does: both
// operands are packed in pairs of k steps (two bf16 values, k steps 2q and
// 2q+1, in one 32-bit word, the first in the low half), and the
// micro-kernel's VDPBF16PS adds each pair's two products to a float32
// accumulator one at a time, rounding after each, the second of the pair
// first. The instruction treats subnormal inputs and results as zero (it
// ignores MXCSR), so a product whose operands or partial sums are below
// float32's smallest normal (1.2e-38) loses them: for activations and
// weights, which are far above it, the results are those of the order
// above. Everywhere else, and for alpha ≠ 1 or products too thin for the
// pair kernel's tiles, the Go path widens the values exactly while it packs
// them (or, for a few rows, into a copy) and runs its float32 kernels.
// Other Impls get float32 copies of both operands.

// BF16Impl is implemented by an Impl that multiplies two bf16 operands
// itself: the Go path (New). GemmBF16 and BatchedBF16 use it when an Impl
// has it.
type BF16Impl interface {
	// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C as Sgemm does,
	// with every element of A and B the bf16 bit pattern of its value
	// (lda and ldb counting bf16 elements).
	GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int)
}

// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C with g for A and B of
// bf16 bit patterns and a float32 C: with g's own GemmBF16 when g is a
// BF16Impl, else by g.Sgemm on float32 copies of A and B made for the
// call.
func GemmBF16(g Impl, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	if h, ok := g.(BF16Impl); ok {
		h.GemmBF16(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	checkSizes(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	var wa, wb []float32
	if m > 0 && n > 0 && k > 0 {
		wa, wb = widenedMatrix(a, transA, m, k, lda), widenedMatrix(b, transB, k, n, ldb)
	}
	g.Sgemm(transA, transB, m, n, k, alpha, wa, lda, wb, ldb, beta, c, ldc)
}

// widenedMatrix returns a float32 copy of the stored matrix behind an r×c op(X)
// (c×r when trans) with row stride ld, up to its last element.
func widenedMatrix(x []uint16, trans bool, r, c, ld int) []float32 {
	if trans {
		r, c = c, r
	}
	w := make([]float32, (r-1)*ld+c)
	widenBF16(w, x)
	return w
}

// BatchedBF16 is Batched for A and B of bf16 bit patterns: each problem is
// computed by GemmBF16, spread over the threads as Batched spreads them.
func BatchedBF16(g Impl, batch int, transA, transB bool, m, n, k int, alpha float32, a []uint16, lda, strideA int, b []uint16, ldb, strideB int, beta float32, c []float32, ldc, strideC int) {
	checkBatch(batch, transA, transB, m, n, k, len(a), lda, strideA, len(b), ldb, strideB, len(c), ldc, strideC)
	if batch == 0 || m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := 0; i < batch; i++ {
			GemmBF16(g, transA, transB, m, n, k, alpha, nil, max(1, lda), nil, max(1, ldb), beta, c[i*strideC:], ldc)
		}
		return
	}
	spread(g, batch, m, n, k, func(impl Impl, i int) {
		GemmBF16(impl, transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
	})
}

// GemmBF16 computes C = alpha·op(A)·op(B) + beta·C for bf16 A and B; see
// BF16Impl and the comment at the top of pairs.go. Its results, too, do
// not depend on the thread count.
func (g *goGEMM) GemmBF16(transA, transB bool, m, n, k int, alpha float32, a []uint16, lda int, b []uint16, ldb int, beta float32, c []float32, ldc int) {
	checkSizes(transA, transB, m, n, k, len(a), lda, len(b), ldb, len(c), ldc)
	if m == 0 || n == 0 {
		return
	}
	if k == 0 || alpha == 0 {
		scale(m, n, beta, c, ldc)
		return
	}
	pk := g.pairs
	hb := operandB{bf16: b, half: true}
	switch {
	case pk != nil && alpha == 1 && m > skinnyMaxM && 2*n > pk.nr:
		pa := operandA{bf16: a, pairs: true, k: k}
		pb := operandB{bf16: b, pairs: true, k: k}
		g.blocked(pk, transA, transB, m, n, ceilDiv(k, 2), 1, pa, lda, pb, ldb, beta, c, ldc)
	case alpha == 1 && m > skinnyMaxM:
		// The widening packers take no alpha.
		g.sgemm(transA, transB, m, n, k, 1, operandA{bf16: a, half: true}, lda, hb, ldb, beta, c, ldc)
	default:
		// A few rows (the skinny path reads A unpacked) or a scaled
		// product: a float32 copy of A, m·k values.
		g.sgemm(transA, transB, m, n, k, alpha, operandA{f32: widenedMatrix(a, transA, m, k, lda)}, lda, hb, ldb, beta, c, ldc)
	}
}

// operandA is the A operand of the Go path: float32 values; bf16 ones
// (half) widened as they are packed, alpha 1; or bf16 ones (pairs) packed
// in pairs of k steps for a pair kernel, alpha 1, where k is the depth of
// the product in values and the packing's k indices count pairs.
type operandA struct {
	f32         []float32
	bf16        []uint16
	half, pairs bool
	k           int
}

// pack is packA for any operandA: the mc×kc block of op(A) at row i0 and
// k step p0 (pairs for a pair operand) into dst's ⌈mc/mr⌉ panels.
func (o operandA) pack(dst []float32, mr int, transA bool, lda, i0, p0, mc, kc int, alpha float32) {
	switch {
	case o.pairs:
		packPairs(dst, mr, !transA, o.bf16, lda, i0, p0, kc, mc, o.k)
	case o.half:
		packPanelsBF16(dst, mr, !transA, o.bf16, lda, i0, p0, kc, mc)
	default:
		packA(dst, mr, transA, o.f32, lda, i0, p0, mc, kc, alpha)
	}
}

// packPanelsBF16 packs n panel lines (rows of op(A) or columns of op(B))
// from line l0, k steps [p0, p0+kc), of a bf16 source with row stride ld
// into ⌈n/w⌉ panels of kc steps of w widened values, zero past n. With
// alongK the source stores each line's k steps contiguously (A, or a
// transposed B: line l starts at src[l·ld]); otherwise each k step's
// lines (B, or a transposed A: step p starts at src[p·ld]).
func packPanelsBF16(dst []float32, w int, alongK bool, src []uint16, ld, l0, p0, kc, n int) {
	if !alongK {
		packRowsBF16(dst, w, src[p0*ld+l0:], ld, kc, n)
		return
	}
	eachPanel(dst, w, kc, n, func(panel []float32, r, lines int) {
		packColsBF16(panel, w, src[(l0+r)*ld+p0:], ld, kc, lines)
	})
}

// packPairs is packPanelsBF16 for a pair kernel: kc steps from pair p0,
// each step a 32-bit word holding values 2q and 2q+1 of a line (the first
// in the low half), of a product k values deep; the high half of a pair
// reaching past k is zero.
func packPairs(dst []float32, w int, alongK bool, src []uint16, ld, l0, p0, kc, n, k int) {
	e0 := 2 * p0
	kv := min(k-e0, 2*kc) // values in the slice: kc = ⌈kv/2⌉
	if !alongK {
		pairsDown(asWords(dst), w, src[e0*ld+l0:], ld, kc, n, kv)
		return
	}
	eachPanel(dst, w, kc, n, func(panel []float32, r, lines int) {
		pairsAlong(asWords(panel), w, src[(l0+r)*ld+e0:], ld, lines, kv)
	})
}

// asWords is x's memory as 32-bit words: a packed panel of bf16 pairs
// lives in the float32 buffers of the float32 panels.
func asWords(x []float32) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(x))), len(x))
}

// pairsAlong fills panel (⌈kv/2⌉ steps of w words) from n ≤ w lines of
// stride ld whose kv values are contiguous: step q of line i gets values 2q
// and 2q+1 of the line. Its last w−n words a step must be zero already.
func pairsAlong(panel []uint32, w int, src []uint16, ld, n, kv int) {
	full, q := kv/2, 0
	if pairsAlongFast(panel, w, src, ld, n, kv) {
		q = full // the full pairs are packed: only an odd last value is left
	}
	for i := 0; i < n; i++ {
		line := src[i*ld : i*ld+kv]
		for p := q; p < full; p++ {
			panel[p*w+i] = uint32(line[2*p]) | uint32(line[2*p+1])<<16
		}
		if kv%2 == 1 {
			panel[full*w+i] = uint32(line[kv-1])
		}
	}
}

// pairsDown packs n lines whose values of one k step are contiguous (step
// p at src[p·ld]), kv steps, into ⌈n/w⌉ panels of kc = ⌈kv/2⌉ words a
// line: step q of line j gets values 2q and 2q+1, zero past kv and n.
func pairsDown(dst []uint32, w int, src []uint16, ld, kc, n, kv int) {
	if n%w != 0 {
		last := n / w * w * kc
		clear(dst[last : last+w*kc])
	}
	for q := 0; q < kc; q++ {
		lo := src[2*q*ld : 2*q*ld+n]
		var hi []uint16
		if 2*q+1 < kv {
			hi = src[(2*q+1)*ld : (2*q+1)*ld+n]
			if pairsDownFast(dst, w, lo, hi, kc, q, n) {
				continue
			}
		}
		for j := 0; j < n; j += w {
			cols := min(w, n-j)
			d := dst[j*kc+q*w : j*kc+q*w+cols]
			l := lo[j : j+cols]
			if hi == nil {
				for i, v := range l {
					d[i] = uint32(v)
				}
				continue
			}
			h := hi[j : j+cols]
			for i, v := range l {
				d[i] = uint32(v) | uint32(h[i])<<16
			}
		}
	}
}

// genericPairKernel is the portable pair kernel: a 4×4 tile in plain Go,
// with VDPBF16PS's arithmetic. It is the specification the assembly pair
// kernels are tested against, not a fast path: where no assembly pair
// kernel runs, GemmBF16 widens its operands for the float32 kernels.
var genericPairKernel = microKernel{
	name: "generic-bf16", mr: 4, nr: 4,
	kc: 256, nc: 512, mc: 512,
	fn: kernelPairs4x4, pairs: true,
}

// kernelPairs4x4 is the pure-Go 4×4 pair kernel: C = A·B + beta·C from
// panels of bf16 pairs, each step of a tile element adding the products
// of the second values, then of the first, to a float32 accumulator, with
// subnormal values and sums taken as zero, as VDPBF16PS does; C then gets
// acc + beta·C (beta 1: one addition; other betas a fused multiply-add in
// the assembly, two roundings here, so that they agree for betas whose
// products are exact, such as powers of two).
func kernelPairs4x4(k int, ap, bp, cp *float32, ldc int, beta float32) {
	const mr, nr = 4, 4
	a, b := asWords(unsafe.Slice(ap, k*mr)), asWords(unsafe.Slice(bp, k*nr))
	var acc [mr][nr]float32
	for p := 0; p < k; p++ {
		for i := 0; i < mr; i++ {
			ai := a[p*mr+i]
			a0, a1 := daz(ai<<16), daz(ai&0xffff0000)
			for j := 0; j < nr; j++ {
				bj := b[p*nr+j]
				s := ftz(acc[i][j] + a1*daz(bj&0xffff0000))
				acc[i][j] = ftz(s + a0*daz(bj<<16))
			}
		}
	}
	c := unsafe.Slice(cp, 3*ldc+nr)
	for i := range acc {
		row := c[i*ldc : i*ldc+nr : i*ldc+nr]
		for j, v := range acc[i] {
			switch beta {
			case 0:
				row[j] = v
			case 1:
				row[j] += v
			default:
				row[j] = beta*row[j] + v
			}
		}
	}
}

// daz is the float32 with bits x, or a zero of its sign if it is
// subnormal.
func daz(x uint32) float32 {
	if x&0x7f800000 == 0 {
		x &= 0x80000000
	}
	return math.Float32frombits(x)
}

// ftz is x, or a zero of its sign if x is subnormal.
func ftz(x float32) float32 { return daz(math.Float32bits(x)) }
