package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
)

// Storage is device memory holding F32, BF16 or I32 elements.
//
// An I32 storage also keeps a host copy of its contents while the host
// knows them (after Alloc, a poisoned Empty, UploadInt32, Fill, or a Copy
// from a storage whose copy is valid), since token ids and positions are written by the
// host: EmbeddingBackward sorts the ids on the host, and the kernels that
// take ids or positions check them there, without a round trip to the
// device. A kernel that writes an I32 tensor (Argmax) invalidates it.
type Storage struct {
	b     *Backend
	ptr   devptr // the first element, at the end of block
	block devptr // the allocator's block holding it; 0 when empty
	dtype engine.DType
	n     int
	freed bool

	host      []int32 // I32 only
	hostValid bool
}

// Device is the storage's GPU.
func (s *Storage) Device() engine.Device { return s.b.Device() }

// DType is the element type.
func (s *Storage) DType() engine.DType { return s.dtype }

// Len is the number of elements.
func (s *Storage) Len() int { return s.n }

// Alloc returns a zero-filled tensor on the device, in a block of the
// backend's caching allocator: one freed before when there is one of its
// size class, with no driver call. It panics when the device is out of
// memory even once the cache is emptied, with the sizes asked for and
// free.
func (b *Backend) Alloc(dtype engine.DType, shape ...int) *engine.Tensor {
	return b.alloc("Alloc", dtype, shape, 0)
}

// Empty is Alloc without the zero-fill (a memset of the whole tensor):
// its contents are whatever the block held — a freed tensor's, reused
// from the cache. Under poisoning (Options.Poison, engine.Poison) it is
// filled with bytes 0xff instead: NaN in F32 and BF16, −1 in I32, on new
// and reused blocks alike.
func (b *Backend) Empty(dtype engine.DType, shape ...int) *engine.Tensor {
	if b.poison {
		return b.alloc("Empty", dtype, shape, 0xff)
	}
	return b.alloc("Empty", dtype, shape, -1)
}

// alloc is Alloc and Empty: the tensor's bytes are set to fill, or left
// as they are when fill is −1. An I32 tensor's host copy (Storage) holds
// what the device does: zeros, or −1 for a poisoned one; an unfilled one
// has none until the device's contents are read.
func (b *Backend) alloc(op string, dtype engine.DType, shape []int, fill int) *engine.Tensor {
	n := 1
	for _, d := range shape {
		if d < 0 {
			misuse(op, engine.MisuseRange, "negative dimension in shape %v", shape)
		}
		n *= d
	}
	switch dtype {
	case engine.F32, engine.BF16, engine.I32, engine.I8:
	default:
		misuse(op, engine.MisuseDType, "unknown dtype %v", dtype)
	}
	s := &Storage{b: b, dtype: dtype, n: n}
	bytes := int64(n) * int64(dtype.Size())
	b.do(func() {
		if bytes > 0 {
			block, size, err := b.mem.alloc(uint64(bytes))
			if err != nil {
				var free, total uint64
				b.cu.cuMemGetInfo(&free, &total)
				panic(fmt.Errorf("cuda: %s of %s %s (%d bytes) on %s: %w (%d of %d bytes free)",
					op, dtype, shapeString(shape), bytes, b.Device(), err, free, total))
			}
			s.block, s.ptr = block, tensorIn(block, size, uint64(bytes))
			if fill >= 0 {
				b.must("cuMemsetD8Async", b.cu.cuMemsetD8Async(s.ptr, uint8(fill), uint64(bytes), b.stream))
			}
		}
	})
	if dtype == engine.I32 {
		s.host = make([]int32, n)
		switch fill {
		case 0:
			s.hostValid = true
		case 0xff:
			for i := range s.host {
				s.host[i] = -1
			}
			s.hostValid = true
		}
	}
	now := b.allocated.Add(bytes)
	for {
		p := b.peak.Load()
		if now <= p || b.peak.CompareAndSwap(p, now) {
			break
		}
	}
	return &engine.Tensor{Storage: s, Shape: append([]int(nil), shape...)}
}

