// Package cpu is the engine's CPU backend: every kernel of engine.Backend
// written as plain Go loops over float32 slices, in the manner of llm.c,
// with the matrix products delegated to package gemm and the inner loops
// of the softmaxes, SwiGLU and cached attention (exponentials, dot
// products, axpys, maxima) to package vec, which runs them in AVX-512 or
// AVX2 assembly on amd64.
//
// Each layer's forward and backward sit side by side in a file named after
// the layer. Kernels run to completion before they return, on the calling
// goroutine plus up to Threads()−1 helpers. Work is split by a fixed
// partition (see parallelFor) and every reduction runs in a fixed order, so
// every kernel is bit-for-bit reproducible. More than that, no kernel
// reduces across a thread's share of the work: reductions are split by
// output element (dw, dTable by column), by fixed-size blocks (SumSquares)
// or by attention tile (a key/value head's key or query tile), so with a
// GEMM whose results do not depend on its thread count (the default,
// gemm.New) the results are the same for any number of threads.
//
// The CPU computes in float32, on F32 tensors (and I32 ids and positions).
// BF16 tensors exist to hold frozen weights in their checkpoint's dtype, at
// half the memory and with no float32 copy: a LoRA's base model. They are
// accepted by
//
//   - Alloc (zero-filled, 2 bytes an element in MemStats) and Free;
//   - Upload (float32 rounded to nearest even, exactly as
//     checkpoints.Float32ToBF16) and Download (widened exactly);
//   - Fill (the value rounded likewise) and Copy (BF16 to BF16, or a cast
//     between F32 and BF16 either way);
//   - Gemm, as the B operand only, with A and C F32: each bf16 value is
//     widened exactly to float32 as the B panels are packed (see
//     gemm.SgemmBF16B), so the result is bit for bit the F32 product with
//     the widened B, with no float32 copy of it (the default Go GEMM;
//     gonum and OpenBLAS multiply a widened copy made for the call);
//   - BF16s, their elements' bit patterns shared with the caller.
//
// Mixed precision (bf16 activations, llama.Options.Activations) adds the
// activation kernels: Gemm with BF16 A and C as well (BF16 A and B
// multiplied as gemm.GemmBF16 does — natively on a CPU with AVX512_BF16 —
// a BF16 A by a F32 B widened, C computed in float32 and rounded once),
// Add, Axpy, Scale, Embedding,
// EmbeddingBackward, RMSNorm, RoPE, SwiGLU, Attention, their backwards
// and AttentionKV, each on any mix of F32 and BF16 tensors: they run their
// float32 code on widened stand-ins and round each BF16 output once
// (mixed.go), as the engine.Backend contract asks; and CrossEntropy's
// dLogits, each row rounded once from float32 scratch. Otherwise
// CrossEntropy, Argmax, SumSquares, Sum and AdamW panic on a BF16 tensor
// with a message naming themselves: the loss and the optimizer stay
// float32.
//
// Misuse — arguments that do not fit together, a dtype a kernel does not
// take, a forbidden overlap, an id out of range, a freed or foreign
// tensor — panics with an *engine.Misuse naming the method and the
// class of the fault (see engine.Backend), before the kernel computes
// anything.
package cpu

import (
	"math"
	"runtime"
	"sync/atomic"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/gemm"
	"github.com/memtrain/memtrain/internal/team"
)

// Options configure a Backend.
type Options struct {
	// Threads is the number of goroutines a kernel computes with; 0 means
	// runtime.GOMAXPROCS(0).
	Threads int
	// GEMM multiplies matrices; nil means gemm.New(Threads), the pure-Go
	// path.
	GEMM gemm.Impl
	// Poison fills the tensors Empty returns with NaN (I32: −1), to
	// catch reads before writes; $MEMTRAIN_POISON=1 (engine.Poison)
	// turns it on too.
	Poison bool
}

