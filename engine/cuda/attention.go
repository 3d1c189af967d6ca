package cuda

import (
	"fmt"
	"math"

	"github.com/memtrain/memtrain/engine"
)

// attnScratchBytes bounds AttentionKV's score buffer: work is cut into
// pieces that fit.
const attnScratchBytes = 256 << 20

// attentionGeometry is the shape of one attention call.
type attentionGeometry struct {
	B, T, heads, kvHeads, D int
	// W is the sliding window, 1 ≤ W ≤ T: query t sees keys (t−W, t]. A
	// plain causal call has W = T, which the kernels' window arithmetic
	// turns into exactly the causal tiles and mask.
	W int
}

func (g attentionGeometry) group() int { return g.heads / g.kvHeads }

func (g attentionGeometry) scale() float32 { return float32(1 / math.Sqrt(float64(g.D))) }

// attentionShape reads the geometry from q [B,T,heads,D], k
// [B,T,kvHeads,D] and the window.
func attentionShape(op string, q, k *engine.Tensor, window int) attentionGeometry {
	if q == nil || k == nil {
		misuse(op, engine.MisuseTensor, "nil tensor")
	}
	if len(q.Shape) != 4 || len(k.Shape) != 4 {
		misuse(op, engine.MisuseShape, "q %v and k %v must be [B,T,heads,D] and [B,T,kvHeads,D]", q, k)
	}
	g := attentionGeometry{B: q.Dim(0), T: q.Dim(1), heads: q.Dim(2), kvHeads: k.Dim(2), D: q.Dim(3)}
	if g.kvHeads <= 0 || g.heads%g.kvHeads != 0 {
		misuse(op, engine.MisuseShape, "%d query heads cannot share %d key/value heads", g.heads, g.kvHeads)
	}
	if k.Dim(3) != g.D {
		misuse(op, engine.MisuseShape, "q %v and k %v differ in head size", q, k)
	}
	checkWindow(op, window)
	g.W = g.T
	if window > 0 && window < g.T {
		g.W = window
	}
	return g
}

// checkWindow refuses a negative window (MisuseRange).
func checkWindow(op string, window int) {
	if window < 0 {
		misuse(op, engine.MisuseRange, "window %d is negative", window)
	}
}

// attentionRows is how many packed query rows (or, in the dk/dv pass,
// keys) one block of the flash-attention kernels accumulates: FA_ROWS,
// fewer for head sizes whose rows would overflow the FA_ACC
// accumulators each of the FA_THREADS threads holds. A head size beyond
// them is a limit of the kernels, not a misuse of the interface, and
// panics with a plain message.
func attentionRows(op string, D int) int {
	if D > faThreads*faAccumulators {
		panic(fmt.Sprintf("cuda: %s: head size %d exceeds the kernels' %d", op, D, faThreads*faAccumulators))
	}
	return max(1, min(faRows, faThreads*faAccumulators/max(D, 1)))
}

// attentionBlocks is the number of blocks of pairs·⌈n/per⌉, checked
// against the grid's limit.
func attentionBlocks(op string, pairs, n, per int) int {
	blocks := int64(pairs) * ((int64(n) + int64(per) - 1) / int64(per))
	if blocks > math.MaxInt32 {
		panic(fmt.Sprintf("cuda: %s: %d blocks exceed the grid", op, blocks))
	}
	return int(blocks)
}