// Free releases t's storage (with every view of it) to the backend's
// cache, without waiting: work issued from now on, which may reuse the
// memory, runs after the work issued so far, which may still read it.
// Freeing a storage twice panics.
func (b *Backend) Free(t *engine.Tensor) {
	if t == nil {
		misuse("Free", engine.MisuseTensor, "nil tensor")
	}
	s, ok := t.Storage.(*Storage)
	if !ok || s.b != b {
		misuse("Free", engine.MisuseTensor, "%v is not a tensor of this backend (storage %T)", t, t.Storage)
	}
	if s.freed {
		misuse("Free", engine.MisuseTensor, "a tensor that was already freed")
	}
	s.freed = true
	b.do(func() {
		if s.block != 0 {
			if err := b.mem.release(s.block); err != nil {
				panic(err)
			}
		}
	})
	s.host = nil
	b.allocated.Add(-int64(s.n) * int64(s.dtype.Size()))
}

// fenceFrees is for a collective issued on another stream (NCCL's side
// stream), which may read or write any tensor until it completes: blocks
// freed from now until the work issued so far on stream has completed are
// reused only then. It records an event and waits for nothing (the
// allocator polls it with cuEventQuery). It runs on the worker thread.
func (b *Backend) fenceFrees(stream uintptr) error { return b.mem.fence(stream) }

// freeBufferAfter releases a buffer of the allocator used by work on
// another stream: it returns to the cache once the work issued so far on
// stream has completed. It runs on the worker thread.
func (b *Backend) freeBufferAfter(s *devBuffer, stream uintptr) error {
	if s.ptr == 0 {
		return nil
	}
	if !s.cached {
		return fmt.Errorf("cuda: freeBufferAfter of a buffer not from the allocator (grow it with growBuffer)")
	}
	p := s.ptr
	*s = devBuffer{}
	return b.mem.releaseAfter(p, stream)
}

// MemStats reports the bytes of live tensors and their peak, as asked
// for. The backend's scratch buffers (attention's score gradients,
// reduction partials), the rounding up to size classes and the cache are
// not counted; Reserved counts them.
func (b *Backend) MemStats() engine.MemStats {
	return engine.MemStats{Allocated: b.allocated.Load(), Peak: b.peak.Load()}
}

// Reserved reports the device memory the backend holds from the driver:
// the blocks of live tensors and scratch buffers, rounded up to their
// size classes, and the cached blocks free for reuse (the second
// result, part of the first). It may be called from any goroutine.
func (b *Backend) Reserved() (reserved, cached int64) {
	return b.mem.reserved.Load(), b.mem.cached.Load()
}

// EmptyCache gives the cached free blocks back to the driver, after
// waiting for the work issued so far (one synchronisation): for a memory
// check that reads cuMemGetInfo, or another user of the GPU. The cache
// also empties by itself when an allocation finds the device full.
func (b *Backend) EmptyCache() error {
	if b.closed {
		return fmt.Errorf("cuda: EmptyCache on a closed backend")
	}
	return b.w.try(b.mem.emptyCache)
}

// tensorIn is where a tensor of n bytes starts in a block of size bytes:
// at the end, aligned to 256 bytes (what cuMemAlloc promises), so that a
// kernel running past the tensor's end runs past the block's within 255
// bytes (the fake GPUs put a guard page after every block, which catches
// it) rather than into the slack of the size class.
func tensorIn(block devptr, size, n uint64) devptr {
	const align = 256
	return block + devptr(size-(n+align-1)/align*align)
}

// view is a tensor resolved to its storage: the device address of its
// first element, and its element count and type.
type view struct {
	s     *Storage
	ptr   devptr
	n     int
	dtype engine.DType
	off   int // elements into the storage
}

