package cpu

import (
	"math"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu/vec"
)

// attnTile is the number of query positions, and of keys, in one tile of
// attention. A tile's scores ((attnTile·group) × attnTile floats) stay in
// cache between the products around them, and query and key tiles line
// up, so that without a window only the diagonal tile needs a mask and
// every row of a visited tile sees at least one key.
const attnTile = 64

// attentionGeometry is the shape of one attention call.
type attentionGeometry struct {
	B, T, heads, kvHeads, D int
	// W is the sliding window, 1 ≤ W ≤ T: query t sees keys (t−W, t]. A
	// plain causal call has W = T, whose window every key before t is in.
	W int
}

// group is the number of query heads that share a key/value head.
func (g attentionGeometry) group() int { return g.heads / g.kvHeads }

// scale is the 1/√D that multiplies the scores.
func (g attentionGeometry) scale() float32 { return float32(1 / math.Sqrt(float64(g.D))) }

// tiles is the number of attnTile-long tiles of a sequence.
func (g attentionGeometry) tiles() int { return (g.T + attnTile - 1) / attnTile }

// attentionShape reads the geometry from q [B,T,heads,D], k
// [B,T,kvHeads,D] and the window, and checks that the others agree.
func attentionShape(op string, q, k *engine.Tensor, window int) attentionGeometry {
	check(q != nil && k != nil, op, engine.MisuseTensor, "nil tensor")
	check(len(q.Shape) == 4 && len(k.Shape) == 4, op, engine.MisuseShape, "q %v and k %v must be [B,T,heads,D] and [B,T,kvHeads,D]", q, k)
	checkWindow(op, window)
	g := attentionGeometry{B: q.Dim(0), T: q.Dim(1), heads: q.Dim(2), kvHeads: k.Dim(2), D: q.Dim(3)}
	check(g.kvHeads > 0 && g.heads%g.kvHeads == 0, op, engine.MisuseShape, "%d query heads cannot share %d key/value heads", g.heads, g.kvHeads)
	check(k.Dim(3) == g.D, op, engine.MisuseShape, "q %v and k %v differ in head size", q, k)
	g.W = g.T
	if window > 0 && window < g.T {
		g.W = window
	}
	return g
}

// checkWindow refuses a negative window (MisuseRange).
func checkWindow(op string, window int) {
	check(window >= 0, op, engine.MisuseRange, "window %d is negative", window)
}

// firstKeyTile is the start of the first key tile that a query tile
// starting at r0 reaches: the one holding key r0−W+1, its first row's
// oldest key. Tiles before it are wholly outside every row's window.
func (g attentionGeometry) firstKeyTile(r0 int) int { return max(0, r0-g.W+1) / attnTile * attnTile }

// queryEnd is the position past the last query whose window reaches the
// key tile ending before c1: query t sees key c1−1 iff t < c1−1+W.
func (g attentionGeometry) queryEnd(c1 int) int { return min(g.T, c1-1+g.W) }

// checkAttentionAlias refuses an out that overlaps q, k or v
// (MisuseAlias): the kernel reads them all while it writes out.
func checkAttentionAlias(out, q, k, v *engine.Tensor) {
	for i, in := range [3]*engine.Tensor{q, k, v} {
		if same, partial := engine.Overlap(out, in); same || partial {
			misuse("Attention", engine.MisuseAlias, "out %v at offset %d overlaps %s %v at offset %d",
				out, out.Offset, [3]string{"q", "k", "v"}[i], in, in.Offset)
		}
	}
}

// checkLSE refuses an lse that is not F32 (MisuseDType): the statistics
// stay float32 in mixed precision too.
func checkLSE(op string, lse *engine.Tensor) {
	if s := storageOf(op, lse); s.dtype != engine.F32 {
		misuse(op, engine.MisuseDType, "lse is %v, want F32", lse)
	}
}

// A work item of attention is one key/value head kv of sequence b and a
// tile of positions [r0, r1). Its query side is the group's heads packed
// into one matrix of (r1−r0)·group rows of D: row (t−r0)·group + j holds
// query head kv·group + j at position t. At a fixed position the group's
// heads are adjacent in q [B,T,heads,D], so packing copies group·D floats
// per position; in exchange every product is one GEMM over the whole
// group, and the group's heads read each key/value tile once.

