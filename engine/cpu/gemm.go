package cpu

import (
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/gemm"
)

// Gemm computes C_i = Alpha·op(A_i)·op(B_i) + Beta·C_i for each of the
// p.Batch problems, delegating to the backend's gemm.Impl through
// gemm.Batched: a batch of small products (one per attention head, say)
// runs side by side on one goroutine each, a big product on every thread.
// Each C_i is computed by one call either way, so with the default Go GEMM
// the result does not depend on the thread count.
//
// B may be BF16 (A and C F32): frozen weights, in the forward x·Wᵀ
// (TransB) as in the input gradient dy·W. Its values are widened exactly
// while the Go GEMM packs them (gemm.BatchedBF16B), so C has the bits of
// the product with the widened B, with no float32 copy of it; another
// gemm.Impl (gonum, OpenBLAS) multiplies a widened copy made for the call.
//
// A and C may be BF16 too (bf16 activations). With A and B both BF16 the
// product is gemm.BatchedBF16's: the exact products of the bf16 values
// summed in float32 — on a CPU with AVX512_BF16 by its bf16 dot-product
// instruction, at about twice the float32 rate, elsewhere on the values
// widened as they are packed — which is what a GPU's tensor cores compute,
// up to the order of the sums. A BF16 A by a F32 B is widened into a
// float32 stand-in. A BF16 C is computed in a float32 one (its old values
// widened, for Beta) and rounded once to nearest even.
func (b *Backend) Gemm(p engine.GemmParams, a, bm, c *engine.Tensor) {
	sa, sb, sc := storageOf("Gemm", a), storageOf("Gemm", bm), storageOf("Gemm", c)
	check(p.M >= 0 && p.N >= 0 && p.K >= 0, "Gemm", engine.MisuseRange, "negative size %d×%d×%d", p.M, p.N, p.K)
	if p.M > 0 && p.N > 0 && p.K > 0 {
		// The stand-ins of BF16 operands would hide an overlap: check
		// the tensors themselves.
		checkGemmAlias(a, bm, c)
	}
	half := sb.dtype == engine.BF16
	pairs := half && sa.dtype == engine.BF16
	switch {
	case sc.dtype == engine.BF16:
		var writeOnly uint
		batch := max(p.Batch, 1)
		if p.Beta == 0 && p.LDC == p.N && (batch == 1 || p.StrideC == p.M*p.N) && c.Len() == batch*p.M*p.N {
			// The product writes every element of C and reads none.
			writeOnly = 0b1
		}
		b.widenedOut("Gemm", []*engine.Tensor{c}, 0b1, writeOnly, func(t []*engine.Tensor) { b.Gemm(p, a, bm, t[0]) })
		return
	case sa.dtype == engine.BF16 && !pairs:
		b.widened("Gemm", []*engine.Tensor{a}, 0, func(t []*engine.Tensor) { b.Gemm(p, t[0], bm, c) })
		return
	}
	batch := max(p.Batch, 1)
	C := floats("Gemm", c)
	var A, B []float32
	var A16, B16 []uint16
	if pairs {
		A16 = bf16s("Gemm", a)
	} else {
		A = floats("Gemm", a)
	}
	if half {
		B16 = bf16s("Gemm", bm)
	} else {
		B = floats("Gemm", bm)
	}
	na := len(A) + len(A16)
	nb := len(B) + len(B16)
	if p.M == 0 || p.N == 0 {
		return
	}
	ar, ac, br, bc := p.Stored()
	checkMatrix("A", na, batch, p.StrideA, ar, ac, p.LDA, p.K > 0)
	checkMatrix("B", nb, batch, p.StrideB, br, bc, p.LDB, p.K > 0)
	checkMatrix("C", len(C), batch, p.StrideC, p.M, p.N, p.LDC, true)
	check(batch == 1 || p.StrideC >= (p.M-1)*p.LDC+p.N, "Gemm", engine.MisuseAlias,
		"StrideC = %d makes the %d×%d blocks of C (LDC %d) overlap", p.StrideC, p.M, p.N, p.LDC)
	strideA, strideB := p.StrideA, p.StrideB
	if p.K == 0 {
		// A and B are not read, and may be too small for their strides.
		strideA, strideB = 0, 0
	}
	switch {
	case pairs:
		gemm.BatchedBF16(b.gemm, batch, p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha,
			A16, max(p.LDA, 1), strideA, B16, max(p.LDB, 1), strideB, p.Beta, C, p.LDC, p.StrideC)
		return
	case half:
		gemm.BatchedBF16B(b.gemm, batch, p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha,
			A, max(p.LDA, 1), strideA, B16, max(p.LDB, 1), strideB, p.Beta, C, p.LDC, p.StrideC)
		return
	}
	gemm.Batched(b.gemm, batch, p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha,
		A, max(p.LDA, 1), strideA, B, max(p.LDB, 1), strideB, p.Beta, C, p.LDC, p.StrideC)
}

// checkMatrix panics unless every one of batch stored rows×cols matrices,
// i·stride elements apart with row stride ld, lies inside n elements.
// A matrix that is not read (K = 0) is not checked.
func checkMatrix(name string, n, batch, stride, rows, cols, ld int, read bool) {
	if !read || rows == 0 || cols == 0 {
		return
	}
	check(ld >= cols, "Gemm", engine.MisuseRange, "LD%s = %d is less than the %d columns stored", name, ld, cols)
	check(stride >= 0, "Gemm", engine.MisuseRange, "negative Stride%s", name)
	last := (batch-1)*stride + (rows-1)*ld + cols
	check(last <= n, "Gemm", engine.MisuseShape, "%s needs %d elements (batch %d, stride %d, %d×%d, ld %d) but its tensor has %d",
		name, last, batch, stride, rows, cols, ld, n)
}

// checkGemmAlias refuses a C that overlaps A or B (MisuseAlias): the
// product reads them while it writes C.
func checkGemmAlias(a, bm, c *engine.Tensor) {
	if same, partial := engine.Overlap(c, a); same || partial {
		misuse("Gemm", engine.MisuseAlias, "C %v at offset %d overlaps A %v at offset %d", c, c.Offset, a, a.Offset)
	}
	if same, partial := engine.Overlap(c, bm); same || partial {
		misuse("Gemm", engine.MisuseAlias, "C %v at offset %d overlaps B %v at offset %d", c, c.Offset, bm, bm.Offset)
	}
}