// Attention is causal grouped-query self-attention: q [B,T,heads,D], k and
// v [B,T,kvHeads,D], out [B,T,heads,D], lse [B,heads,T] (F32); a window
// W > 0 limits query t to the keys (t−W, t] (engine.Backend).
//
// One kernel, FlashAttention-2's forward: a block per key/value head of a
// sequence and tile of its group's packed query rows (the group's heads
// share each key/value tile), an online softmax over the key tiles from
// the first its rows' windows reach up to the diagonal (the others are
// skipped: O(T·W) work), and only each row's log-sum-exp stored. BF16 tensors of
// head size 64 or 128 on sm_80 and newer take the tensor-core kernels of
// kernels/flash.cu (tensorCoreAttention); the rest flash_attention of
// kernels/attention.cu, on the CUDA cores in float32.
func (b *Backend) Attention(out, lse, q, k, v *engine.Tensor, window int) {
	b.do(func() {
		g := attentionShape("Attention", q, k, window)
		B, T, H, KV, D, G := g.B, g.T, g.heads, g.kvHeads, g.D, g.group()
		O, L := b.floatView("Attention", "out", out), b.f32View("Attention", "lse", lse)
		Q, K, V := b.floatView("Attention", "q", q), b.floatView("Attention", "k", k), b.floatView("Attention", "v", v)
		if O.n != Q.n || V.n != K.n || K.n != B*T*KV*D {
			misuse("Attention", engine.MisuseShape, "out %v, q %v, k %v, v %v do not agree", out, q, k, v)
		}
		if L.n != B*H*T {
			misuse("Attention", engine.MisuseShape, "lse %v, want [%d,%d,%d]", lse, B, H, T)
		}
		checkDisjoint("Attention", out, "out", q, "q")
		checkDisjoint("Attention", out, "out", k, "k")
		checkDisjoint("Attention", out, "out", v, "v")
		if Q.n == 0 {
			return
		}
		if b.tensorCoreAttention(D, O, Q, K, V) {
			launchFlashMMAForward(b, g, O, L, Q, K, V)
			return
		}
		R := attentionRows("Attention", D)
		b.launch(kFlashAttention, grid1(attentionBlocks("Attention", B*KV, T*G, R)), block1(faThreads),
			O.ptr, O.dt(), L.ptr, Q.ptr, Q.dt(), K.ptr, K.dt(), V.ptr, V.dt(),
			int32(T), int32(H), int32(KV), int32(D), int32(R), int32(g.W), g.scale())
	})
}

// AttentionBackward writes dq, dk and dv from dOut, the inputs, and the
// out and lse that Attention saved, recomputing the probabilities tile by
// tile. BF16 tensors of head size 64 or 128 on sm_80 and newer
// (tensorCoreAttention) take attention_row_dot and then one pass on
// tensor cores, flash_mma_backward (kernels/flash.cu), which writes all
// three, dq summed in a fixed order without atomics; the rest take
// (kernels/attention.cu):
//
//	attention_row_dot              δ = rowsum(dOut ⊙ out), into scratch
//	flash_attention_backward_dkv   per key tile: dv = Σ Pᵀ·dOut, dk = Σ dSᵀ·q/√D
//	flash_attention_backward_dq    per query tile: dq = Σ dS·k/√D
//
// with P = e^(q·kᵀ/√D − lse) and dS = P ⊙ (dOut·vᵀ − δ), over the tiles
// within reach of the window (as Attention's). Splitting dk/dv
// from dq gives every gradient element one writer, summing in a fixed
// order, so there are no atomics and the result is reproducible; the
// price is computing P and dP twice. dk and dv sum over their group's
// heads, and all three are overwritten.
func (b *Backend) AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse *engine.Tensor, window int) {
	b.do(func() {
		const op = "AttentionBackward"
		g := attentionShape(op, q, k, window)
		B, T, H, KV, D, G := g.B, g.T, g.heads, g.kvHeads, g.D, g.group()
		dQ, dK, dV := b.floatView(op, "dq", dq), b.floatView(op, "dk", dk), b.floatView(op, "dv", dv)
		dO, O, L := b.floatView(op, "dOut", dOut), b.floatView(op, "out", out), b.f32View(op, "lse", lse)
		Q, K, V := b.floatView(op, "q", q), b.floatView(op, "k", k), b.floatView(op, "v", v)
		if dQ.n != Q.n || dO.n != Q.n || O.n != Q.n || dK.n != K.n || dV.n != K.n || V.n != K.n || K.n != B*T*KV*D {
			misuse(op, engine.MisuseShape, "dq %v, dk %v, dv %v, dOut %v, out %v, q %v, k %v, v %v do not agree", dq, dk, dv, dOut, out, q, k, v)
		}
		if L.n != B*H*T {
			misuse(op, engine.MisuseShape, "lse %v, want [%d,%d,%d]", lse, B, H, T)
		}
		if Q.n == 0 {
			return
		}
		rows := B * T * H
		mma := b.tensorCoreAttention(D, dQ, dK, dV, dO, O, Q, K, V)
		scratch := uint64(rows) * 4
		var accOff, ctrOff uint64
		if mma {
			accOff, ctrOff, scratch = flashBackwardScratch(g)
		}
		delta := b.scratchBuffer(scratchAttn, scratch)
		b.launch(kAttentionRowDot, grid1((rows+faThreads/32-1)/(faThreads/32)), block1(faThreads),
			delta, dO.ptr, dO.dt(), O.ptr, O.dt(), int64(rows), int32(T), int32(H), int32(D))
		if mma {
			launchFlashMMABackward(b, g, delta, accOff, ctrOff, dQ, dK, dV, dO, Q, K, V, L)
			return
		}
		R := attentionRows(op, D)
		b.launch(kFlashAttentionDKV, grid1(attentionBlocks(op, B*KV, T, R)), block1(faThreads),
			dK.ptr, dK.dt(), dV.ptr, dV.dt(), dO.ptr, dO.dt(), Q.ptr, Q.dt(), K.ptr, K.dt(), V.ptr, V.dt(), L.ptr, delta,
			int32(T), int32(H), int32(KV), int32(D), int32(R), int32(g.W), g.scale())
		b.launch(kFlashAttentionDQ, grid1(attentionBlocks(op, B*KV, T*G, R)), block1(faThreads),
			dQ.ptr, dQ.dt(), dO.ptr, dO.dt(), Q.ptr, Q.dt(), K.ptr, K.dt(), V.ptr, V.dt(), L.ptr, delta,
			int32(T), int32(H), int32(KV), int32(D), int32(R), int32(g.W), g.scale())
	})
}