// pack copies the group rows of positions [r0, r1) of src (laid out as q)
// into dst.
func (g attentionGeometry) pack(dst, src []float32, b, kv, r0, r1 int) {
	w := g.group() * g.D
	for t := r0; t < r1; t++ {
		at := ((b*g.T+t)*g.heads + kv*g.group()) * g.D
		copy(dst[(t-r0)*w:(t-r0+1)*w], src[at:at+w])
	}
}

// unpack is pack's inverse: it writes the packed rows into dst.
func (g attentionGeometry) unpack(dst, src []float32, b, kv, r0, r1 int) {
	w := g.group() * g.D
	for t := r0; t < r1; t++ {
		at := ((b*g.T+t)*g.heads + kv*g.group()) * g.D
		copy(dst[at:at+w], src[(t-r0)*w:(t-r0+1)*w])
	}
}

// stat is the index in a [B,heads,T] statistic (lse, rowsum(dO∘O)) of
// packed row r of the item (b, kv, r0).
func (g attentionGeometry) stat(b, kv, r0, r int) int {
	return (b*g.heads+kv*g.group()+r%g.group())*g.T + r0 + r/g.group()
}

// zigzag maps the i-th of n tiles to tile 0, n−1, 1, n−2, …: a causal
// tile's cost grows (or, for keys, shrinks) along the sequence, and
// interleaving cheap and dear tiles gives each of parallelFor's contiguous
// chunks a fair share. The order is a function of n alone.
func zigzag(i, n int) int {
	if i%2 == 0 {
		return i / 2
	}
	return n - 1 - i/2
}

// attnWork is one goroutine's transient workspace: O(tile), never T×T.
type attnWork struct {
	q, o   []float32 // packed queries; packed output (or dOut) rows
	dq     []float32 // packed query gradients
	s, ds  []float32 // a tile's scores or probabilities, and their gradient
	dk, dv []float32 // a key tile's gradients
	m      []float32 // running maximum per packed row
	l      []float64 // running sum per packed row
	ls, dl []float32 // per packed row: lse and rowsum(dO∘O)
}

func newAttnWork(g attentionGeometry) *attnWork {
	rows := attnTile * g.group()
	return &attnWork{
		q: make([]float32, rows*g.D), o: make([]float32, rows*g.D), dq: make([]float32, rows*g.D),
		s: make([]float32, rows*attnTile), ds: make([]float32, rows*attnTile),
		dk: make([]float32, attnTile*g.D), dv: make([]float32, attnTile*g.D),
		m: make([]float32, rows), l: make([]float64, rows),
		ls: make([]float32, rows), dl: make([]float32, rows),
	}
}

// visible is the range [lo, hi) of the keys of the tile starting at c0
// (n long) that packed row r of a tile starting at position r0 may
// attend to: the keys of its window, up to its own position t and after
// t−W. lo ≥ hi when it sees none of them.
func (g attentionGeometry) visible(r, r0, c0, n int) (lo, hi int) {
	t := r0 + r/g.group()
	return max(0, t-g.W+1-c0), max(0, min(n, t+1-c0))
}