// dt is the dtype as kernels take it.
func (v view) dt() int32 { return int32(v.dtype) }

// bytes is the view's size.
func (v view) bytes() uint64 { return uint64(v.n) * uint64(v.dtype.Size()) }

// at is the address of element i of the view.
func (v view) at(i int) devptr { return v.ptr + devptr(i*v.dtype.Size()) }

// viewOf resolves t for operation op, panicking with an *engine.Misuse
// (MisuseTensor) for a nil tensor, a tensor of another backend, one
// already freed, or a view that overruns its storage.
func (b *Backend) viewOf(op string, t *engine.Tensor) view {
	if t == nil {
		misuse(op, engine.MisuseTensor, "nil tensor")
	}
	s, ok := t.Storage.(*Storage)
	if !ok {
		misuse(op, engine.MisuseTensor, "tensor %v is not a CUDA tensor (storage %T)", t, t.Storage)
	}
	if s.b != b {
		misuse(op, engine.MisuseTensor, "tensor %v belongs to another backend", t)
	}
	if s.freed {
		misuse(op, engine.MisuseTensor, "use of a freed tensor")
	}
	n := t.Len()
	if t.Offset < 0 || t.Offset+n > s.n {
		misuse(op, engine.MisuseTensor, "view of %d elements at offset %d overruns its storage of %d", n, t.Offset, s.n)
	}
	return view{s: s, ptr: s.ptr + devptr(t.Offset*s.dtype.Size()), n: n, dtype: s.dtype, off: t.Offset}
}

// floatView is viewOf for an F32 or BF16 tensor.
func (b *Backend) floatView(op, name string, t *engine.Tensor) view {
	v := b.viewOf(op, t)
	if v.dtype != engine.F32 && v.dtype != engine.BF16 {
		misuse(op, engine.MisuseDType, "%s is %v, want F32 or BF16", name, t)
	}
	return v
}

// f32View is viewOf for an F32 tensor: the loss's (see engine.Backend).
func (b *Backend) f32View(op, name string, t *engine.Tensor) view {
	v := b.viewOf(op, t)
	if v.dtype != engine.F32 {
		misuse(op, engine.MisuseDType, "%s is %v, want F32", name, t)
	}
	return v
}

// bf16View is viewOf for a BF16 tensor: a split master's halves.
func (b *Backend) bf16View(op, name string, t *engine.Tensor) view {
	v := b.viewOf(op, t)
	if v.dtype != engine.BF16 {
		misuse(op, engine.MisuseDType, "%s is %v, want BF16", name, t)
	}
	return v
}

// codesView is viewOf for an I8 tensor: AdamW's 8-bit moments.
func (b *Backend) codesView(op, name string, t *engine.Tensor) view {
	v := b.viewOf(op, t)
	if v.dtype != engine.I8 {
		misuse(op, engine.MisuseDType, "%s is %v, want I8", name, t)
	}
	return v
}

// refuseCodes refuses an I8 tensor to a transfer or fill of float
// values (MisuseDType), as the CPU backend does: its codes mean values
// only with their scales (MasterSplitter's DecodeMoment, EncodeMoment).
func refuseCodes(op string, v view, t *engine.Tensor) {
	if v.dtype == engine.I8 {
		misuse(op, engine.MisuseDType, "%v holds 8-bit moments' codes: decode or encode them (DecodeMoment, EncodeMoment)", t)
	}
}

// intView is viewOf for an I32 tensor.
func (b *Backend) intView(op, name string, t *engine.Tensor) view {
	v := b.viewOf(op, t)
	if v.dtype != engine.I32 {
		misuse(op, engine.MisuseDType, "%s is %v, want I32", name, t)
	}
	return v
}

// misuse panics with an *engine.Misuse of operation op (see
// engine.Backend): arguments that break its contract.
func misuse(op string, class engine.MisuseClass, format string, args ...any) {
	panic(engine.Misusef("cuda", op, class, format, args...))
}

