package cuda

import (
	"fmt"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/gemm"
)

// HostGEMM returns a gemm.Impl that multiplies host float32 matrices on
// the GPU at the backend's precision: each Sgemm uploads A, B and C (whose
// padding between rows must come back unchanged), multiplies, and
// downloads C. Its speed includes those
// transfers, so it is far below the device's own GEMM rate; it exists so
// that code written for a gemm.Impl (the CLI's benchmarks) runs on a GPU
// backend.
func (b *Backend) HostGEMM() gemm.Impl { return hostGEMM{b} }

type hostGEMM struct{ b *Backend }

// Name is "cublas-" and the precision, e.g. "cublas-bf16".
func (g hostGEMM) Name() string { return "cublas-" + g.b.gemmMode }

// Threads is 1: one host thread drives the GPU.
func (g hostGEMM) Threads() int { return 1 }

// Sgemm computes C = alpha·op(A)·op(B) + beta·C on the device.
func (g hostGEMM) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, bm []float32, ldb int, beta float32, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	ar := m
	if transA {
		ar = k
	}
	br := k
	if transB {
		br = n
	}
	need := func(name string, s []float32, rows, ld int) int {
		if rows == 0 {
			return 0
		}
		if len(s) < (rows-1)*ld+1 {
			panic(fmt.Sprintf("cuda: HostGEMM: %s has %d elements, too few for %d rows of stride %d", name, len(s), rows, ld))
		}
		return min(len(s), rows*ld)
	}
	na, nb, nc := need("A", a, ar, lda), need("B", bm, br, ldb), need("C", c, m, ldc)
	b := g.b
	ta, tb, tc := b.Alloc(engine.F32, max(na, 1)), b.Alloc(engine.F32, max(nb, 1)), b.Alloc(engine.F32, nc)
	defer func() {
		b.Free(ta)
		b.Free(tb)
		b.Free(tc)
	}()
	if k > 0 {
		b.Upload(ta.View(0, na), a[:na])
		b.Upload(tb.View(0, nb), bm[:nb])
	}
	b.Upload(tc, c[:nc])
	b.Gemm(engine.GemmParams{TransA: transA, TransB: transB, M: m, N: n, K: k, Alpha: alpha, Beta: beta,
		LDA: lda, LDB: ldb, LDC: ldc}, ta, tb, tc)
	b.Download(c[:nc], tc)
}