// Attention is causal grouped-query self-attention: q [B,T,heads,D], k and
// v [B,T,kvHeads,D], out [B,T,heads,D]. Query head h reads key/value head
// h/(heads/kvHeads); the scores are scaled by 1/√D. A window W > 0 limits
// query t to the keys (t−W, t] (engine.Backend). lse [B,heads,T]
// receives each row's log-sum-exp of its scaled scores for the backward
// pass; the T×T probabilities are never stored.
//
// It is FlashAttention-2's forward. For each work item (sequence, kv
// head, tile of query positions, the group's heads packed together) one
// goroutine walks the key tiles from the first its window reaches up to
// the diagonal (the tiles above it and before the window are skipped, so
// a window's work is O(T·W)) with a running maximum m, sum l and output
// accumulator o per row:
//
//	S = q·k_tileᵀ/√D                  (GEMM)
//	m' = max(m, rowmax S), P = e^(S−m') (keys outside the row's window 0)
//	l = l·e^(m−m') + rowsum P, o = o·e^(m−m') + P·v_tile   (GEMM)
//
// and ends with out = o/l, lse = m + log l. The exponentials and row
// sums are vec.ExpSum's (float32 numerators, float64 sums). Items are
// independent and each is computed whole by one goroutine, so the result
// is the same for any thread count.
func (b *Backend) Attention(out, lse, q, k, v *engine.Tensor, window int) {
	// Before the stand-ins of mixed precision, which would hide them.
	checkAttentionAlias(out, q, k, v)
	checkLSE("Attention", lse)
	checkWindow("Attention", window)
	if hasBF16(out, lse, q, k, v) {
		b.widened("Attention", []*engine.Tensor{out, lse, q, k, v}, 0b11, func(t []*engine.Tensor) { b.Attention(t[0], t[1], t[2], t[3], t[4], window) })
		return
	}
	g := attentionShape("Attention", q, k, window)
	B, T, H, KV, D, G := g.B, g.T, g.heads, g.kvHeads, g.D, g.group()
	check(out.Len() == q.Len() && v.Len() == k.Len() && k.Len() == B*T*KV*D,
		"Attention", engine.MisuseShape, "out %v, q %v, k %v, v %v do not agree", out, q, k, v)
	check(lse.Len() == B*H*T, "Attention", engine.MisuseShape, "lse %v, want [%d,%d,%d]", lse, B, H, T)
	O, Ls, Q, K, V := floats("Attention", out), floats("Attention", lse), floats("Attention", q), floats("Attention", k), floats("Attention", v)
	ldk := KV * D
	scale := g.scale()
	tiles := g.tiles()

	b.parallelFor(B*KV*tiles, 1, func(lo, hi int) {
		w := newAttnWork(g)
		for item := lo; item < hi; item++ {
			pair := item / tiles
			bi, kv := pair/KV, pair%KV
			r0 := zigzag(item%tiles, tiles) * attnTile
			r1 := min(r0+attnTile, T)
			rows := (r1 - r0) * G
			qb, ob, m, l := w.q[:rows*D], w.o[:rows*D], w.m[:rows], w.l[:rows]
			g.pack(qb, Q, bi, kv, r0, r1)
			clear(ob)
			for r := range m {
				m[r], l[r] = float32(math.Inf(-1)), 0
			}
			kb, vb := K[(bi*T*KV+kv)*D:], V[(bi*T*KV+kv)*D:]
			for c0 := g.firstKeyTile(r0); c0 < r1; c0 += attnTile {
				c1 := min(c0+attnTile, r1)
				n := c1 - c0
				s := w.s[:rows*n]
				b.inner.Sgemm(false, true, rows, n, D, scale, qb, D, kb[c0*ldk:], ldk, 0, s, n)
				for r := range rows {
					row := s[r*n : (r+1)*n]
					lo, hi := g.visible(r, r0, c0, n)
					if lo >= hi {
						clear(row)
						continue
					}
					mNew := max(m[r], vec.Max(row[lo:hi]))
					sum := vec.ExpSum(row[lo:hi], row[lo:hi], mNew)
					clear(row[:lo])
					clear(row[hi:])
					if mNew != m[r] {
						// The first tile finds m = −∞: alpha = 0 on a zero o.
						alpha := math.Exp(float64(m[r]) - float64(mNew))
						vec.Scale(float32(alpha), ob[r*D:(r+1)*D])
						l[r] *= alpha
						m[r] = mNew
					}
					l[r] += sum
				}
				b.inner.Sgemm(false, false, rows, D, n, 1, s, n, vb[c0*ldk:], ldk, 1, ob, D)
			}
			for r := range rows {
				vec.Scale(float32(1/l[r]), ob[r*D:(r+1)*D])
				Ls[g.stat(bi, kv, r0, r)] = float32(float64(m[r]) + math.Log(l[r]))
			}
			g.unpack(O, ob, bi, kv, r0, r1)
		}
	})
}

// probabilities turns a tile's scores s (rows × n, packed rows of the
// tile at r0, keys from c0) into P = e^(S − lse), zero outside each
// row's window, with ls the rows' log-sum-exps.
func (g attentionGeometry) probabilities(s, ls []float32, rows, n, r0, c0 int) {
	for r := range rows {
		row := s[r*n : (r+1)*n]
		lo, hi := g.visible(r, r0, c0, n)
		if lo >= hi {
			clear(row)
			continue
		}
		vec.ExpSum(row[lo:hi], row[lo:hi], ls[r])
		clear(row[:lo])
		clear(row[hi:])
	}
}

