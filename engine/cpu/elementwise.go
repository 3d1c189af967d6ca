package cpu

import (
	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
)

// elementGrain is the least number of elements an elementwise kernel hands
// to a goroutine: these kernels are memory-bound, and below ~32k elements
// a hand-off costs more than it saves.
const elementGrain = 1 << 15

// Fill sets every element of t to v (converted to int32 for I32 tensors,
// rounded to the nearest bfloat16 for BF16 ones).
func (b *Backend) Fill(t *engine.Tensor, v float32) {
	switch storageOf("Fill", t).dtype {
	case engine.I32:
		x := ints("Fill", t)
		for i := range x {
			x[i] = int32(v)
		}
		return
	case engine.BF16:
		x, h := bf16s("Fill", t), checkpoints.Float32ToBF16(v)
		b.parallelFor(len(x), elementGrain, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x[i] = h
			}
		})
		return
	}
	x := floats("Fill", t)
	b.parallelFor(len(x), elementGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] = v
		}
	})
}

// Copy copies src into dst, which have the same number of elements and
// the same dtype, or are F32 and BF16: then the values are converted, as
// Upload and Download convert them (rounded to nearest even, or widened).
// Overlapping views of one storage are copied as if through a temporary
// (they share a dtype).
func (b *Backend) Copy(dst, src *engine.Tensor) {
	dt, st := storageOf("Copy", dst).dtype, storageOf("Copy", src).dtype
	check(dst.Len() == src.Len(), "Copy", engine.MisuseShape, "%v into %v", src, dst)
	switch {
	case dt == st && dt == engine.I32:
		copy(ints("Copy", dst), ints("Copy", src))
	case dt == st && dt == engine.BF16:
		copy(bf16s("Copy", dst), bf16s("Copy", src))
	case dt == st:
		// One memmove: it handles overlap, and a single core nearly
		// saturates memory bandwidth on a copy anyway.
		copy(floats("Copy", dst), floats("Copy", src))
	case dt == engine.BF16 && st == engine.F32:
		b.Upload(dst, floats("Copy", src))
	case dt == engine.F32 && st == engine.BF16:
		b.Download(floats("Copy", dst), src)
	default:
		misuse("Copy", engine.MisuseDType, "%v into %v: an I32 tensor copies only into an I32 tensor", src, dst)
	}
}

// Add computes dst = a + b. dst may be a or b itself (the same view), not a
// partial overlap of one.
func (b *Backend) Add(dst, x, y *engine.Tensor) {
	checkPartial("Add", dst, "dst", x, "a")
	checkPartial("Add", dst, "dst", y, "b")
	if hasBF16(dst, x, y) {
		b.widened("Add", []*engine.Tensor{dst, x, y}, 1, func(t []*engine.Tensor) { b.Add(t[0], t[1], t[2]) })
		return
	}
	d, xs, ys := floats("Add", dst), floats("Add", x), floats("Add", y)
	check(len(d) == len(xs) && len(d) == len(ys), "Add", engine.MisuseShape, "%v and %v into %v", x, y, dst)
	b.parallelFor(len(d), elementGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d[i] = xs[i] + ys[i]
		}
	})
}

// Axpy computes dst += alpha·x.
func (b *Backend) Axpy(dst *engine.Tensor, alpha float32, x *engine.Tensor) {
	if hasBF16(dst, x) {
		b.widened("Axpy", []*engine.Tensor{dst, x}, 1, func(t []*engine.Tensor) { b.Axpy(t[0], alpha, t[1]) })
		return
	}
	d, xs := floats("Axpy", dst), floats("Axpy", x)
	check(len(d) == len(xs), "Axpy", engine.MisuseShape, "%v into %v", x, dst)
	b.parallelFor(len(d), elementGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			// The explicit conversion rounds the product, so that a
			// compiler that fuses multiply-adds (arm64) gives the same
			// bits as one that does not.
			d[i] += float32(alpha * xs[i])
		}
	})
}