// Backend is the CPU implementation of engine.Backend. It is safe for
// concurrent use, though kernels that share tensors must of course be
// ordered by the caller.
type Backend struct {
	threads int
	poison  bool // Options.Poison
	gemm    gemm.Impl
	// inner multiplies the small matrices of kernels that are already
	// parallel over their own work items (attention's per-head products),
	// so it must not start threads of its own.
	inner gemm.Impl
	// scratch holds the float32 stand-ins of mixed precision (mixed.go).
	scratch scratch
	// angles holds RoPE's cos and sin by position (rope.go).
	angles angleTable
	// team runs parallelFor's chunks: the GEMM's own team when it lends
	// one big enough (gemm.Teamer), so that kernels and products keep the
	// same workers awake, else the backend's.
	team *team.Team

	allocated atomic.Int64 // bytes of live tensors
	peak      atomic.Int64 // high-water mark of allocated
}

var _ engine.Backend = (*Backend)(nil)

// New returns a CPU backend.
func New(opts Options) *Backend {
	threads := opts.Threads
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	g := opts.GEMM
	if g == nil {
		g = defaultGemm(threads)
	}
	b := &Backend{threads: threads, gemm: g, inner: serial(g), poison: opts.Poison || engine.Poison()}
	if t, ok := g.(gemm.Teamer); ok && t.Team().Workers() >= threads-1 {
		b.team = t.Team()
	} else {
		b.team = team.New(threads - 1)
		// The workers do not refer to b: stop them when b goes.
		runtime.AddCleanup(b, (*team.Team).Close, b.team)
	}
	return b
}

// defaultGemm is the GEMM a backend uses when Options.GEMM is nil: the
// pure-Go path, whose results do not depend on its thread count.
func defaultGemm(threads int) gemm.Impl { return gemm.New(threads) }

// serial returns a single-threaded GEMM computing what g computes: g's own
// serial version when it has one, else g if it is single-threaded, else
// (an OpenBLAS, say) the pure-Go path on one thread, which then computes
// the per-head products of attention while g computes the rest.
func serial(g gemm.Impl) gemm.Impl {
	if s, ok := g.(gemm.Serialer); ok {
		return s.Serial()
	}
	if g.Threads() <= 1 {
		return g
	}
	return gemm.New(1)
}

// Name reports the backend and its GEMM, e.g. "cpu(gonum)".
func (b *Backend) Name() string { return "cpu(" + b.gemm.Name() + ")" }

// Device is the host.
func (b *Backend) Device() engine.Device { return engine.Device{Kind: engine.CPU} }

// Threads is the number of goroutines a kernel computes with.
func (b *Backend) Threads() int { return b.threads }

// Synchronize returns at once: every kernel has finished when it returns.
func (b *Backend) Synchronize() error { return nil }

// Storage is host memory holding float32 (F32), bfloat16 (BF16, as bit
// patterns: the upper halves of float32s) or int32 (I32) elements.
type Storage struct {
	dtype engine.DType
	f32   []float32
	bf16  []uint16
	i32   []int32
	i8    []uint8 // I8: codes (AdamW's 8-bit moments)
	n     int
	freed bool
}

// Device is the host.
func (s *Storage) Device() engine.Device { return engine.Device{Kind: engine.CPU} }

// DType is F32, BF16 or I32.
func (s *Storage) DType() engine.DType { return s.dtype }

// Len is the number of elements.
func (s *Storage) Len() int { return s.n }

// Alloc returns a zero-filled F32, BF16 or I32 tensor. A BF16 tensor takes
// 2 bytes an element, and only some operations accept it (see the package
// comment).
func (b *Backend) Alloc(dtype engine.DType, shape ...int) *engine.Tensor {
	return b.alloc("Alloc", dtype, shape)
}

// Empty returns a tensor of undefined contents (see engine.Backend): Go
// zeroes memory anyway, so it costs what Alloc does, except under
// poisoning (Options.Poison, engine.Poison), where it is filled with NaN
// (I32: −1), as the CUDA backend fills its Empty tensors.
func (b *Backend) Empty(dtype engine.DType, shape ...int) *engine.Tensor {
	t := b.alloc("Empty", dtype, shape)
	if b.poison {
		s := t.Storage.(*Storage)
		for i := range s.f32 {
			s.f32[i] = float32(math.NaN())
		}
		for i := range s.bf16 {
			s.bf16[i] = 0xffff // a NaN
		}
		for i := range s.i32 {
			s.i32[i] = -1
		}
	}
	return t
}