// AttentionBackward writes dq, dk and dv from dOut, the inputs, and the
// out and lse that Attention saved, recomputing the probabilities tile by
// tile as FlashAttention-2 does. With δ_i = rowsum(dO_i ∘ O_i), per tile
//
//	P = e^(q·k_tileᵀ/√D − lse)        (GEMM)
//	dP = dO·v_tileᵀ                   (GEMM)
//	dS = P ⊙ (dP − δ)                 (vec.SubMul)
//	dv_tile += Pᵀ·dO,  dk_tile += dSᵀ·q/√D,  dq += dS·k_tile/√D   (GEMMs)
//
// Only the tiles on or below the diagonal, and within reach of a window,
// are visited. No two goroutines
// add into one gradient: when the (sequence, kv head) pairs share evenly
// among the threads, each pair is one goroutine's, computing all three
// gradients in one pass; otherwise the work runs in two passes: dk and
// dv over items (sequence, kv head, key tile), each walking the query
// tiles from the diagonal down with the group's heads packed together
// (the sum over a group's heads and over query tiles is a fixed order
// within one item), then dq over items (sequence, kv head, query tile),
// each walking the key tiles of its window up to the diagonal. The second pass
// recomputes P and dP: two products more than a single pass, the price of
// a deterministic split over every thread. Both ways issue the same
// products in the same order for every gradient element, so the bits do
// not depend on which runs: dq, dk and dv are overwritten, and the result
// is the same for any thread count.
func (b *Backend) AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse *engine.Tensor, window int) {
	checkLSE("AttentionBackward", lse)
	checkWindow("AttentionBackward", window)
	if hasBF16(dq, dk, dv, dOut, q, k, v, out, lse) {
		b.widened("AttentionBackward", []*engine.Tensor{dq, dk, dv, dOut, q, k, v, out, lse}, 0b111, func(t []*engine.Tensor) {
			b.AttentionBackward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], window)
		})
		return
	}
	g := attentionShape("AttentionBackward", q, k, window)
	B, T, H, KV, D, G := g.B, g.T, g.heads, g.kvHeads, g.D, g.group()
	check(dq.Len() == q.Len() && dOut.Len() == q.Len() && out.Len() == q.Len() && dk.Len() == k.Len() && dv.Len() == k.Len() &&
		v.Len() == k.Len() && k.Len() == B*T*KV*D,
		"AttentionBackward", engine.MisuseShape, "dq %v, dk %v, dv %v, dOut %v, out %v, q %v, k %v, v %v do not agree", dq, dk, dv, dOut, out, q, k, v)
	check(lse.Len() == B*H*T, "AttentionBackward", engine.MisuseShape, "lse %v, want [%d,%d,%d]", lse, B, H, T)
	dQ, dK, dV, dO := floats("AttentionBackward", dq), floats("AttentionBackward", dk), floats("AttentionBackward", dv), floats("AttentionBackward", dOut)
	Q, K, V, O, Ls := floats("AttentionBackward", q), floats("AttentionBackward", k), floats("AttentionBackward", v), floats("AttentionBackward", out), floats("AttentionBackward", lse)
	ldk := KV * D
	scale := g.scale()
	tiles := g.tiles()

	// δ in lse's layout [B,heads,T]: O(T) per head, like lse itself.
	delta := make([]float32, B*H*T)
	b.parallelFor(B*T*H, max(1, elementGrain/max(D, 1)), func(lo, hi int) {
		for row := lo; row < hi; row++ { // row (b·T + t)·heads + h of q's layout
			bi, t, h := row/(T*H), row/H%T, row%H
			delta[(bi*H+h)*T+t] = vec.Dot(dO[row*D:(row+1)*D], O[row*D:(row+1)*D])
		}
	})
	// stats gathers the packed rows' lse and δ of the item (b, kv, r0).
	stats := func(w *attnWork, rows, bi, kv, r0 int) {
		for r := range rows {
			at := g.stat(bi, kv, r0, r)
			w.ls[r], w.dl[r] = Ls[at], delta[at]
		}
	}
	// scoreGrads computes a tile's P into w.s and dS into w.ds, for the
	// packed rows in w.q (queries) and w.o (dOut) against the keys at kt
	// and values at vt.
	scoreGrads := func(w *attnWork, rows, n, r0, c0 int, kt, vt []float32) {
		p, ds := w.s[:rows*n], w.ds[:rows*n]
		b.inner.Sgemm(false, true, rows, n, D, scale, w.q, D, kt, ldk, 0, p, n)
		g.probabilities(p, w.ls, rows, n, r0, c0)
		b.inner.Sgemm(false, true, rows, n, D, 1, w.o, D, vt, ldk, 0, ds, n)
		for r := range rows {
			// Masked keys have P = 0, so their dS is 0 too.
			vec.SubMul(ds[r*n:(r+1)*n], w.dl[r], p[r*n:(r+1)*n])
		}
	}

	// keyTile computes the key tile from c0 of pair (bi, kv): its dk and dv,
	// summed in order over the query tiles at and below it whose windows
	// reach it, and, when dq (the pair's packed dq) is not nil, each
	// query tile's share of dq.
	keyTile := func(w *attnWork, bi, kv, c0 int, dq []float32) {
		c1 := min(c0+attnTile, T)
		n := c1 - c0
		dkb, dvb := w.dk[:n*D], w.dv[:n*D]
		clear(dkb)
		clear(dvb)
		kt, vt := K[(bi*T*KV+kv)*D+c0*ldk:], V[(bi*T*KV+kv)*D+c0*ldk:]
		for r0 := c0; r0 < g.queryEnd(c1); r0 += attnTile {
			r1 := min(r0+attnTile, T)
			rows := (r1 - r0) * G
			g.pack(w.q, Q, bi, kv, r0, r1)
			g.pack(w.o, dO, bi, kv, r0, r1)
			stats(w, rows, bi, kv, r0)
			scoreGrads(w, rows, n, r0, c0, kt, vt)
			b.inner.Sgemm(true, false, n, D, rows, 1, w.s[:rows*n], n, w.o, D, 1, dvb, D)
			b.inner.Sgemm(true, false, n, D, rows, scale, w.ds[:rows*n], n, w.q, D, 1, dkb, D)
			if dq != nil {
				b.inner.Sgemm(false, false, rows, D, n, scale, w.ds[:rows*n], n, kt, ldk, 1, dq[r0*G*D:], D)
			}
		}
		for c := c0; c < c1; c++ {
			at := ((bi*T+c)*KV + kv) * D
			copy(dK[at:at+D], dkb[(c-c0)*D:(c-c0+1)*D])
			copy(dV[at:at+D], dvb[(c-c0)*D:(c-c0+1)*D])
		}
	}

	// With enough (sequence, kv head) pairs to share evenly among the
	// threads, one pass per pair computes all three gradients: the same
	// products with the same operands, in the same order, as the two
	// passes below (dq's tiles still add the key tiles in order), so the
	// same bits, but without computing P and dP twice.
	if pairs := B * KV; pairs%b.threads == 0 || pairs >= 4*b.threads {
		b.parallelFor(pairs, 1, func(lo, hi int) {
			w := newAttnWork(g)
			dqAll := make([]float32, T*G*D) // the pair's packed dq, O(T)
			for pair := lo; pair < hi; pair++ {
				bi, kv := pair/KV, pair%KV
				clear(dqAll)
				for c0 := 0; c0 < T; c0 += attnTile {
					keyTile(w, bi, kv, c0, dqAll)
				}
				g.unpack(dQ, dqAll, bi, kv, 0, T)
			}
		})
		return
	}

	// dk and dv: each key tile sums over the query tiles below it.
	b.parallelFor(B*KV*tiles, 1, func(lo, hi int) {
		w := newAttnWork(g)
		for item := lo; item < hi; item++ {
			pair := item / tiles
			bi, kv := pair/KV, pair%KV
			keyTile(w, bi, kv, zigzag(item%tiles, tiles)*attnTile, nil)
		}
	})

	// dq: each query tile sums over the key tiles of its window, up to its
	// diagonal.
	b.parallelFor(B*KV*tiles, 1, func(lo, hi int) {
		w := newAttnWork(g)
		for item := lo; item < hi; item++ {
			pair := item / tiles
			bi, kv := pair/KV, pair%KV
			r0 := zigzag(item%tiles, tiles) * attnTile
			r1 := min(r0+attnTile, T)
			rows := (r1 - r0) * G
			g.pack(w.q, Q, bi, kv, r0, r1)
			g.pack(w.o, dO, bi, kv, r0, r1)
			stats(w, rows, bi, kv, r0)
			dqb := w.dq[:rows*D]
			clear(dqb)
			kb, vb := K[(bi*T*KV+kv)*D:], V[(bi*T*KV+kv)*D:]
			for c0 := g.firstKeyTile(r0); c0 < r1; c0 += attnTile {
				c1 := min(c0+attnTile, r1)
				n := c1 - c0
				scoreGrads(w, rows, n, r0, c0, kb[c0*ldk:], vb[c0*ldk:])
				b.inner.Sgemm(false, false, rows, D, n, scale, w.ds[:rows*n], n, kb[c0*ldk:], ldk, 1, dqb, D)
			}
			g.unpack(dQ, dqb, bi, kv, r0, r1)
		}
	})
}

