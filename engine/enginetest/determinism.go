package enginetest

import (
	"fmt"

	"github.com/memtrain/memtrain/engine"
)

// testDeterminism runs each kernel that reduces twice on the same inputs
// and requires the same bits: the interface promises reductions in a fixed
// order, and training runs that must be reproducible rely on it.
func testDeterminism(h *harness) {
	twice := func(name string, run func() [][]float32) {
		h.t.Helper()
		a, b := run(), run()
		for i := range a {
			h.equal(name+" (rerun)", b[i], a[i])
		}
	}

	{
		const m, n, k = 67, 45, 129
		a, b := h.randn(m*k, 1), h.randn(k*n, 1)
		ta, tb := h.f32(a, m, k), h.f32(b, k, n)
		twice("Gemm", func() [][]float32 {
			c := h.nan(m, n)
			h.be.Gemm(engine.GemmParams{M: m, N: n, K: k, Alpha: 1, LDA: k, LDB: n, LDC: n}, ta, tb, c)
			return [][]float32{h.get(c)}
		})
	}
	{
		x := h.f32(h.randn(100003, 1), 100003)
		twice("SumSquares", func() [][]float32 {
			d := h.nan(1)
			h.be.SumSquares(d, x)
			return [][]float32{h.get(d)}
		})
	}
	{
		const N, H = 130, 300
		x, w, dOut := h.f32(h.randn(N*H, 1), N, H), h.f32(h.randn(H, 1), H), h.f32(h.randn(N*H, 1), N, H)
		dw0 := h.randn(H, 1)
		twice("RMSNorm", func() [][]float32 {
			out, rstd, dx, dw := h.nan(N, H), h.nan(N), h.nan(N, H), h.f32(dw0, H)
			h.be.RMSNorm(out, rstd, x, w, 1e-5)
			h.be.RMSNormBackward(dx, dw, dOut, x, w, rstd)
			return [][]float32{h.get(out), h.get(rstd), h.get(dx), h.get(dw)}
		})
	}
	{
		const N, H = 1031, 129
		dy, db0 := h.f32(h.randn(N*H, 1), N, H), h.randn(H, 1)
		twice("BiasGrad", func() [][]float32 {
			db := h.f32(db0, H)
			h.be.BiasGrad(db, dy)
			return [][]float32{h.get(db)}
		})
	}
	{
		const V, H, N = 50, 300, 200
		ids, dOut := h.i32(h.ints(N, V), N), h.f32(h.randn(N*H, 1), N, H)
		dt0 := h.randn(V*H, 1)
		twice("EmbeddingBackward", func() [][]float32 {
			dt := h.f32(dt0, V, H)
			h.be.EmbeddingBackward(dt, dOut, ids)
			return [][]float32{h.get(dt)}
		})
	}
	for _, g := range []geometry{{B: 2, T: 130, heads: 4, kvHeads: 2, D: 16}, {B: 1, T: 200, heads: 8, kvHeads: 2, D: 64},
		{B: 1, T: 200, heads: 4, kvHeads: 2, D: 64, W: 50}} {
		q := h.f32(h.randn(g.qLen(), 1), g.B, g.T, g.heads, g.D)
		k := h.f32(h.randn(g.kvLen(), 1), g.B, g.T, g.kvHeads, g.D)
		v := h.f32(h.randn(g.kvLen(), 1), g.B, g.T, g.kvHeads, g.D)
		dOut := h.f32(h.randn(g.qLen(), 1), g.B, g.T, g.heads, g.D)
		twice(fmt.Sprintf("Attention %+v", g), func() [][]float32 {
			out, lse := h.nan(g.B, g.T, g.heads, g.D), h.nan(g.B, g.heads, g.T)
			h.be.Attention(out, lse, q, k, v, g.W)
			dq, dk, dv := h.nan(g.B, g.T, g.heads, g.D), h.nan(g.B, g.T, g.kvHeads, g.D), h.nan(g.B, g.T, g.kvHeads, g.D)
			h.be.AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse, g.W)
			return [][]float32{h.get(out), h.get(lse), h.get(dq), h.get(dk), h.get(dv)}
		})
	}
	{
		const N, V = 8, 5003
		logits, targets, weights := h.f32(h.randn(N*V, 2), N, V), h.i32(h.ints(N, V), N), h.f32(fill(N, 1), N)
		twice("CrossEntropy", func() [][]float32 {
			l, d := h.nan(N), h.nan(N, V)
			h.be.CrossEntropy(l, d, logits, targets, weights, 0.125)
			return [][]float32{h.get(l), h.get(d)}
		})
	}
	{
		const n = 70001
		p0, g0 := h.randn(n, 1), h.randn(n, 1)
		twice("AdamW", func() [][]float32 {
			p, m, v := h.f32(p0, n), h.f32(nil, n), h.f32(nil, n)
			g := h.f32(g0, n)
			hp := engine.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
			for step := 1; step <= 2; step++ {
				hp.Step = step
				h.be.AdamW(p, g, m, v, hp)
			}
			return [][]float32{h.get(p), h.get(m), h.get(v)}
		})
	}
}