// AttentionKV is inference attention against a key/value cache (kernel
// attention_kv, one block per query): for sequence b, the n queries
// q[b,i] sit at positions p = start[b]+i and attend to kCache[b, lo :
// p+1], lo = max(0, p+1−W) with a window W > 0 and 0 without. q, out
// [B,n,heads,D]; kCache, vCache [B,Tmax,kvHeads,D]; start I32 [B],
// checked on the host against Tmax.
func (b *Backend) AttentionKV(out, q, kCache, vCache, start *engine.Tensor, window int) {
	b.do(func() {
		checkWindow("AttentionKV", window)
		if q == nil || kCache == nil {
			misuse("AttentionKV", engine.MisuseTensor, "nil tensor")
		}
		if len(q.Shape) != 4 || len(kCache.Shape) != 4 {
			misuse("AttentionKV", engine.MisuseShape, "q %v and kCache %v must be [B,n,heads,D] and [B,Tmax,kvHeads,D]", q, kCache)
		}
		B, n, H, D := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
		Tmax, KV := kCache.Dim(1), kCache.Dim(2)
		if kCache.Dim(0) != B || kCache.Dim(3) != D || KV <= 0 || H%KV != 0 {
			misuse("AttentionKV", engine.MisuseShape, "q %v does not fit kCache %v", q, kCache)
		}
		O, Q := b.floatView("AttentionKV", "out", out), b.floatView("AttentionKV", "q", q)
		Kc, Vc := b.floatView("AttentionKV", "kCache", kCache), b.floatView("AttentionKV", "vCache", vCache)
		S := b.intView("AttentionKV", "start", start)
		if O.n != Q.n || Vc.n != Kc.n || S.n != B {
			misuse("AttentionKV", engine.MisuseShape, "out %v, vCache %v, start %v do not fit q %v, kCache %v", out, vCache, start, q, kCache)
		}
		for bi, s := range b.hostInts(S) {
			if s < 0 || int(s)+n > Tmax {
				misuse("AttentionKV", engine.MisuseRange, "start[%d] = %d with %d queries overruns the cache of %d", bi, s, n, Tmax)
			}
		}
		items := B * n * H
		if items == 0 {
			return
		}
		per := max(1, min(items, attnScratchBytes/(4*Tmax)))
		scores := b.scratchBuffer(scratchReduce, uint64(per)*uint64(Tmax)*4)
		scale := float32(1 / math.Sqrt(float64(D)))
		for item0 := 0; item0 < items; item0 += per {
			b.launch(kAttentionKV, grid1(min(per, items-item0)), block1(256),
				O.ptr, O.dt(), Q.ptr, Q.dt(), Kc.ptr, Kc.dt(), Vc.ptr, Vc.dt(), S.ptr, scores,
				int64(item0), int32(n), int32(H), int32(KV), int32(D), int32(Tmax), int32(min(window, Tmax)), scale)
		}
	})
}

