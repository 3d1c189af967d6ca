package gemm

import (
	"fmt"

	"github.com/memtrain/memtrain/internal/team"
)

// Serialer is implemented by an Impl that can give a single-threaded
// version of itself. Batched uses it to run the problems of a batch side by
// side, one goroutine each, rather than one after another with every
// thread on each: for small problems, such as one attention head, that
// avoids the cost of splitting and joining each product.
//
// Serial returns an Impl computing exactly what the receiver computes on
// one goroutine; it may share the receiver's buffers and must be safe for
// concurrent use.
type Serialer interface {
	Serial() Impl
}

// Teamer is implemented by an Impl that runs its products on a team of
// worker goroutines that others may borrow between products (see
// team.Team.Parallel): the CPU backend runs its element-wise kernels on its
// GEMM's team, so that the workers a product leaves polling are the ones
// the next kernel wakes, not goroutines the runtime must start.
type Teamer interface {
	Team() *team.Team
}

// Serial returns r: the reference already runs on one goroutine.
func (r Reference) Serial() Impl { return r }

// bigBatchItem is the work, in floating-point operations, above which one
// problem of a batch splits well over threads, so that Batched runs the
// problems one after another unless that leaves threads idle.
const bigBatchItem = 1 << 25

// Batched computes batch independent products with the same shapes,
//
//	C_i = alpha·op(A_i)·op(B_i) + beta·C_i,  i = 0, …, batch−1,
//
// where A_i starts at a[i·strideA:], B_i at b[i·strideB:] and C_i at
// c[i·strideC:]; the other arguments are as for Impl.Sgemm. strideA or
// strideB may be 0 to use one matrix for the whole batch; the C_i must not
// overlap.
//
// When g implements Serialer and has more than one thread, Batched spreads
// the batch over g.Threads() goroutines, each running its fixed, contiguous
// share of the problems with g.Serial(), unless the problems are big and
// the batch divides poorly among the threads; otherwise it calls g.Sgemm for
// each problem in turn. Either way each C_i is computed by one call, so an
// Impl whose results do not depend on its thread count, like the Go path,
// gives the same bits both ways.
func Batched(g Impl, batch int, transA, transB bool, m, n, k int, alpha float32, a []float32, lda, strideA int, b []float32, ldb, strideB int, beta float32, c []float32, ldc, strideC int) {
	checkBatch(batch, transA, transB, m, n, k, len(a), lda, strideA, len(b), ldb, strideB, len(c), ldc, strideC)
	if batch == 0 || m == 0 || n == 0 {
		return
	}
	if k == 0 {
		// A and B are empty (and may be shorter than their strides
		// suggest): only C is scaled.
		for i := 0; i < batch; i++ {
			g.Sgemm(transA, transB, m, n, k, alpha, nil, max(1, lda), nil, max(1, ldb), beta, c[i*strideC:], ldc)
		}
		return
	}
	spread(g, batch, m, n, k, func(impl Impl, i int) {
		impl.Sgemm(transA, transB, m, n, k, alpha, a[i*strideA:], lda, b[i*strideB:], ldb, beta, c[i*strideC:], ldc)
	})
}

// checkBatch panics on a negative batch or stride, blocks of C that
// overlap, or operands too short for the batch: na, nb and nc are the
// lengths of a, b and c (A and B are not read when k is 0).
func checkBatch(batch int, transA, transB bool, m, n, k, na, lda, strideA, nb, ldb, strideB, nc, ldc, strideC int) {
	if batch < 0 || strideA < 0 || strideB < 0 || strideC < 0 {
		panic(fmt.Sprintf("gemm: negative batch %d or stride (%d, %d, %d)", batch, strideA, strideB, strideC))
	}
	if batch == 0 || m == 0 || n == 0 {
		return
	}
	if batch > 1 && strideC < (m-1)*ldc+n {
		panic(fmt.Sprintf("gemm: strideC = %d makes the %d×%d blocks of C (ldc %d) overlap", strideC, m, n, ldc))
	}
	batchSpan("c", nc, batch, strideC, m, n, ldc)
	if k > 0 {
		ar, ac, br, bc := storedShapes(transA, transB, m, n, k)
		batchSpan("a", na, batch, strideA, ar, ac, lda)
		batchSpan("b", nb, batch, strideB, br, bc, ldb)
	}
}

// batchSpan returns how many elements batch rows×cols matrices, stride
// apart with row stride ld, reach, and panics, naming the operand, when
// ld is shorter than a row or the operand holds fewer elements.
func batchSpan(name string, have, batch, stride, rows, cols, ld int) int {
	if ld < max(1, cols) {
		panic(fmt.Sprintf("gemm: ld%s = %d is less than the %d columns of %s", name, ld, cols, name))
	}
	need := (batch-1)*stride + (rows-1)*ld + cols
	if have < need {
		panic(fmt.Sprintf("gemm: %s has %d elements, too few for %d %d×%d matrices %d apart with stride %d", name, have, batch, rows, cols, stride, ld))
	}
	return need
}

// spread runs problems 0, …, batch−1 of m×n×k, run(impl, i) computing
// problem i with impl: side by side on g.Serial() when that pays (see
// Batched), else one after another with g.
func spread(g Impl, batch, m, n, k int, run func(impl Impl, i int)) {
	workers := min(g.Threads(), batch)
	s, ok := g.(Serialer)
	if !ok || workers <= 1 || !batchParallel(batch, workers, 2*float64(m)*float64(n)*float64(k)) {
		for i := 0; i < batch; i++ {
			run(g, i)
		}
		return
	}
	serial := s.Serial()
	share := func(w int) {
		for i := w * batch / workers; i < (w+1)*batch/workers; i++ {
			run(serial, i)
		}
	}
	var t *team.Team // fresh goroutines unless g lends its team
	if tm, ok := g.(Teamer); ok {
		t = tm.Team()
	}
	t.Parallel(workers, share)
}

// batchParallel reports whether a batch of problems of the given size runs
// faster spread over workers goroutines than one problem at a time on all
// of them: always for small problems, and for big ones when the batch keeps
// at least 85% of the workers busy.
func batchParallel(batch, workers int, flops float64) bool {
	if flops < bigBatchItem {
		return true
	}
	rounds := ceilDiv(batch, workers)
	return float64(batch) >= 0.85*float64(rounds*workers)
}
