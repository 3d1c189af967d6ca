// Package gemm multiplies float32 matrices: the one operation that decides
// how fast the CPU engine trains. It has three implementations behind one
// interface: a pure-Go path with assembly micro-kernels (the default),
// OpenBLAS loaded at run time without cgo when the library is present, and
// gonum's pure-Go blas32 as the portable reference every other
// implementation is tested against.
//
// # The Go path
//
// New follows Goto and van de Geijn's blocking, as BLIS and OpenBLAS do:
// operands are packed, alpha applied, into panels that a register-blocked
// micro-kernel streams from L1 and L2, and C is split into one rectangle a
// thread. The micro-kernel is chosen once from the CPU's features:
//
//   - AVX-512: 12×32 tiles (24 zmm accumulators), and 24×16 tiles for
//     products at most 16 columns wide; packing also uses AVX-512;
//   - AVX2 with FMA: 6×16 tiles (12 ymm accumulators);
//   - anything else, or the purego build tag: 4×4 tiles in plain Go.
//
// (Products at most 16 rows high take the skinny path below.)
//
// Each element of C is computed by one goroutine summing its k products in
// an order that depends on k alone, so results are bit-identical for any
// thread count on a given CPU (though not between the kernels).
//
// # Skinny products
//
// Products with at most 16 rows of C (decoding a batch of a few
// sequences: C[m,n] = x[m,k]·Wᵀ with W[n,k] as Linear layers store it) take
// another path, where packing B would cost more than the product, each
// element of B being used only m times. The skinny path streams each row of
// B once, unpacked, past the rows of A held in registers: for transB,
// AVX-512 or AVX2 kernels dot up to 8 rows of A with up to 8 rows of B at a
// time, each element of C accumulated in one vector and summed across its
// lanes by a fixed tree; otherwise (AVX-512 only) kernels stream the rows of
// B and add A[i,p]·B[p,:] into registers holding up to 64 columns of m rows
// of C. The rows of B, or the columns of C, are split among the threads.
// Here too each element's arithmetic depends on (m, n, k) alone, not on the
// thread count nor on the block it falls in, so results stay bit-identical
// for any thread count; they differ in rounding from the blocked path's.
//
// # A bfloat16 B
//
// SgemmBF16B and BatchedBF16B multiply by a B of bf16 bit patterns (frozen
// weights kept in their checkpoint's dtype), A and C float32. The Go path
// (a BF16BImpl) widens the values exactly while it packs B's panels —
// portable Go, or AVX2 on amd64 (a zero extension and a 16-bit shift) —
// and the skinny path a few rows or a block at a time into a small float32
// buffer; the kernels then run as for float32, so C has the bits of Sgemm
// on the widened B. The other Impls get a widened float32 copy of B, made
// for the call.
//
// # Two bfloat16 operands
//
// GemmBF16 and BatchedBF16 multiply a bf16 A by a bf16 B into a float32 C,
// the products of bf16 mixed precision: the exact products of the bf16
// values summed in float32. On a CPU with AVX512_BF16 (Zen 4, Cooper Lake,
// Sapphire Rapids) the Go path (a BF16Impl) packs both operands in pairs of
// k steps, two bf16 values to a 32-bit word, and a 12×32 pair kernel
// multiplies them by VDPBF16PS, twice the multiply-adds an instruction of
// the float32 kernel does, through the same blocked driver (pairs.go);
// subnormals count as zero there. Elsewhere it widens the values as it
// packs them. The other Impls get float32 copies of both.
//
// # Choosing an implementation
//
// Select maps the names of $MEMTRAIN_BLAS (EnvBLAS) to implementations.
// Batched runs many equal-shaped products, such as attention heads, side
// by side when that beats threading each one; Serialer is the optional
// interface it relies on.
//
// # Build tags
//
// purego leaves out the assembly. noopenblas leaves out the loading of
// OpenBLAS, whose machinery (purego's dlopen without cgo) links the C
// library dynamically even with CGO_ENABLED=0; with the tag, a
// CGO_ENABLED=0 binary is static.
package gemm

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// Impl is a single-precision GEMM, row-major:
//
//	C = alpha·op(A)·op(B) + beta·C
//
// op(A) is m×k, op(B) is k×n and C is m×n; op(A) is A, or Aᵀ when transA
// is set (A then stored k×m), and likewise for B. lda, ldb and ldc are the
// row strides of A, B and C as stored. With beta = 0, C is overwritten and
// its old contents (even NaN) do not leak into the result; with alpha = 0
// or k = 0, A and B are not read. Sgemm panics on negative sizes, strides
// shorter than a row, or slices too short for their matrices.
// Implementations are safe for concurrent use.
type Impl interface {
	// Name identifies the implementation: "go", "openblas" or "gonum".
	Name() string
	// Threads is the most threads one Sgemm call computes on.
	Threads() int
	// Sgemm computes C = alpha·op(A)·op(B) + beta·C.
	Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
}

// Reference is gonum's pure-Go blas32 on one thread: slow (about 10–16
// GFLOP/s on a modern core) but independent of this package's code, the
// yardstick of the tests.
type Reference struct{}

// Name returns "gonum".
func (Reference) Name() string { return "gonum" }

// Threads returns 1.
func (Reference) Threads() int { return 1 }

// Sgemm computes C = alpha·op(A)·op(B) + beta·C with gonum; see Impl.
func (Reference) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	ta, tb := blas.NoTrans, blas.NoTrans
	ar, ac := m, k
	if transA {
		ta, ar, ac = blas.Trans, k, m
	}
	br, bc := k, n
	if transB {
		tb, br, bc = blas.Trans, n, k
	}
	if beta == 0 {
		// gonum scales C by beta, and 0·NaN is NaN: clear it instead.
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
	}
	if k == 0 {
		if beta != 0 && beta != 1 {
			for i := 0; i < m; i++ {
				row := c[i*ldc : i*ldc+n]
				for j := range row {
					row[j] *= beta
				}
			}
		}
		return
	}
	blas32.Gemm(ta, tb, alpha,
		blas32.General{Rows: ar, Cols: ac, Stride: lda, Data: a[:(ar-1)*lda+ac]},
		blas32.General{Rows: br, Cols: bc, Stride: ldb, Data: b[:(br-1)*ldb+bc]},
		beta,
		blas32.General{Rows: m, Cols: n, Stride: ldc, Data: c[:(m-1)*ldc+n]})
}