// Scale computes t *= alpha.
func (b *Backend) Scale(t *engine.Tensor, alpha float32) {
	if hasBF16(t) {
		b.widened("Scale", []*engine.Tensor{t}, 1, func(t []*engine.Tensor) { b.Scale(t[0], alpha) })
		return
	}
	x := floats("Scale", t)
	b.parallelFor(len(x), elementGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] *= alpha
		}
	})
}

// sumSquaresBlock is the length of the pieces SumSquares sums separately.
// The pieces are fixed by the tensor's length, not by the thread count, so
// the result is the same for any number of threads.
const sumSquaresBlock = 1 << 14

// SumSquares writes Σ x² into the one-element tensor dst. Each block of
// sumSquaresBlock elements is summed in float64, and the block sums are
// then added in order, also in float64.
func (b *Backend) SumSquares(dst, x *engine.Tensor) {
	out, xs := floats("SumSquares", dst), floats("SumSquares", x)
	check(len(out) == 1, "SumSquares", engine.MisuseShape, "into %v, want one element", dst)
	out[0] = b.blockSum(xs, true)
}

// SumSquaresMulti writes Σ xs[i]² into dst[i], each as SumSquares would:
// every tensor's blocks in one parallel loop over them all, then each
// tensor's block sums added in order and rounded once.
func (b *Backend) SumSquaresMulti(dst *engine.Tensor, xs []*engine.Tensor) {
	out := floats("SumSquaresMulti", dst)
	check(len(out) == len(xs), "SumSquaresMulti", engine.MisuseShape, "%d tensors into %v, want %d elements", len(xs), dst, len(xs))
	vals := make([][]float32, len(xs))
	first := make([]int, len(xs)+1) // tensor i's blocks are [first[i], first[i+1])
	for i, x := range xs {
		vals[i] = floats("SumSquaresMulti", x)
		first[i+1] = first[i] + (len(vals[i])+sumSquaresBlock-1)/sumSquaresBlock
	}
	partial := make([]float64, first[len(xs)])
	b.parallelFor(len(partial), 2, func(lo, hi int) {
		t := 0
		for blk := lo; blk < hi; blk++ {
			for first[t+1] <= blk {
				t++
			}
			k := blk - first[t]
			var s float64
			for _, v := range vals[t][k*sumSquaresBlock : min((k+1)*sumSquaresBlock, len(vals[t]))] {
				s += float64(v) * float64(v)
			}
			partial[blk] = s
		}
	})
	for i := range xs {
		var s float64
		for _, p := range partial[first[i]:first[i+1]] {
			s += p
		}
		out[i] = float32(s)
	}
}

// Sum writes Σ x into the one-element tensor dst, in SumSquares' blocks.
func (b *Backend) Sum(dst, x *engine.Tensor) {
	out, xs := floats("Sum", dst), floats("Sum", x)
	check(len(out) == 1, "Sum", engine.MisuseShape, "into %v, want one element", dst)
	out[0] = b.blockSum(xs, false)
}

// checkPartial refuses (MisuseAlias) an output out that shares some
// elements with an input in without being the same view: a kernel that
// may run in place (out = in) still cannot read elements it has already
// overwritten.
func checkPartial(op string, out *engine.Tensor, outName string, in *engine.Tensor, inName string) {
	if _, partial := engine.Overlap(out, in); partial {
		misuse(op, engine.MisuseAlias, "%s %v at offset %d partially overlaps %s %v at offset %d (only the same view is allowed)",
			outName, out, out.Offset, inName, in, in.Offset)
	}
}

// blockSum is Σ x (or Σ x²) in float64, block by block in parallel and the
// blocks in order, rounded once to float32.
func (b *Backend) blockSum(xs []float32, squares bool) float32 {
	blocks := (len(xs) + sumSquaresBlock - 1) / sumSquaresBlock
	partial := make([]float64, blocks)
	b.parallelFor(blocks, 2, func(lo, hi int) {
		for blk := lo; blk < hi; blk++ {
			var s float64
			for _, v := range xs[blk*sumSquaresBlock : min((blk+1)*sumSquaresBlock, len(xs))] {
				if squares {
					s += float64(v) * float64(v)
				} else {
					s += float64(v)
				}
			}
			partial[blk] = s
		}
	})
	var s float64
	for _, p := range partial {
		s += p
	}
	return float32(s)
}
