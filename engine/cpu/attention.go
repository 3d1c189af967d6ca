package cpu

import (
	"math"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu/vec"
)

// causalBlock is the number of query rows attention handles per GEMM.
// Rows r0..r1 attend to keys 0..r1 only, so working in blocks skips most of
// the masked upper triangle (half the work for long sequences) while
// keeping each product large enough for the GEMM to run at speed.
const causalBlock = 64

// attentionGeometry is the shape of one attention call.
type attentionGeometry struct {
	B, T, heads, kvHeads, D int
}

// group is the number of query heads that share a key/value head.
func (g attentionGeometry) group() int { return g.heads / g.kvHeads }

// scale is the 1/√D that multiplies the scores.
func (g attentionGeometry) scale() float32 { return float32(1 / math.Sqrt(float64(g.D))) }

// attentionShape reads the geometry from q [B,T,heads,D] and k
// [B,T,kvHeads,D] and checks that the others agree.
func attentionShape(op string, q, k *engine.Tensor) attentionGeometry {
	check(len(q.Shape) == 4 && len(k.Shape) == 4, "%s: q %v and k %v must be [B,T,heads,D] and [B,T,kvHeads,D]", op, q, k)
	g := attentionGeometry{B: q.Dim(0), T: q.Dim(1), heads: q.Dim(2), kvHeads: k.Dim(2), D: q.Dim(3)}
	check(g.kvHeads > 0 && g.heads%g.kvHeads == 0, "%s: %d query heads cannot share %d key/value heads", op, g.heads, g.kvHeads)
	check(k.Dim(3) == g.D, "%s: q %v and k %v differ in head size", op, q, k)
	return g
}

// Attention is causal grouped-query self-attention: q [B,T,heads,D], k and
// v [B,T,kvHeads,D], out [B,T,heads,D]. Query head h reads key/value head
// h/(heads/kvHeads); the scores are scaled by 1/√D. probs [B,heads,T,T]
// receives the softmax, zero above the diagonal, for the backward pass.
//
// For each (sequence, head) pair and block of causalBlock query rows, one
// goroutine computes
//
//	S = q_h·k_gᵀ/√D   (GEMM; lda = heads·D steps over the other heads)
//	P = softmax(S) row by row over the keys j ≤ i
//	out_h = P·v_g     (GEMM)
//
// Work is split over those items only, so the result is the same for any
// thread count.
func (b *Backend) Attention(out, probs, q, k, v *engine.Tensor) {
	g := attentionShape("Attention", q, k)
	B, T, H, D := g.B, g.T, g.heads, g.D
	check(out.Len() == q.Len() && v.Len() == k.Len() && k.Len() == B*T*g.kvHeads*D,
		"Attention: out %v, q %v, k %v, v %v do not agree", out, q, k, v)
	check(probs.Len() == B*H*T*T, "Attention: probs %v, want [%d,%d,%d,%d]", probs, B, H, T, T)
	O, P, Q, K, V := Float32s(out), Float32s(probs), Float32s(q), Float32s(k), Float32s(v)
	ldq, ldk := H*D, g.kvHeads*D
	scale := g.scale()

	// Blocks of rows are independent in the forward pass, so the work
	// items are (sequence, head, block) triples: a single long sequence
	// still keeps every thread busy.
	blocks := (T + causalBlock - 1) / causalBlock
	b.parallelFor(B*H*blocks, 1, func(lo, hi int) {
		for item := lo; item < hi; item++ {
			pair, r0 := item/blocks, item%blocks*causalBlock
			r1 := min(r0+causalBlock, T)
			bi, h := pair/H, pair%H
			kv := h / g.group()
			qh := Q[(bi*T*H+h)*D:]
			oh := O[(bi*T*H+h)*D:]
			kg := K[(bi*T*g.kvHeads+kv)*D:]
			vg := V[(bi*T*g.kvHeads+kv)*D:]
			ph := P[pair*T*T : (pair+1)*T*T]
			b.inner.Sgemm(false, true, r1-r0, r1, D, scale, qh[r0*ldq:], ldq, kg, ldk, 0, ph[r0*T:], T)
			for i := r0; i < r1; i++ {
				causalSoftmax(ph[i*T:(i+1)*T], i)
			}
			b.inner.Sgemm(false, false, r1-r0, D, r1, 1, ph[r0*T:], T, vg, ldk, 0, oh[r0*ldq:], ldq)
		}
	})
}