// causalSoftmax replaces row[0..i] with its softmax and zeroes the masked
// rest of the row (AttentionKV's scores). The maximum is subtracted first;
// the exponentials (vec.ExpSum, float32) are summed in float64 in a fixed
// lane order, and each is then multiplied by the float32 reciprocal of the
// sum.
func causalSoftmax(row []float32, i int) {
	r := row[:i+1]
	m := vec.Max(r)
	sum := vec.ExpSum(r, r, m)
	vec.Scale(float32(1/sum), r)
	clear(row[i+1:])
}

// AttentionKV is inference attention against a key/value cache: for
// sequence b, the n queries q[b,i] sit at positions p = start[b]+i and
// attend to kCache[b, lo : p+1], lo = max(0, p+1−W) with a window W > 0
// and 0 without. q, out [B,n,heads,D]; kCache, vCache [B,Tmax,kvHeads,D];
// start I32 [B], with start[b]+n ≤ Tmax. Cache rows before lo are never
// read.
//
// Decoding has n = 1 or a short prompt, so there is no GEMM: each query
// takes its scores as vec.Dot products with the cached keys, scaled by
// 1/√D, softmaxes them as Attention does, and sums the cached values
// weighted by the probabilities with vec.Axpy, in key order. The
// (sequence, head) pairs run in parallel, each computed whole by one
// goroutine, so the result does not depend on the thread count.
func (b *Backend) AttentionKV(out, q, kCache, vCache, start *engine.Tensor, window int) {
	checkWindow("AttentionKV", window)
	if hasBF16(out, q, kCache, vCache) {
		b.widened("AttentionKV", []*engine.Tensor{out, q, kCache, vCache, start}, 1, func(t []*engine.Tensor) { b.AttentionKV(t[0], t[1], t[2], t[3], t[4], window) })
		return
	}
	check(q != nil && kCache != nil, "AttentionKV", engine.MisuseTensor, "nil tensor")
	check(len(q.Shape) == 4 && len(kCache.Shape) == 4,
		"AttentionKV", engine.MisuseShape, "q %v and kCache %v must be [B,n,heads,D] and [B,Tmax,kvHeads,D]", q, kCache)
	B, n, H, D := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	Tmax, KV := kCache.Dim(1), kCache.Dim(2)
	check(kCache.Dim(0) == B && kCache.Dim(3) == D && KV > 0 && H%KV == 0,
		"AttentionKV", engine.MisuseShape, "q %v does not fit kCache %v", q, kCache)
	check(out.Len() == q.Len() && vCache.Len() == kCache.Len() && start.Len() == B,
		"AttentionKV", engine.MisuseShape, "out %v, vCache %v, start %v do not fit q %v, kCache %v", out, vCache, start, q, kCache)
	O, Q, K, V, S := floats("AttentionKV", out), floats("AttentionKV", q), floats("AttentionKV", kCache), floats("AttentionKV", vCache), ints("AttentionKV", start)
	for bi, s := range S {
		check(s >= 0 && int(s)+n <= Tmax, "AttentionKV", engine.MisuseRange, "start[%d] = %d with %d queries overruns the cache of %d", bi, s, n, Tmax)
	}
	group := H / KV
	scale := float32(1 / math.Sqrt(float64(D)))
	ld := KV * D // elements from one cached position to the next

	b.parallelFor(B*H, 1, func(lo, hi int) {
		scores := make([]float32, Tmax)
		for item := lo; item < hi; item++ {
			bi, h := item/H, item%H
			kv := h / group
			kb := K[(bi*Tmax*KV+kv)*D:]
			vb := V[(bi*Tmax*KV+kv)*D:]
			for i := range n {
				qi := Q[((bi*n+i)*H+h)*D:][:D]
				L := int(S[bi]) + i + 1
				lo := 0
				if window > 0 {
					lo = max(0, L-window)
				}
				sc := scores[:L-lo]
				for j := range sc {
					at := (lo + j) * ld
					sc[j] = vec.Dot(qi, kb[at:at+D]) * scale
				}
				causalSoftmax(sc, len(sc)-1)
				acc := O[((bi*n+i)*H+h)*D:][:D]
				clear(acc)
				for j, p := range sc {
					at := (lo + j) * ld
					vec.Axpy(p, vb[at:at+D], acc)
				}
			}
		}
	})
}
