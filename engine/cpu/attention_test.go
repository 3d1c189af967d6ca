package cpu

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/gemm"
)

// countingGemm is a one-thread GEMM that counts the multiply-adds of
// its calls.
type countingGemm struct {
	gemm.Impl
	macs atomic.Int64
}

func (c *countingGemm) Threads() int { return 1 }

func (c *countingGemm) Sgemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, cc []float32, ldc int) {
	c.macs.Add(int64(m) * int64(n) * int64(k))
	c.Impl.Sgemm(transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, cc, ldc)
}

// TestAttentionWindowSkipsTiles counts the products of a windowed
// attention: its forward and backward must visit only the key tiles
// within reach of a window — at most W + 2·attnTile keys a query, so
// O(T·W) — not the causal triangle's, which the same count without a
// window shows is what it measures. The one-pass and two-pass backward
// (1 and 3 threads for the one (sequence, kv head) pair) both.
func TestAttentionWindowSkipsTiles(t *testing.T) {
	const B, T, H, KV, D, W = 1, 2048, 2, 1, 8, 40
	rng := rand.New(rand.NewPCG(7, 8))
	q, k, v, dOut := randn(rng, B*T*H*D), randn(rng, B*T*KV*D), randn(rng, B*T*KV*D), randn(rng, B*T*H*D)
	// Products a call computes, in multiply-adds of D each: the forward 2
	// a (query, key) pair (S, P·v), the backward at most 7 (S and dP twice
	// on the two-pass path, dv, dk, dq).
	const fwdPer, bwdPer = 2, 7
	within := float64(B*H*T) * float64(W+2*attnTile) * D // a windowed call's pairs, times D
	causal := float64(B*H) * float64(T) * float64(T+1) / 2 * D
	for _, threads := range []int{1, 3} {
		for _, window := range []int{0, W} {
			g := &countingGemm{Impl: gemm.New(1)}
			b := New(Options{Threads: threads, GEMM: g})
			tq, tk, tv := upload(b, q, B, T, H, D), upload(b, k, B, T, KV, D), upload(b, v, B, T, KV, D)
			out, lse := b.Alloc(engine.F32, B, T, H, D), b.Alloc(engine.F32, B, H, T)
			b.Attention(out, lse, tq, tk, tv, window)
			fwd := float64(g.macs.Swap(0))
			dq, dk, dv := b.Alloc(engine.F32, B, T, H, D), b.Alloc(engine.F32, B, T, KV, D), b.Alloc(engine.F32, B, T, KV, D)
			b.AttentionBackward(dq, dk, dv, upload(b, dOut, B, T, H, D), tq, tk, tv, out, lse, window)
			bwd := float64(g.macs.Load())
			t.Logf("threads=%d, window %d: forward %.3g, backward %.3g multiply-adds", threads, window, fwd, bwd)
			if window == 0 {
				if fwd < fwdPer*causal || bwd < 5*causal {
					t.Errorf("threads=%d, causal: %g and %g multiply-adds, fewer than the triangle's %g and %g", threads, fwd, bwd, fwdPer*causal, 5*causal)
				}
				continue
			}
			if fwd > fwdPer*within || bwd > bwdPer*within {
				t.Errorf("threads=%d, window %d: %g and %g multiply-adds, more than the window's tiles' %g and %g (causal: %g and %g)",
					threads, window, fwd, bwd, fwdPer*within, bwdPer*within, fwdPer*causal, 5*causal)
			}
		}
	}
}