// checkPartial refuses (MisuseAlias) an output out that shares some
// elements with an input in without being the same view: a kernel that
// may run in place (out = in) cannot have its threads read elements that
// others have already overwritten.
func checkPartial(op string, out *engine.Tensor, outName string, in *engine.Tensor, inName string) {
	if _, partial := engine.Overlap(out, in); partial {
		misuse(op, engine.MisuseAlias, "%s %v at offset %d partially overlaps %s %v at offset %d (only the same view is allowed)",
			outName, out, out.Offset, inName, in, in.Offset)
	}
}

// checkDisjoint refuses (MisuseAlias) an output out that shares any
// element with an input in.
func checkDisjoint(op string, out *engine.Tensor, outName string, in *engine.Tensor, inName string) {
	if same, partial := engine.Overlap(out, in); same || partial {
		misuse(op, engine.MisuseAlias, "%s %v at offset %d overlaps %s %v at offset %d",
			outName, out, out.Offset, inName, in, in.Offset)
	}
}

// hostInts returns the host copy of an I32 view's contents, downloading it
// first when the host does not know them. It runs on the worker thread.
func (b *Backend) hostInts(v view) []int32 {
	if !v.s.hostValid {
		b.copyToHost(pointerTo(v.s.host), v.s.ptr, uint64(v.s.n)*4)
		v.s.hostValid = true
	}
	return v.s.host[v.off : v.off+v.n]
}

// deviceWroteInts marks a storage as written on the device (by a kernel or
// a collective): for an I32 storage, the host no longer knows its contents.
func (v view) deviceWroteInts() {
	if v.dtype == engine.I32 {
		v.s.hostValid = false
	}
}

// checkLen refuses a transfer of got host elements to or from a view of
// want (MisuseShape).
func checkLen(op string, got, want int) {
	if got != want {
		misuse(op, engine.MisuseShape, "%d host elements for a tensor of %d", got, want)
	}
}

// Upload copies src into t, converted to t's dtype: rounded to nearest
// even for BF16, truncated toward zero for I32 (as the CPU backend).
func (b *Backend) Upload(t *engine.Tensor, src []float32) {
	b.do(func() {
		v := b.viewOf("Upload", t)
		checkLen("Upload", len(src), v.n)
		refuseCodes("Upload", v, t)
		if v.n == 0 {
			return
		}
		switch v.dtype {
		case engine.F32:
			b.copyToDevice(v.ptr, pointerTo(src), v.bytes())
		case engine.BF16:
			h := make([]uint16, v.n)
			for i, x := range src {
				h[i] = checkpoints.Float32ToBF16(x)
			}
			b.copyToDevice(v.ptr, pointerTo(h), v.bytes())
		case engine.I32:
			ints := v.s.host[v.off : v.off+v.n]
			for i, x := range src {
				ints[i] = int32(x)
			}
			b.copyToDevice(v.ptr, pointerTo(ints), v.bytes())
		}
	})
}

// UploadInt32 copies src into the I32 tensor t.
func (b *Backend) UploadInt32(t *engine.Tensor, src []int32) {
	b.do(func() {
		v := b.intView("UploadInt32", "t", t)
		checkLen("UploadInt32", len(src), v.n)
		if v.n == 0 {
			return
		}
		copy(v.s.host[v.off:v.off+v.n], src)
		b.copyToDevice(v.ptr, pointerTo(src), v.bytes())
	})
}