func (b *Backend) alloc(op string, dtype engine.DType, shape []int) *engine.Tensor {
	n := 1
	for _, d := range shape {
		check(d >= 0, op, engine.MisuseRange, "negative dimension in shape %v", shape)
		n *= d
	}
	s := &Storage{dtype: dtype, n: n}
	switch dtype {
	case engine.F32:
		s.f32 = make([]float32, n)
	case engine.I32:
		s.i32 = make([]int32, n)
	case engine.BF16:
		s.bf16 = make([]uint16, n)
	case engine.I8:
		s.i8 = make([]uint8, n)
	default:
		misuse(op, engine.MisuseDType, "unknown dtype %v", dtype)
	}
	bytes := int64(n) * int64(dtype.Size())
	now := b.allocated.Add(bytes)
	for {
		p := b.peak.Load()
		if now <= p || b.peak.CompareAndSwap(p, now) {
			break
		}
	}
	return &engine.Tensor{Storage: s, Shape: append([]int(nil), shape...)}
}

// Free releases t's storage. Every view of it becomes unusable, and
// freeing a storage twice panics. Free takes the whole storage, whatever
// part of it t views.
func (b *Backend) Free(t *engine.Tensor) {
	check(t != nil, "Free", engine.MisuseTensor, "nil tensor")
	s, ok := t.Storage.(*Storage)
	check(ok, "Free", engine.MisuseTensor, "%v is not a CPU tensor (storage %T)", t, t.Storage)
	check(!s.freed, "Free", engine.MisuseTensor, "a tensor that was already freed")
	s.freed = true
	s.f32, s.bf16, s.i32, s.i8 = nil, nil, nil, nil
	b.allocated.Add(-int64(s.n) * int64(s.dtype.Size()))
}

// MemStats reports the bytes of live tensors and their peak. Kernels'
// short-lived workspaces (attention's score gradients, per-head partial
// key/value gradients) are ordinary Go allocations and are not counted.
func (b *Backend) MemStats() engine.MemStats {
	return engine.MemStats{Allocated: b.allocated.Load(), Peak: b.peak.Load()}
}

// storageOf returns t's CPU storage, panicking with an *engine.Misuse of
// operation op (MisuseTensor) for a nil tensor, a tensor of another
// backend, one already freed, or a view that overruns its storage.
//
// It and the accessors below test with if rather than check, whose
// arguments would be boxed on every call: they run for every tensor of
// every kernel.
func storageOf(op string, t *engine.Tensor) *Storage {
	if t == nil {
		misuse(op, engine.MisuseTensor, "nil tensor")
	}
	s, ok := t.Storage.(*Storage)
	if !ok {
		misuse(op, engine.MisuseTensor, "tensor %v is not a CPU tensor (storage %T)", t, t.Storage)
	}
	if s.freed {
		misuse(op, engine.MisuseTensor, "use of a freed tensor")
	}
	if n := t.Len(); t.Offset < 0 || t.Offset+n > s.n {
		misuse(op, engine.MisuseTensor, "view of %v elements at offset %d overruns its storage of %d", n, t.Offset, s.n)
	}
	return s
}

// Float32s returns the elements t views, sharing memory with it: writes
// through the slice change the tensor. The slice's capacity ends with the
// view, so appending cannot overwrite a neighbour. It panics unless t is a
// CPU F32 tensor.
func Float32s(t *engine.Tensor) []float32 { return floats("Float32s", t) }

// floats is Float32s for operation op, which it names when t is not F32:
// the kernels compute in float32, and a BF16 tensor reaches only the
// operations the package comment lists.
func floats(op string, t *engine.Tensor) []float32 {
	s := storageOf(op, t)
	if s.dtype != engine.F32 {
		if s.dtype == engine.BF16 {
			misuse(op, engine.MisuseDType, "a bf16 tensor (%v): the loss, its gradient, the reductions and the optimizer's state are F32 (see the package comment for the kernels that take BF16)", t)
		}
		misuse(op, engine.MisuseDType, "a %v tensor (%v), want F32", s.dtype, t)
	}
	end := t.Offset + t.Len()
	return s.f32[t.Offset:end:end]
}

