package cuda

import (
	"fmt"
	"math"

	"github.com/memtrain/memtrain/engine"
)

// attnScratchBytes bounds AttentionBackward's score-gradient buffer and
// AttentionKV's score buffer: work is cut into pieces that fit.
const attnScratchBytes = 256 << 20

// attentionGeometry is the shape of one attention call.
type attentionGeometry struct {
	B, T, heads, kvHeads, D int
}

func (g attentionGeometry) group() int { return g.heads / g.kvHeads }

func (g attentionGeometry) scale() float32 { return float32(1 / math.Sqrt(float64(g.D))) }

// attentionShape reads the geometry from q [B,T,heads,D] and k
// [B,T,kvHeads,D].
func attentionShape(op string, q, k *engine.Tensor) attentionGeometry {
	if len(q.Shape) != 4 || len(k.Shape) != 4 {
		panic(fmt.Sprintf("cuda: %s: q %v and k %v must be [B,T,heads,D] and [B,T,kvHeads,D]", op, q, k))
	}
	g := attentionGeometry{B: q.Dim(0), T: q.Dim(1), heads: q.Dim(2), kvHeads: k.Dim(2), D: q.Dim(3)}
	if g.kvHeads <= 0 || g.heads%g.kvHeads != 0 {
		panic(fmt.Sprintf("cuda: %s: %d query heads cannot share %d key/value heads", op, g.heads, g.kvHeads))
	}
	if k.Dim(3) != g.D {
		panic(fmt.Sprintf("cuda: %s: q %v and k %v differ in head size", op, q, k))
	}
	return g
}

// sameFloatType panics unless every view has the dtype of the first: the
// products of attention multiply them with each other, and cuBLAS takes
// two operands of one type.
func sameFloatType(op string, vs ...view) {
	for _, v := range vs[1:] {
		if v.dtype != vs[0].dtype {
			panic(fmt.Sprintf("cuda: %s: the tensors mix %v and %v", op, vs[0].dtype, v.dtype))
		}
	}
}

// Attention is causal grouped-query self-attention: q [B,T,heads,D], k and
// v [B,T,kvHeads,D], out [B,T,heads,D], probs [B,heads,T,T].
//
// Query head h reads key/value head kv = h/group. Fixing a sequence b and
// the head's place g in its group, the heads h = kv·group + g for kv =
// 0..kvHeads−1 are a strided batch (q_h steps by group·D, k_kv by D,
// probs_h by group·T·T), so each (b, g) is one strided-batched GEMM:
//
//	S = q_h·k_kvᵀ/√D          cuBLAS, into probs
//	P = causal softmax(S)     kernel causal_softmax, every row at once
//	out_h = P·v_kv            cuBLAS
//
// The products cover the whole T×T square; the softmax zeroes the masked
// half before P·v reads it.
func (b *Backend) Attention(out, probs, q, k, v *engine.Tensor) {
	b.do(func() {
		g := attentionShape("Attention", q, k)
		B, T, H, KV, D, G := g.B, g.T, g.heads, g.kvHeads, g.D, g.group()
		O, P := b.floatView("Attention", "out", out), b.floatView("Attention", "probs", probs)
		Q, K, V := b.floatView("Attention", "q", q), b.floatView("Attention", "k", k), b.floatView("Attention", "v", v)
		if O.n != Q.n || V.n != K.n || K.n != B*T*KV*D {
			panic(fmt.Sprintf("cuda: Attention: out %v, q %v, k %v, v %v do not agree", out, q, k, v))
		}
		if P.n != B*H*T*T {
			panic(fmt.Sprintf("cuda: Attention: probs %v, want [%d,%d,%d,%d]", probs, B, H, T, T))
		}
		sameFloatType("Attention", Q, K, V, P, O)
		if Q.n == 0 {
			return
		}
		dt := Q.dtype
		for bi := 0; bi < B; bi++ {
			for gi := 0; gi < G; gi++ {
				b.gemm(gemmCall{transB: true, m: T, n: T, k: D, alpha: g.scale(),
					a: Q.at((bi*T*H + gi) * D), lda: H * D, strideA: G * D,
					b: K.at(bi * T * KV * D), ldb: KV * D, strideB: D,
					c: P.at((bi*H + gi) * T * T), ldc: T, strideC: G * T * T,
					batch: KV, abType: dt, cType: dt})
			}
		}
		b.launch(kCausalSoftmax, grid1(B*H*T), rowThreads(T, 256), P.ptr, P.dt(), int32(T))
		for bi := 0; bi < B; bi++ {
			for gi := 0; gi < G; gi++ {
				b.gemm(gemmCall{m: T, n: D, k: T, alpha: 1,
					a: P.at((bi*H + gi) * T * T), lda: T, strideA: G * T * T,
					b: V.at(bi * T * KV * D), ldb: KV * D, strideB: D,
					c: O.at((bi*T*H + gi) * D), ldc: H * D, strideC: G * D,
					batch: KV, abType: dt, cType: dt})
			}
		}
	})
}