// causalSoftmax replaces row[0..i] with its softmax and zeroes the masked
// rest of the row. The maximum is subtracted first; the exponentials
// (vec.ExpSum, float32) are summed in float64 in a fixed lane order, and
// each is then multiplied by the float32 reciprocal of the sum.
func causalSoftmax(row []float32, i int) {
	r := row[:i+1]
	m := vec.Max(r)
	sum := vec.ExpSum(r, r, m)
	vec.Scale(float32(1/sum), r)
	clear(row[i+1:])
}

// AttentionBackward writes dq, dk and dv from dOut and the probs saved by
// Attention. With S the scaled scores and P = softmax(S), per (sequence,
// head) pair:
//
//	dP = dOut_h·v_gᵀ
//	dS = P ⊙ (dP − rowsum(dP ⊙ P))
//	dq_h = dS·k_g/√D
//	dk_g += dSᵀ·q_h/√D,  dv_g += Pᵀ·dOut_h
//
// all by GEMMs over causal blocks. The key/value gradients sum over the
// query heads of a group; to keep the pairs independent (and the result
// the same for any thread count), each pair writes its own partial dk and
// dv, and a second pass adds a group's partials in head order. Without
// grouping (heads = kvHeads) the partials are written straight into dk and
// dv. dk and dv are overwritten, not accumulated.
func (b *Backend) AttentionBackward(dq, dk, dv, dOut, q, k, v, probs *engine.Tensor) {
	g := attentionShape("AttentionBackward", q, k)
	B, T, H, KV, D := g.B, g.T, g.heads, g.kvHeads, g.D
	check(dq.Len() == q.Len() && dOut.Len() == q.Len() && dk.Len() == k.Len() && dv.Len() == k.Len() &&
		v.Len() == k.Len() && k.Len() == B*T*KV*D,
		"AttentionBackward: dq %v, dk %v, dv %v, dOut %v, q %v, k %v, v %v do not agree", dq, dk, dv, dOut, q, k, v)
	check(probs.Len() == B*H*T*T, "AttentionBackward: probs %v, want [%d,%d,%d,%d]", probs, B, H, T, T)
	dQ, dK, dV, dO := Float32s(dq), Float32s(dk), Float32s(dv), Float32s(dOut)
	Q, K, V, P := Float32s(q), Float32s(k), Float32s(v), Float32s(probs)
	ldq, ldk := H*D, KV*D
	scale := g.scale()

	// Where each pair writes its dk and dv: straight into the outputs, or
	// into partials [B,heads,T,D] when heads share a key/value head.
	partK, partV, ldp := dK, dV, ldk
	partAt := func(bi, h int) int { return (bi*T*KV + h) * D }
	if g.group() > 1 {
		partK = make([]float32, B*H*T*D)
		partV = make([]float32, B*H*T*D)
		ldp = D
		partAt = func(bi, h int) int { return (bi*H + h) * T * D }
	}

	b.parallelFor(B*H, 1, func(lo, hi int) {
		dS := make([]float32, T*T) // dP, then dS, for one pair at a time
		for item := lo; item < hi; item++ {
			bi, h := item/H, item%H
			kv := h / g.group()
			qh, dqh, doh := Q[(bi*T*H+h)*D:], dQ[(bi*T*H+h)*D:], dO[(bi*T*H+h)*D:]
			kg, vg := K[(bi*T*KV+kv)*D:], V[(bi*T*KV+kv)*D:]
			ph := P[item*T*T : (item+1)*T*T]
			dkh, dvh := partK[partAt(bi, h):], partV[partAt(bi, h):]

			for r0 := 0; r0 < T; r0 += causalBlock {
				r1 := min(r0+causalBlock, T)
				b.inner.Sgemm(false, true, r1-r0, r1, D, 1, doh[r0*ldq:], ldq, vg, ldk, 0, dS[r0*T:], T)
				for i := r0; i < r1; i++ {
					softmaxBackward(dS[i*T:(i+1)*T], ph[i*T:(i+1)*T], i)
				}
				b.inner.Sgemm(false, false, r1-r0, D, r1, scale, dS[r0*T:], T, kg, ldk, 0, dqh[r0*ldq:], ldq)
			}
			// Keys c0..c1 receive gradient from queries c0..T only: the
			// transposed products start on the diagonal.
			for c0 := 0; c0 < T; c0 += causalBlock {
				c1 := min(c0+causalBlock, T)
				b.inner.Sgemm(true, false, c1-c0, D, T-c0, scale, dS[c0*T+c0:], T, qh[c0*ldq:], ldq, 0, dkh[c0*ldp:], ldp)
				b.inner.Sgemm(true, false, c1-c0, D, T-c0, 1, ph[c0*T+c0:], T, doh[c0*ldq:], ldq, 0, dvh[c0*ldp:], ldp)
			}
		}
	})

	if g.group() == 1 {
		return
	}
	// Sum each group's partials in head order; every (sequence, position,
	// kv head) row of dk and dv has one writer.
	group := g.group()
	b.parallelFor(B*T*KV, max(1, elementGrain/(2*group*D)), func(lo, hi int) {
		for row := lo; row < hi; row++ {
			bi, t, kv := row/(T*KV), row/KV%T, row%KV
			outK, outV := dK[row*D:(row+1)*D], dV[row*D:(row+1)*D]
			for hh := range group {
				at := partAt(bi, kv*group+hh) + t*D
				pk, pv := partK[at:at+D], partV[at:at+D]
				if hh == 0 {
					copy(outK, pk)
					copy(outV, pv)
					continue
				}
				for d := range D {
					outK[d] += pk[d]
					outV[d] += pv[d]
				}
			}
		}
	})
}

