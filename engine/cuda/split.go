package cuda

import "github.com/memtrain/memtrain/engine"

// The compact AdamW state of engine.MasterSplitter: split masters, BF16
// and I8 moments. AdamWStep updates it (adamw.go); these convert it for
// a model's weights and a checkpoint's moments, each with its own kernel
// (adamw.cu), the engine package's function element for element.

var _ engine.MasterSplitter = (*Backend)(nil)

// SplitMaster writes engine.SplitF32 of master's elements into hi and lo
// (kernel split_master).
func (b *Backend) SplitMaster(hi, lo, master *engine.Tensor) {
	b.do(func() {
		x := b.f32View("SplitMaster", "master", master)
		h, l := b.bf16View("SplitMaster", "hi", hi), b.bf16View("SplitMaster", "lo", lo)
		if h.n != x.n || l.n != x.n {
			misuse("SplitMaster", engine.MisuseShape, "master %v into %v and %v", master, hi, lo)
		}
		b.launch(kSplitMaster, elementGrid(x.n), block1(elementThreads), h.ptr, l.ptr, x.ptr, int64(x.n))
	})
}

// JoinMaster writes engine.JoinF32 of hi and lo into master (kernel
// join_master).
func (b *Backend) JoinMaster(master, hi, lo *engine.Tensor) {
	b.do(func() {
		x := b.f32View("JoinMaster", "master", master)
		h, l := b.bf16View("JoinMaster", "hi", hi), b.bf16View("JoinMaster", "lo", lo)
		if h.n != x.n || l.n != x.n {
			misuse("JoinMaster", engine.MisuseShape, "%v and %v into master %v", hi, lo, master)
		}
		b.launch(kJoinMaster, elementGrid(x.n), block1(elementThreads), x.ptr, h.ptr, l.ptr, int64(x.n))
	})
}

// DecodeMoment writes moment k's values of the I8 codes into dst, piece
// by piece (kernel int8_codec).
func (b *Backend) DecodeMoment(dst, codes *engine.Tensor, q *engine.Int8Moments, k int) {
	b.int8Codec("DecodeMoment", 0, dst, codes, q, k)
}

// EncodeMoment writes the codes and scales of src's values of moment k,
// rounded to nearest (kernel int8_codec).
func (b *Backend) EncodeMoment(codes *engine.Tensor, q *engine.Int8Moments, k int, src *engine.Tensor) {
	b.int8Codec("EncodeMoment", 1, src, codes, q, k)
}

// int8Codec is DecodeMoment (encode 0) and EncodeMoment (1): q's piece
// starts go to a scratch buffer (a checkpoint's conversion, not a
// step's), a warp a piece.
func (b *Backend) int8Codec(op string, encode int32, x, codes *engine.Tensor, q *engine.Int8Moments, k int) {
	b.do(func() {
		xv := b.f32View(op, "values", x)
		cv := b.codesView(op, "codes", codes)
		if k != 0 && k != 1 {
			misuse(op, engine.MisuseRange, "moment %d, want 0 (m) or 1 (v)", k)
		}
		if q == nil {
			misuse(op, engine.MisuseTensor, "I8 moment %v without its Int8Moments", codes)
		}
		n := xv.n
		if cv.n != n {
			misuse(op, engine.MisuseShape, "codes %v of %d elements", codes, n)
		}
		starts := q.Starts
		if len(starts) < 1 || starts[0] != 0 && len(starts) > 1 || starts[len(starts)-1] != n {
			misuse(op, engine.MisuseShape, "pieces %v do not cover %d elements", starts, n)
		}
		pieces := len(starts) - 1
		for p := range pieces {
			if l := starts[p+1] - starts[p]; l < 1 || l > engine.Int8Block {
				misuse(op, engine.MisuseShape, "piece %d of %d elements, want 1…%d", p, l, engine.Int8Block)
			}
		}
		// Only moment k's scales, as the CPU backend asks.
		scales := b.f32View(op, "scales", [2]*engine.Tensor{q.MScale, q.VScale}[k])
		if scales.n != pieces {
			misuse(op, engine.MisuseShape, "%d scales for %d pieces", scales.n, pieces)
		}
		if pieces == 0 {
			return
		}
		table := make([]int64, len(starts))
		for i, s := range starts {
			table[i] = int64(s)
		}
		dev := b.scratchBuffer(scratchPieces, uint64(len(table))*8)
		b.copyToDevice(dev, pointerTo(table), uint64(len(table))*8)
		b.launch(kInt8Codec, elementGrid(pieces*32), block1(elementThreads),
			encode, int32(k), xv.ptr, cv.ptr, scales.ptr, dev, int64(pieces))
	})
}

// scaleViews checks q's scale tensors, F32 of one scale a piece.
func (b *Backend) scaleViews(op string, q *engine.Int8Moments, pieces int) (m, v view) {
	m, v = b.f32View(op, "MScale", q.MScale), b.f32View(op, "VScale", q.VScale)
	if m.n != pieces || v.n != pieces {
		misuse(op, engine.MisuseShape, "scales %v and %v for %d pieces", q.MScale, q.VScale, pieces)
	}
	return m, v
}