// Download copies t into dst as float32, after every kernel issued so far.
func (b *Backend) Download(dst []float32, t *engine.Tensor) {
	b.do(func() {
		v := b.viewOf("Download", t)
		checkLen("Download", len(dst), v.n)
		refuseCodes("Download", v, t)
		if v.n == 0 {
			return
		}
		switch v.dtype {
		case engine.F32:
			b.copyToHost(pointerTo(dst), v.ptr, v.bytes())
		case engine.BF16:
			h := make([]uint16, v.n)
			b.copyToHost(pointerTo(h), v.ptr, v.bytes())
			for i, x := range h {
				dst[i] = checkpoints.BF16ToFloat32(x)
			}
		case engine.I32:
			for i, x := range b.hostInts(v) {
				dst[i] = float32(x)
			}
		}
	})
}

// DownloadInt32 copies the I32 tensor t into dst.
func (b *Backend) DownloadInt32(dst []int32, t *engine.Tensor) {
	b.do(func() {
		v := b.intView("DownloadInt32", "t", t)
		checkLen("DownloadInt32", len(dst), v.n)
		if v.n == 0 {
			return
		}
		copy(dst, b.hostInts(v))
	})
}

// copyToDevice copies host memory to the device in stream order. The
// source is pageable Go memory, which the driver copies into a staging
// buffer before the call returns, so the caller may reuse it at once.
func (b *Backend) copyToDevice(dst devptr, src unsafe.Pointer, bytes uint64) {
	b.must("cuMemcpyHtoDAsync", b.cu.cuMemcpyHtoDAsync(dst, src, bytes, b.stream))
}

// copyToHost copies device memory to the host after every kernel issued
// so far, and waits for it.
func (b *Backend) copyToHost(dst unsafe.Pointer, src devptr, bytes uint64) {
	b.must("cuMemcpyDtoHAsync", b.cu.cuMemcpyDtoHAsync(dst, src, bytes, b.stream))
	b.must("cuStreamSynchronize", b.cu.cuStreamSynchronize(b.stream))
}