// softmaxBackward turns row i of dP into row i of dS in place, given the
// probabilities p: dS_j = p_j·(dP_j − Σ_k p_k·dP_k) for j ≤ i, and zero
// beyond the diagonal (where the GEMM left values of masked positions or
// nothing at all), so that the products that follow may run over it. The
// sum is vec.Dot's, in float32 with a fixed order.
func softmaxBackward(d, p []float32, i int) {
	dot := vec.Dot(p[:i+1], d[:i+1])
	vec.SubMul(d[:i+1], dot, p)
	clear(d[i+1:])
}

// AttentionKV is inference attention against a key/value cache: for
// sequence b, the n queries q[b,i] sit at positions start[b]+i and attend
// to kCache[b, 0 : start[b]+i+1]. q, out [B,n,heads,D]; kCache, vCache
// [B,Tmax,kvHeads,D]; start I32 [B], with start[b]+n ≤ Tmax.
//
// Decoding has n = 1 or a short prompt, so there is no GEMM: each query
// takes its scores as vec.Dot products with the cached keys, scaled by
// 1/√D, softmaxes them as Attention does, and sums the cached values
// weighted by the probabilities with vec.Axpy, in key order. The
// (sequence, head) pairs run in parallel, each computed whole by one
// goroutine, so the result does not depend on the thread count.
func (b *Backend) AttentionKV(out, q, kCache, vCache, start *engine.Tensor) {
	check(len(q.Shape) == 4 && len(kCache.Shape) == 4,
		"AttentionKV: q %v and kCache %v must be [B,n,heads,D] and [B,Tmax,kvHeads,D]", q, kCache)
	B, n, H, D := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
	Tmax, KV := kCache.Dim(1), kCache.Dim(2)
	check(kCache.Dim(0) == B && kCache.Dim(3) == D && KV > 0 && H%KV == 0,
		"AttentionKV: q %v does not fit kCache %v", q, kCache)
	check(out.Len() == q.Len() && vCache.Len() == kCache.Len() && start.Len() == B,
		"AttentionKV: out %v, vCache %v, start %v do not fit q %v, kCache %v", out, vCache, start, q, kCache)
	O, Q, K, V, S := Float32s(out), Float32s(q), Float32s(kCache), Float32s(vCache), Int32s(start)
	for bi, s := range S {
		check(s >= 0 && int(s)+n <= Tmax, "AttentionKV: start[%d] = %d with %d queries overruns the cache of %d", bi, s, n, Tmax)
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
				for j := range L {
					scores[j] = vec.Dot(qi, kb[j*ld:j*ld+D]) * scale
				}
				causalSoftmax(scores[:L], L-1)
				acc := O[((bi*n+i)*H+h)*D:][:D]
				clear(acc)
				for j, p := range scores[:L] {
					vec.Axpy(p, vb[j*ld:j*ld+D], acc)
				}
			}
		}
	})
}
