package cpu

import (
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
)

// Mixed precision on the CPU: the kernels compute in float32 on F32
// tensors, and a kernel given BF16 activations (llama.Options.Activations)
// runs its F32 code on float32 stand-ins. widened makes them — each BF16
// tensor widened exactly into a host float32 buffer, the same stand-in for
// two arguments that view the same elements (an in-place kernel's input
// and output) — runs the kernel, and rounds the stand-ins of the outputs
// back to nearest even, once. That is what the engine.Backend contract
// asks of every backend (read widened, compute in float32, round each
// output once), so the CPU stays the reference for the GPU's bf16 kernels,
// which load and store through the same conversions; and it needs no
// second copy of every kernel. The stand-ins are a kernel's transient
// workspace, ordinary Go memory not counted in MemStats.

// hasBF16 reports whether any of ts is a BF16 tensor.
func hasBF16(ts ...*engine.Tensor) bool {
	for _, t := range ts {
		if t != nil && t.DType() == engine.BF16 {
			return true
		}
	}
	return false
}

// widened runs kernel on ts with every BF16 tensor replaced by a float32
// stand-in of its values, and then rounds the stand-ins of the tensors
// whose index is set in outputs (bit i for ts[i]) back into them. A nil
// tensor stays nil. Two arguments that are the same view of one storage
// share a stand-in; partial overlaps are not allowed, as in the F32
// kernels.
func (b *Backend) widened(ts []*engine.Tensor, outputs uint, kernel func(ts []*engine.Tensor)) {
	type key struct {
		s      *Storage
		off, n int
	}
	stand := make([]*engine.Tensor, len(ts))
	seen := map[key]*engine.Tensor{}
	for i, t := range ts {
		if t == nil || t.DType() != engine.BF16 {
			stand[i] = t
			continue
		}
		k := key{storageOf(t), t.Offset, t.Len()}
		if s, ok := seen[k]; ok {
			stand[i] = s
			continue
		}
		wide := make([]float32, t.Len())
		widenBF16(b, wide, BF16s(t))
		s := &engine.Tensor{Storage: &Storage{dtype: engine.F32, f32: wide, n: len(wide)}, Shape: append([]int(nil), t.Shape...)}
		seen[k], stand[i] = s, s
	}
	kernel(stand)
	for i, t := range ts {
		if outputs&(1<<i) == 0 || t == nil || t.DType() != engine.BF16 {
			continue
		}
		roundBF16(b, BF16s(t), Float32s(stand[i]))
	}
}

// widenBF16 writes src's values, widened exactly, into dst.
func widenBF16(b *Backend, dst []float32, src []uint16) {
	b.parallelFor(len(src), elementGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[i] = math.Float32frombits(uint32(src[i]) << 16)
		}
	})
}

// roundBF16 writes src's values rounded to nearest even into dst.
func roundBF16(b *Backend, dst []uint16, src []float32) {
	b.parallelFor(len(src), elementGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			dst[i] = checkpoints.Float32ToBF16(src[i])
		}
	})
}
