package cpu

import (
	"math/bits"
	"sync"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu/vec"
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
// workspace, ordinary Go memory not counted in MemStats, taken from a pool
// (scratch) rather than allocated each time: fresh memory is zeroed and
// faulted in page by page, which cost more than the widening itself
// (measured: half of a bf16 peer-tiny step).

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
// kernels. op names the kernel in the panic of a tensor that is not
// usable (see storageOf).
func (b *Backend) widened(op string, ts []*engine.Tensor, outputs uint, kernel func(ts []*engine.Tensor)) {
	b.widenedOut(op, ts, outputs, 0, kernel)
}

// widenedOut is widened for a kernel that only writes the tensors whose
// bits are set in writeOnly (outputs too): their stand-ins are not
// widened from them first.
func (b *Backend) widenedOut(op string, ts []*engine.Tensor, outputs, writeOnly uint, kernel func(ts []*engine.Tensor)) {
	type key struct {
		s      *Storage
		off, n int
	}
	stand := make([]*engine.Tensor, len(ts))
	var held [][]float32
	seen := map[key]*engine.Tensor{}
	for i, t := range ts {
		if t == nil || t.DType() != engine.BF16 {
			stand[i] = t
			continue
		}
		k := key{storageOf(op, t), t.Offset, t.Len()}
		if s, ok := seen[k]; ok {
			stand[i] = s
			continue
		}
		wide := b.scratch.get(t.Len())
		held = append(held, wide)
		if writeOnly&(1<<i) == 0 {
			widenBF16(b, wide, bf16s(op, t))
		}
		s := &engine.Tensor{Storage: &Storage{dtype: engine.F32, f32: wide, n: len(wide)}, Shape: append([]int(nil), t.Shape...)}
		seen[k], stand[i] = s, s
	}
	kernel(stand)
	for i, t := range ts {
		if outputs&(1<<i) == 0 || t == nil || t.DType() != engine.BF16 {
			continue
		}
		roundBF16(b, bf16s(op, t), Float32s(stand[i]))
	}
	for _, w := range held {
		b.scratch.put(w)
	}
}

// A scratch is a pool of float32 buffers for transient stand-ins, in size
// classes of powers of two so that a buffer serves any request it holds.
// Its zero value is ready; it is safe for concurrent use.
type scratch struct {
	classes [64]sync.Pool // class c holds *[]float32 of capacity 2^c
}

// get returns n float32s of unspecified contents.
func (s *scratch) get(n int) []float32 {
	c := bits.Len(uint(max(n, 1) - 1))
	if p, ok := s.classes[c].Get().(*[]float32); ok {
		return (*p)[:n]
	}
	return make([]float32, n, 1<<c)
}

// put returns a buffer from get to the pool.
func (s *scratch) put(x []float32) {
	c := bits.Len(uint(cap(x)) - 1)
	if cap(x) != 1<<c {
		return
	}
	s.classes[c].Put(&x)
}

// widenBF16 writes src's values, widened exactly, into dst.
func widenBF16(b *Backend, dst []float32, src []uint16) {
	b.parallelFor(len(src), elementGrain, func(lo, hi int) { vec.WidenBF16(dst[lo:hi], src[lo:hi]) })
}

// roundBF16 writes src's values rounded to nearest even into dst
// (vec.RoundBF16: checkpoints.Float32ToBF16's rounding, which a test
// compares).
func roundBF16(b *Backend, dst []uint16, src []float32) {
	b.parallelFor(len(src), elementGrain, func(lo, hi int) { vec.RoundBF16(dst[lo:hi], src[lo:hi]) })
}
