package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/memtrain/memtrain/engine"
)

// gemmCall is one strided, batched, row-major product on device
// addresses: for each i < batch, C_i = alpha·op(A_i)·op(B_i) + beta·C_i,
// A_i starting i·strideA elements after a, and so on.
type gemmCall struct {
	transA, transB bool
	m, n, k        int
	alpha, beta    float32
	a, b, c        devptr
	lda, ldb, ldc  int
	strideA        int
	strideB        int
	strideC        int
	batch          int
	abType, cType  engine.DType
	// bf16B marks an F32 A (abType) by a BF16 B: gemm widens B into a
	// float32 scratch buffer and multiplies by that.
	bf16B bool
}

// cublasArgs are a gemmCall's arguments as cublasGemmStridedBatchedEx
// takes them. cuBLAS is column-major, and a row-major matrix read as
// column-major is its transpose, so the row-major product C = op(A)·op(B)
// is computed as the column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the operands swap
// places, M and N swap, and each operand keeps its own transpose flag and
// leading dimension.
type cublasArgs struct {
	transA, transB   int32 // cuBLAS's first and second operand: our B, then our A
	m, n, k          int32
	a, b, c          devptr
	lda, ldb, ldc    int32
	strideA, strideB int64
	strideC          int64
	aType, bType     int32
	cType            int32
	batch            int32
	compute          int32
}

// cublasArgsOf maps a row-major call to cuBLAS's column-major one. mode is
// the backend's precision for float32 operands.
func cublasArgsOf(g gemmCall, mode string) cublasArgs {
	op := func(t bool) int32 {
		if t {
			return cublasOpT
		}
		return cublasOpN
	}
	dataType := func(d engine.DType) int32 {
		if d == engine.BF16 {
			return cudaR16BF
		}
		return cudaR32F
	}
	compute := int32(cublasCompute32F)
	if g.abType == engine.F32 {
		switch mode {
		case GemmTF32:
			compute = cublasCompute32FFastTF32
		case GemmBF16:
			compute = cublasCompute32FFast16BF
		}
	}
	return cublasArgs{
		transA: op(g.transB), transB: op(g.transA),
		m: int32(g.n), n: int32(g.m), k: int32(g.k),
		a: g.b, lda: int32(g.ldb), strideA: int64(g.strideB), aType: dataType(g.abType),
		b: g.a, ldb: int32(g.lda), strideB: int64(g.strideA), bType: dataType(g.abType),
		c: g.c, ldc: int32(g.ldc), strideC: int64(g.strideC), cType: dataType(g.cType),
		batch: int32(g.batch), compute: compute,
	}
}

// gemm issues a product. It runs on the worker thread. K = 0 (C = beta·C)
// is done by a kernel, since BLAS leaves it to the implementation whether
// such a product reads A and B.
func (b *Backend) gemm(g gemmCall) {
	if g.m == 0 || g.n == 0 || g.batch == 0 {
		return
	}
	for _, v := range []int{g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch} {
		if v > math.MaxInt32 {
			panic(fmt.Sprintf("cuda: Gemm sizes %d×%d×%d (ld %d, %d, %d, batch %d) exceed cuBLAS's 32-bit ints",
				g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch))
		}
	}
	if g.k == 0 {
		b.launch(kScaleMatrix, elementGrid(g.batch*g.m*g.n), block1(elementThreads),
			g.c, int32(g.cType), g.beta, int32(g.batch), int32(g.m), int32(g.n), int64(g.ldc), int64(g.strideC))
		return
	}
	if g.bf16B {
		g = b.widenB(g)
	}
	b.cublasWorkspace()
	c := cublasArgsOf(g, b.gemmMode)
	alpha, beta := g.alpha, g.beta
	s := b.libs.blas.cublasGemmStridedBatchedEx(b.blas, c.transA, c.transB, c.m, c.n, c.k, unsafe.Pointer(&alpha),
		c.a, c.aType, c.lda, c.strideA, c.b, c.bType, c.ldb, c.strideB, unsafe.Pointer(&beta),
		c.c, c.cType, c.ldc, c.strideC, c.batch, c.compute, cublasGemmDefault)
	if s != 0 {
		panic(fmt.Errorf("cuda: cublasGemmStridedBatchedEx (%d×%d×%d, transA %v, transB %v, ld %d/%d/%d, batch %d, %v·%v→%v): %s",
			g.m, g.n, g.k, g.transA, g.transB, g.lda, g.ldb, g.ldc, g.batch, g.abType, g.abType, g.cType, cublasStatusString(s)))
	}
}

// cublasWorkspaceBytes is cuBLAS's workspace: 32 MiB, what NVIDIA
// recommends for Hopper (cuBLAS's own default there; 4 MiB suffices before
// it), so that the bf16 GEMMs' best algorithms, which want split-K or
// stream-K partial sums, are not ruled out for want of room.
const cublasWorkspaceBytes = 32 << 20

// cublasWorkspace gives the cuBLAS handle its workspace before the first
// product, from the caching allocator (a scratch buffer that never grows
// after), so that cuBLAS allocates nothing of its own and a steady-state
// step stays free of cuMemAlloc. It is set at the first GEMM rather than
// at open, so that a backend that multiplies nothing holds none of it. It
// runs on the worker thread.
func (b *Backend) cublasWorkspace() {
	if b.scratch[scratchCublas].ptr != 0 {
		return
	}
	ws := b.scratchBuffer(scratchCublas, cublasWorkspaceBytes)
	if s := b.libs.blas.cublasSetWorkspace(b.blas, ws, cublasWorkspaceBytes); s != 0 {
		panic(fmt.Errorf("cuda: cublasSetWorkspace (%d bytes): %s", cublasWorkspaceBytes, cublasStatusString(s)))
	}
}