// pointerTo is the address of a slice's first element, or nil.
func pointerTo[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// Fill sets every element of t to v (converted to int32 for I32 tensors,
// rounded for BF16), with the driver's memset.
func (b *Backend) Fill(t *engine.Tensor, x float32) {
	b.do(func() {
		v := b.viewOf("Fill", t)
		refuseCodes("Fill", v, t)
		if v.n == 0 {
			return
		}
		switch v.dtype {
		case engine.F32:
			b.must("cuMemsetD32Async", b.cu.cuMemsetD32Async(v.ptr, math.Float32bits(x), uint64(v.n), b.stream))
		case engine.BF16:
			b.must("cuMemsetD16Async", b.cu.cuMemsetD16Async(v.ptr, checkpoints.Float32ToBF16(x), uint64(v.n), b.stream))
		case engine.I32:
			b.must("cuMemsetD32Async", b.cu.cuMemsetD32Async(v.ptr, uint32(int32(x)), uint64(v.n), b.stream))
			if v.s.hostValid {
				ints := v.s.host[v.off : v.off+v.n]
				for i := range ints {
					ints[i] = int32(x)
				}
			}
		}
	})
}

// Copy copies src into dst, which have the same number of elements. Float
// tensors of different dtypes are converted (a cast); an I32 tensor copies
// only into an I32 tensor. Overlapping views of one storage are copied as
// if through a temporary.
func (b *Backend) Copy(dst, src *engine.Tensor) {
	b.do(func() {
		d, s := b.viewOf("Copy", dst), b.viewOf("Copy", src)
		if d.n != s.n {
			misuse("Copy", engine.MisuseShape, "%v into %v", src, dst)
		}
		if d.n == 0 || (d.s == s.s && d.off == s.off) {
			return
		}
		if d.dtype != s.dtype {
			if d.dtype == engine.I32 || s.dtype == engine.I32 || d.dtype == engine.I8 || s.dtype == engine.I8 {
				misuse("Copy", engine.MisuseDType, "%v into %v: an I32 or I8 tensor copies only into its own dtype", src, dst)
			}
			b.launch(kCast, vecGrid(d.n), block1(elementThreads), d.ptr, d.dt(), s.ptr, s.dt(), int64(d.n))
			return
		}
		if d.s == s.s && d.off < s.off+s.n && s.off < d.off+d.n {
			tmp := b.scratchBuffer(scratchCopy, d.bytes())
			b.must("cuMemcpyDtoDAsync", b.cu.cuMemcpyDtoDAsync(tmp, s.ptr, d.bytes(), b.stream))
			b.must("cuMemcpyDtoDAsync", b.cu.cuMemcpyDtoDAsync(d.ptr, tmp, d.bytes(), b.stream))
		} else {
			b.must("cuMemcpyDtoDAsync", b.cu.cuMemcpyDtoDAsync(d.ptr, s.ptr, d.bytes(), b.stream))
		}
		if d.dtype == engine.I32 {
			if s.s.hostValid && d.s.hostValid {
				copy(d.s.host[d.off:d.off+d.n], s.s.host[s.off:s.off+s.n])
			} else {
				d.deviceWroteInts()
			}
		}
	})
}

// Scratch buffers: device memory a kernel needs for a moment, one per
// purpose so that an operation can hold several at once. Each grows to the
// largest size asked for and is kept, in a block of the allocator.
const (
	scratchCopy       = iota // Copy between overlapping views
	scratchReduce            // partial sums, attention_kv's scores
	scratchIndex             // EmbeddingBackward's sorted positions
	scratchAttn              // AttentionBackward's rowsum(dOut ⊙ out)
	scratchWiden             // Gemm's bf16 B widened to float32
	scratchAdamW             // AdamWStep's table of tensors, kept while it is the same
	scratchSumSquares        // SumSquaresMulti's table of tensors, likewise
	scratchCublas            // cuBLAS's workspace (cublasSetWorkspace), set once
	scratchRoPE              // RoPE's table of cos θ and sin θ
	scratchPieces            // DecodeMoment's and EncodeMoment's pieces' starts
	numScratch
)

// devBuffer is a buffer that grows: a scratch buffer, or a communicator's
// padded buffer. Grown by growBuffer, it is a block of the allocator
// (cached); a buffer whose ptr its owner set from cuMemAlloc itself is
// not.
type devBuffer struct {
	ptr    devptr
	bytes  uint64
	cached bool
}

// scratchBuffer returns scratch buffer i with at least bytes bytes. It runs
// on the worker thread.
func (b *Backend) scratchBuffer(i int, bytes uint64) devptr {
	return b.growBuffer(&b.scratch[i], bytes, 1<<20)
}

// growBuffer returns s's memory, grown first when it has fewer than bytes
// bytes: by half again at least, to at least least bytes. The old block
// goes back to the cache, reused in stream order, so growing waits for
// nothing. It runs on the worker thread and panics when the device is
// out of memory.
func (b *Backend) growBuffer(s *devBuffer, bytes, least uint64) devptr {
	if bytes <= s.bytes {
		return s.ptr
	}
	if err := b.freeBuffer(s); err != nil {
		panic(err)
	}
	size := max(bytes, s.bytes+s.bytes/2, least)
	p, got, err := b.mem.alloc(size)
	if err != nil {
		panic(fmt.Errorf("cuda: buffer of %d bytes: %w", size, err))
	}
	*s = devBuffer{ptr: p, bytes: got, cached: true}
	return s.ptr
}

// freeBuffer releases a buffer: to the cache when the allocator's, else
// to the driver after the kernels issued so far.
func (b *Backend) freeBuffer(s *devBuffer) error {
	if s.ptr == 0 {
		return nil
	}
	p, cached := s.ptr, s.cached
	*s = devBuffer{}
	if cached {
		return b.mem.release(p)
	}
	if err := b.call("cuStreamSynchronize", b.cu.cuStreamSynchronize(b.stream)); err != nil {
		return err
	}
	return b.call("cuMemFree", b.cu.cuMemFree(p))
}