// BF16s is Float32s for BF16 tensors: their elements' bit patterns, the
// upper halves of float32s (checkpoints.BF16ToFloat32 widens one), shared
// with the tensor, so that bf16 weights can be read into it directly.
func BF16s(t *engine.Tensor) []uint16 { return bf16s("BF16s", t) }

// bf16s is BF16s for operation op, which it names when t is not BF16.
func bf16s(op string, t *engine.Tensor) []uint16 {
	s := storageOf(op, t)
	if s.dtype != engine.BF16 {
		misuse(op, engine.MisuseDType, "a %v tensor (%v), want BF16", s.dtype, t)
	}
	end := t.Offset + t.Len()
	return s.bf16[t.Offset:end:end]
}

// Int32s is Float32s for I32 tensors.
func Int32s(t *engine.Tensor) []int32 { return ints("Int32s", t) }

// ints is Int32s for operation op, which it names when t is not I32.
func ints(op string, t *engine.Tensor) []int32 {
	s := storageOf(op, t)
	if s.dtype != engine.I32 {
		misuse(op, engine.MisuseDType, "a %v tensor (%v), want I32", s.dtype, t)
	}
	end := t.Offset + t.Len()
	return s.i32[t.Offset:end:end]
}

// Upload copies src into t. An I32 tensor receives the values converted
// to int32 (truncated toward zero), a BF16 one the values rounded to the
// nearest bfloat16, ties to even (checkpoints.Float32ToBF16).
func (b *Backend) Upload(t *engine.Tensor, src []float32) {
	checkLen("Upload", len(src), t)
	switch storageOf("Upload", t).dtype {
	case engine.I32:
		dst := ints("Upload", t)
		for i, v := range src {
			dst[i] = int32(v)
		}
	case engine.BF16:
		roundBF16(b, bf16s("Upload", t), src)
	default:
		copy(floats("Upload", t), src)
	}
}

// UploadInt32 copies src into the I32 tensor t.
func (b *Backend) UploadInt32(t *engine.Tensor, src []int32) {
	checkLen("UploadInt32", len(src), t)
	copy(ints("UploadInt32", t), src)
}

// Download copies t into dst, converting int32 elements to float32 and
// widening bfloat16 ones (exactly).
func (b *Backend) Download(dst []float32, t *engine.Tensor) {
	checkLen("Download", len(dst), t)
	switch storageOf("Download", t).dtype {
	case engine.I32:
		for i, v := range ints("Download", t) {
			dst[i] = float32(v)
		}
	case engine.BF16:
		widenBF16(b, dst, bf16s("Download", t))
	default:
		copy(dst, floats("Download", t))
	}
}

// DownloadInt32 copies the I32 tensor t into dst.
func (b *Backend) DownloadInt32(dst []int32, t *engine.Tensor) {
	checkLen("DownloadInt32", len(dst), t)
	copy(dst, ints("DownloadInt32", t))
}

// checkLen refuses a transfer of got host elements to or from t (of
// operation op) unless t holds as many.
func checkLen(op string, got int, t *engine.Tensor) {
	if t == nil {
		misuse(op, engine.MisuseTensor, "nil tensor")
	}
	if got != t.Len() {
		misuse(op, engine.MisuseShape, "%d host elements for a tensor of %d (%v)", got, t.Len(), t)
	}
}

// check panics with an *engine.Misuse of operation op and class class,
// its detail formatted, when a kernel's arguments break its contract.
// Shapes come from the engine's own arithmetic, so a misfit is a
// programming error, not an input error.
func check(ok bool, op string, class engine.MisuseClass, format string, args ...any) {
	if !ok {
		misuse(op, class, format, args...)
	}
}

// misuse panics with an *engine.Misuse of operation op.
func misuse(op string, class engine.MisuseClass, format string, args ...any) {
	panic(engine.Misusef("cpu", op, class, format, args...))
}

// codes is bf16s for I8 tensors: their 8-bit codes.
func codes(op string, t *engine.Tensor) []uint8 {
	s := storageOf(op, t)
	if s.dtype != engine.I8 {
		misuse(op, engine.MisuseDType, "a %v tensor (%v), want I8", s.dtype, t)
	}
	end := t.Offset + t.Len()
	return s.i8[t.Offset:end:end]
}