// widenB returns g with its bf16 B widened (widen_bf16_matrix) into the
// scratchWiden buffer, packed — each matrix rows×cols with row stride
// cols, and one matrix for the whole batch when B's stride is 0 — and the
// product then of float32 operands. It runs on the worker thread, with
// g.k > 0.
func (b *Backend) widenB(g gemmCall) gemmCall {
	rows, cols := g.k, g.n
	if g.transB {
		rows, cols = g.n, g.k
	}
	mats := g.batch
	if g.strideB == 0 {
		mats = 1
	}
	n := mats * rows * cols
	wide := b.scratchBuffer(scratchWiden, uint64(n)*4)
	b.launch(kWidenBF16Matrix, elementGrid(n), block1(widenThreads),
		wide, g.b, int32(mats), int32(rows), int32(cols), int64(g.ldb), int64(g.strideB))
	g.b, g.ldb, g.bf16B = wide, cols, false
	if mats > 1 {
		g.strideB = rows * cols
	}
	return g
}

// Gemm computes C_i = Alpha·op(A_i)·op(B_i) + Beta·C_i for each of the
// p.Batch problems with one cublasGemmStridedBatchedEx. A and B of the
// same dtype: float32 operands multiply at the backend's precision
// (GemmPrecision) into a float32 C; bf16 operands multiply on tensor cores
// into a float32 or bf16 C, accumulating in float32. A float32 A and C by a
// bf16 B (a frozen weight), which cuBLAS does not multiply, are the float32
// product with B widened, exactly, by a kernel into a float32 scratch
// buffer: the backend keeps that buffer, grown to the largest B so widened
// (4 bytes an element, not counted by MemStats), between calls.
func (b *Backend) Gemm(p engine.GemmParams, a, bm, c *engine.Tensor) {
	b.do(func() {
		A, B, C := b.floatView("Gemm", "A", a), b.floatView("Gemm", "B", bm), b.floatView("Gemm", "C", c)
		batch := max(p.Batch, 1)
		if p.M < 0 || p.N < 0 || p.K < 0 {
			misuse("Gemm", engine.MisuseRange, "negative size %d×%d×%d", p.M, p.N, p.K)
		}
		bf16B := A.dtype == engine.F32 && B.dtype == engine.BF16 && C.dtype == engine.F32
		if !bf16B && (A.dtype != B.dtype || (A.dtype == engine.F32 && C.dtype != engine.F32)) {
			misuse("Gemm", engine.MisuseDType, "%v by %v into %v: A and B must share a dtype (or be F32 by BF16, into F32), and float32 products go into float32", a, bm, c)
		}
		if p.M == 0 || p.N == 0 {
			return
		}
		if p.K > 0 {
			// The product reads A and B while it writes C.
			checkDisjoint("Gemm", c, "C", a, "A")
			checkDisjoint("Gemm", c, "C", bm, "B")
		}
		ar, ac, br, bc := p.Stored()
		checkMatrix("A", A.n, batch, p.StrideA, ar, ac, p.LDA, p.K > 0)
		checkMatrix("B", B.n, batch, p.StrideB, br, bc, p.LDB, p.K > 0)
		checkMatrix("C", C.n, batch, p.StrideC, p.M, p.N, p.LDC, true)
		if batch > 1 && p.StrideC < (p.M-1)*p.LDC+p.N {
			misuse("Gemm", engine.MisuseAlias, "StrideC = %d makes the %d×%d blocks of C (LDC %d) overlap", p.StrideC, p.M, p.N, p.LDC)
		}
		b.gemm(gemmCall{
			transA: p.TransA, transB: p.TransB, m: p.M, n: p.N, k: p.K, alpha: p.Alpha, beta: p.Beta,
			a: A.ptr, b: B.ptr, c: C.ptr, lda: p.LDA, ldb: p.LDB, ldc: p.LDC,
			strideA: p.StrideA, strideB: p.StrideB, strideC: p.StrideC, batch: batch,
			abType: A.dtype, cType: C.dtype, bf16B: bf16B,
		})
	})
}

// checkMatrix panics unless every one of batch stored rows×cols matrices,
// i·stride elements apart with row stride ld, lies inside n elements. A
// matrix that is not read (K = 0) is not checked.
func checkMatrix(name string, n, batch, stride, rows, cols, ld int, read bool) {
	if !read || rows == 0 || cols == 0 {
		return
	}
	if ld < cols {
		misuse("Gemm", engine.MisuseRange, "LD%s = %d is less than the %d columns stored", name, ld, cols)
	}
	if stride < 0 {
		misuse("Gemm", engine.MisuseRange, "negative Stride%s", name)
	}
	if last := (batch-1)*stride + (rows-1)*ld + cols; last > n {
		misuse("Gemm", engine.MisuseShape, "%s needs %d elements (batch %d, stride %d, %d×%d, ld %d) but its tensor has %d",
			name, last, batch, stride, rows, cols, ld, n)
	}
}