// AttentionBackward writes dq, dk and dv from dOut and the probs saved by
// Attention. Per query head h (batched over kv as in Attention), with the
// score gradient dS in a scratch buffer:
//
//	dS = dOut_h·v_kvᵀ                  cuBLAS
//	dS = P ⊙ (dS − rowsum(dS ⊙ P))     kernel causal_softmax_backward
//	dq_h = dS·k_kv/√D                  cuBLAS
//	dk_kv (+)= dSᵀ·q_h/√D              cuBLAS
//	dv_kv (+)= Pᵀ·dOut_h               cuBLAS
//
// A group's heads run one after another (g = 0, 1, …), the first
// overwriting dk and dv (beta 0) and the others adding to them (beta 1):
// each key/value gradient sums its group's heads in a fixed order, and dk
// and dv are overwritten as the interface says. When the scratch buffer
// cannot hold dS for every kv head at once, the kv heads are taken in
// chunks.
func (b *Backend) AttentionBackward(dq, dk, dv, dOut, q, k, v, probs *engine.Tensor) {
	b.do(func() {
		g := attentionShape("AttentionBackward", q, k)
		B, T, H, KV, D, G := g.B, g.T, g.heads, g.kvHeads, g.D, g.group()
		dQ, dK, dV := b.floatView("AttentionBackward", "dq", dq), b.floatView("AttentionBackward", "dk", dk), b.floatView("AttentionBackward", "dv", dv)
		dO, P := b.floatView("AttentionBackward", "dOut", dOut), b.floatView("AttentionBackward", "probs", probs)
		Q, K, V := b.floatView("AttentionBackward", "q", q), b.floatView("AttentionBackward", "k", k), b.floatView("AttentionBackward", "v", v)
		if dQ.n != Q.n || dO.n != Q.n || dK.n != K.n || dV.n != K.n || V.n != K.n || K.n != B*T*KV*D {
			panic(fmt.Sprintf("cuda: AttentionBackward: dq %v, dk %v, dv %v, dOut %v, q %v, k %v, v %v do not agree", dq, dk, dv, dOut, q, k, v))
		}
		if P.n != B*H*T*T {
			panic(fmt.Sprintf("cuda: AttentionBackward: probs %v, want [%d,%d,%d,%d]", probs, B, H, T, T))
		}
		sameFloatType("AttentionBackward", Q, K, V, P, dO, dQ, dK, dV)
		if Q.n == 0 {
			return
		}
		dt := Q.dtype
		matrix := T * T * dt.Size()
		chunk := max(1, min(KV, attnScratchBytes/matrix))
		dS := b.scratchBuffer(scratchAttn, uint64(chunk*matrix))
		scale := g.scale()
		for bi := 0; bi < B; bi++ {
			for gi := 0; gi < G; gi++ {
				beta := float32(0)
				if gi > 0 {
					beta = 1
				}
				for kv0 := 0; kv0 < KV; kv0 += chunk {
					n := min(chunk, KV-kv0)
					qAt := (bi*T*H + kv0*G + gi) * D   // q_h, dq_h, dOut_h of h = kv0·G + gi
					kAt := (bi*T*KV + kv0) * D         // k_kv, v_kv, dk_kv, dv_kv
					pAt := (bi*H + kv0*G + gi) * T * T // probs_h
					b.gemm(gemmCall{transB: true, m: T, n: T, k: D, alpha: 1,
						a: dO.at(qAt), lda: H * D, strideA: G * D,
						b: V.at(kAt), ldb: KV * D, strideB: D,
						c: dS, ldc: T, strideC: T * T,
						batch: n, abType: dt, cType: dt})
					b.launch(kCausalSoftmaxBackward, grid1(n*T), rowThreads(T, 256),
						dS, int32(dt), P.at(pAt), P.dt(), int32(T), int64(G*T*T))
					b.gemm(gemmCall{m: T, n: D, k: T, alpha: scale,
						a: dS, lda: T, strideA: T * T,
						b: K.at(kAt), ldb: KV * D, strideB: D,
						c: dQ.at(qAt), ldc: H * D, strideC: G * D,
						batch: n, abType: dt, cType: dt})
					b.gemm(gemmCall{transA: true, m: T, n: D, k: T, alpha: scale, beta: beta,
						a: dS, lda: T, strideA: T * T,
						b: Q.at(qAt), ldb: H * D, strideB: G * D,
						c: dK.at(kAt), ldc: KV * D, strideC: D,
						batch: n, abType: dt, cType: dt})
					b.gemm(gemmCall{transA: true, m: T, n: D, k: T, alpha: 1, beta: beta,
						a: P.at(pAt), lda: T, strideA: G * T * T,
						b: dO.at(qAt), ldb: H * D, strideB: G * D,
						c: dV.at(kAt), ldc: KV * D, strideC: D,
						batch: n, abType: dt, cType: dt})
				}
			}
		}
	})
}