// The tensor-core attention kernels (kernels/flash.cu).
const (
	kFlashMMAForward64   kernel = "flash_mma_forward_d64"
	kFlashMMAForward128  kernel = "flash_mma_forward_d128"
	kFlashMMABackward64  kernel = "flash_mma_backward_d64"
	kFlashMMABackward128 kernel = "flash_mma_backward_d128"
)

// Geometry the Go code shares with kernels/flash.cu (a test compares).
const (
	fmThreads = 128  // FM_THREADS
	fmRows    = 64   // FM_ROWS: the forward's packed query rows per block
	fmKeys    = 32   // FM_KEYS: the forward's keys per tile
	fbKeys    = 64   // FB_KEYS: the backward's keys per block
	fbQTile   = 2048 // FB_QTILE_ELEMS: the backward's query tile, rows × D
)

// tensorCoreAttention reports whether an attention call on these views
// takes the tensor-core kernels: every tensor BF16, head size 64 or 128, a
// device of compute capability 8.0 or newer (mma.sync with bf16, cp.async),
// and every base address 16-byte aligned, as cp.async's copies of 16
// bytes need (rows are then aligned too: D·2 bytes is a multiple of 16).
func (b *Backend) tensorCoreAttention(D int, vs ...view) bool {
	if D != 64 && D != 128 || b.info.Major < 8 {
		return false
	}
	for _, v := range vs {
		if v.dtype != engine.BF16 || v.ptr%16 != 0 {
			return false
		}
	}
	return true
}

// launchFlashMMAForward runs flash_mma_forward_d64 or _d128: a block of
// fmThreads per pair (b, kv) and fmRows packed query rows.
func launchFlashMMAForward(b *Backend, g attentionGeometry, O, L, Q, K, V view) {
	k := kFlashMMAForward64
	if g.D == 128 {
		k = kFlashMMAForward128
	}
	b.launch(k, grid1(attentionBlocks("Attention", g.B*g.kvHeads, g.T*g.group(), fmRows)), block1(fmThreads),
		O.ptr, L.ptr, Q.ptr, K.ptr, V.ptr, int32(g.T), int32(g.heads), int32(g.kvHeads), int32(g.W), g.scale())
}

// flashBackwardScratch lays out the backward's scratch buffer: δ (float32
// [B, H, T]), then from accOff the float32 dq accumulators (fbQTile
// elements for each query tile of each pair (b, kv)), then from ctrOff
// one int32 counter per tile; bytes is the total.
func flashBackwardScratch(g attentionGeometry) (accOff, ctrOff, bytes uint64) {
	align := func(n uint64) uint64 { return (n + 255) &^ 255 }
	tiles := uint64(g.B*g.kvHeads) * flashQueryTiles(g)
	accOff = align(uint64(g.B*g.T*g.heads) * 4)
	ctrOff = align(accOff + tiles*fbQTile*4)
	return accOff, ctrOff, ctrOff + tiles*4
}

// flashQueryTiles is the number of the backward's query tiles of a pair:
// ⌈T·G / (fbQTile/D)⌉.
func flashQueryTiles(g attentionGeometry) uint64 {
	per := uint64(fbQTile / g.D)
	return (uint64(g.T*g.group()) + per - 1) / per
}

// launchFlashMMABackward zeroes the dq counters and runs
// flash_mma_backward_d64 or _d128: a block of fmThreads per pair (b, kv)
// and fbKeys keys, in key-tile order within a pair (the order its dq sums
// follow).
func launchFlashMMABackward(b *Backend, g attentionGeometry, scratch devptr, accOff, ctrOff uint64, dQ, dK, dV, dO, Q, K, V, L view) {
	k := kFlashMMABackward64
	if g.D == 128 {
		k = kFlashMMABackward128
	}
	tiles := uint64(g.B*g.kvHeads) * flashQueryTiles(g)
	b.must("cuMemsetD8Async", b.cu.cuMemsetD8Async(scratch+devptr(ctrOff), 0, tiles*4, b.stream))
	b.launch(k, grid1(attentionBlocks("AttentionBackward", g.B*g.kvHeads, g.T, fbKeys)), block1(fmThreads),
		dQ.ptr, dK.ptr, dV.ptr, scratch+devptr(accOff), scratch+devptr(ctrOff), dO.ptr, Q.ptr, K.ptr, V.ptr, L.ptr, scratch,
		int32(g.T), int32(g.heads), int32(g.kvHeads), int32(g.W), g.scale())
}
