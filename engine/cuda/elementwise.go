package cuda

import (
	"github.com/memtrain/memtrain/engine"
)

// vecGrid is the grid of a grid-stride loop over n elements taken
// vecElems at a time (the elementwise kernels' chunks; see load8 in
// common.cuh).
func vecGrid(n int) dim3 { return elementGrid((n + vecElems - 1) / vecElems) }

// Add computes dst = a + b elementwise (kernel add); dst may be a or b,
// not a partial overlap of one.
func (b *Backend) Add(dst, x, y *engine.Tensor) {
	b.do(func() {
		d, xs, ys := b.floatView("Add", "dst", dst), b.floatView("Add", "a", x), b.floatView("Add", "b", y)
		if d.n != xs.n || d.n != ys.n {
			misuse("Add", engine.MisuseShape, "%v and %v into %v", x, y, dst)
		}
		checkPartial("Add", dst, "dst", x, "a")
		checkPartial("Add", dst, "dst", y, "b")
		b.launch(kAdd, vecGrid(d.n), block1(elementThreads), d.ptr, d.dt(), xs.ptr, xs.dt(), ys.ptr, ys.dt(), int64(d.n))
	})
}

// Axpy computes dst += alpha·x (kernel axpy).
func (b *Backend) Axpy(dst *engine.Tensor, alpha float32, x *engine.Tensor) {
	b.do(func() {
		d, xs := b.floatView("Axpy", "dst", dst), b.floatView("Axpy", "x", x)
		if d.n != xs.n {
			misuse("Axpy", engine.MisuseShape, "%v into %v", x, dst)
		}
		b.launch(kAxpy, vecGrid(d.n), block1(elementThreads), d.ptr, d.dt(), alpha, xs.ptr, xs.dt(), int64(d.n))
	})
}

// Scale computes t *= alpha (kernel scale).
func (b *Backend) Scale(t *engine.Tensor, alpha float32) {
	b.do(func() {
		x := b.floatView("Scale", "t", t)
		b.launch(kScale, vecGrid(x.n), block1(elementThreads), x.ptr, x.dt(), alpha, int64(x.n))
	})
}

// SumSquares writes Σ x² into the one-element tensor dst: each block of
// sumSquaresBlock elements is summed in float64 (sum_squares_partial),
// then the block sums are added in float64 (sum_squares_final). Both
// partitions are fixed by the length, so the result is reproducible.
func (b *Backend) SumSquares(dst, x *engine.Tensor) { b.sum("SumSquares", dst, x, 1) }

// Sum writes Σ x into the one-element tensor dst, as SumSquares sums.
func (b *Backend) Sum(dst, x *engine.Tensor) { b.sum("Sum", dst, x, 0) }

func (b *Backend) sum(op string, dst, x *engine.Tensor, squares int32) {
	b.do(func() {
		d, xs := b.f32View(op, "dst", dst), b.f32View(op, "x", x)
		if d.n != 1 {
			misuse(op, engine.MisuseShape, "into %v, want one element", dst)
		}
		parts := max(1, (xs.n+sumSquaresBlock-1)/sumSquaresBlock)
		partial := b.scratchBuffer(scratchReduce, uint64(parts)*8)
		b.launch(kSumSquaresPartial, grid1(parts), block1(256), partial, xs.ptr, xs.dt(), int64(xs.n), squares)
		b.launch(kSumSquaresFinal, grid1(1), block1(sumSquaresThreads), d.ptr, d.dt(), partial, int32(parts))
	})
}

// SumSquaresMulti writes Σ xs[i]² into dst[i] in two launches however
// many tensors: sum_squares_multi_partial sums every tensor's blocks of
// sumSquaresBlock elements in float64 (one CUDA block a block, as
// sum_squares_partial), and sum_squares_multi_final adds each tensor's
// block sums in float64 (one CUDA block a tensor, as sum_squares_final),
// so each result is bit for bit SumSquares'. The kernels read the tensors
// from a table (deviceTable: address, length, type and first block of
// each), which a training step's gradient norm finds on the device
// already, the same gradients step after step.
func (b *Backend) SumSquaresMulti(dst *engine.Tensor, xs []*engine.Tensor) {
	b.do(func() {
		d := b.f32View("SumSquaresMulti", "dst", dst)
		if d.n != len(xs) {
			misuse("SumSquaresMulti", engine.MisuseShape, "%d tensors into %v, want %d elements", len(xs), dst, len(xs))
		}
		if len(xs) == 0 {
			return
		}
		table := b.sumSqTable.reset()
		parts := int64(0)
		for _, x := range xs {
			v := b.f32View("SumSquaresMulti", "x", x)
			table = append(table, int64(v.ptr), int64(v.n), int64(v.dt()), parts)
			parts += int64(max(1, (v.n+sumSquaresBlock-1)/sumSquaresBlock))
		}
		dev := b.uploadTable(&b.sumSqTable, scratchSumSquares, table)
		partial := b.scratchBuffer(scratchReduce, uint64(parts)*8)
		b.launch(kSumSquaresMultiPartial, grid1(int(min(parts, maxGridX))), block1(256), partial, dev, int32(len(xs)), parts)
		b.launch(kSumSquaresMultiFinal, grid1(len(xs)), block1(sumSquaresThreads), d.ptr, d.dt(), dev, partial)
	})
}

// castTraffic is Copy's cast of n elements from src to dst (kernel cast):
// a read and a write, no arithmetic but the rounding.
func castTraffic(n int, dst, src engine.DType) traffic {
	return traffic{bytes: moved(n, dst, src)}
}

// addTraffic is Add of n elements (kernel add): two reads, a write, an
// addition each.
func addTraffic(n int, dst, a, b engine.DType) traffic {
	return traffic{bytes: moved(n, dst, a, b), flops: float64(n)}
}

// axpyTraffic is Axpy of n elements (kernel axpy): dst read and written,
// x read; a multiply and an add each.
func axpyTraffic(n int, dst, x engine.DType) traffic {
	return traffic{bytes: moved(n, dst, dst, x), flops: 2 * float64(n)}
}

// scaleTraffic is Scale of n elements (kernel scale): read and written in
// place, a multiply each.
func scaleTraffic(n int, dt engine.DType) traffic {
	return traffic{bytes: moved(n, dt, dt), flops: float64(n)}
}