// AttentionKV is inference attention against a key/value cache (kernel
// attention_kv, one block per query): for sequence b, the n queries
// q[b,i] sit at positions start[b]+i and attend to kCache[b, 0 :
// start[b]+i+1]. q, out [B,n,heads,D]; kCache, vCache [B,Tmax,kvHeads,D];
// start I32 [B], checked on the host against Tmax.
func (b *Backend) AttentionKV(out, q, kCache, vCache, start *engine.Tensor) {
	b.do(func() {
		if len(q.Shape) != 4 || len(kCache.Shape) != 4 {
			panic(fmt.Sprintf("cuda: AttentionKV: q %v and kCache %v must be [B,n,heads,D] and [B,Tmax,kvHeads,D]", q, kCache))
		}
		B, n, H, D := q.Dim(0), q.Dim(1), q.Dim(2), q.Dim(3)
		Tmax, KV := kCache.Dim(1), kCache.Dim(2)
		if kCache.Dim(0) != B || kCache.Dim(3) != D || KV <= 0 || H%KV != 0 {
			panic(fmt.Sprintf("cuda: AttentionKV: q %v does not fit kCache %v", q, kCache))
		}
		O, Q := b.floatView("AttentionKV", "out", out), b.floatView("AttentionKV", "q", q)
		Kc, Vc := b.floatView("AttentionKV", "kCache", kCache), b.floatView("AttentionKV", "vCache", vCache)
		S := b.intView("AttentionKV", "start", start)
		if O.n != Q.n || Vc.n != Kc.n || S.n != B {
			panic(fmt.Sprintf("cuda: AttentionKV: out %v, vCache %v, start %v do not fit q %v, kCache %v", out, vCache, start, q, kCache))
		}
		for bi, s := range b.hostInts(S) {
			if s < 0 || int(s)+n > Tmax {
				panic(fmt.Sprintf("cuda: AttentionKV: start[%d] = %d with %d queries overruns the cache of %d", bi, s, n, Tmax))
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
				int64(item0), int32(n), int32(H), int32(KV), int32(D), int32(Tmax), scale)
		}
	})
}
