package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/engine"
)

// The benchmarks run at training sizes of a small Llama (H = 768, 12
// heads of 64, V = 32000) on GOMAXPROCS threads, and report throughput so
// that kernels of different sizes compare.

func benchAttentionGeometries() []attentionGeometry {
	return []attentionGeometry{
		{B: 4, T: 256, heads: 12, kvHeads: 4, D: 64},
		{B: 1, T: 1024, heads: 12, kvHeads: 12, D: 64},
		// A sliding window of 512 (W, passed as the window; 0 elsewhere:
		// plain causal) over a sequence 8 times longer: O(T·W) work.
		{B: 1, T: 4096, heads: 12, kvHeads: 4, D: 64, W: 512},
	}
}

// attentionFlops counts the multiply-adds of the causal products, ×2: the
// forward's two T×T×D products over the lower triangle, or over the
// band of a sliding window.
func attentionFlops(g attentionGeometry) float64 {
	a := engine.AttentionShape{B: g.B, T: g.T, Heads: g.heads, KVHeads: g.kvHeads, D: g.D, Window: g.W}
	return 2 * 2 * a.Pairs() * float64(g.D)
}

func BenchmarkAttention(b *testing.B) {
	for _, g := range benchAttentionGeometries() {
		be := New(Options{})
		rng := rand.New(rand.NewPCG(1, 1))
		q := upload(be, randn(rng, g.B*g.T*g.heads*g.D), g.B, g.T, g.heads, g.D)
		k := upload(be, randn(rng, g.B*g.T*g.kvHeads*g.D), g.B, g.T, g.kvHeads, g.D)
		v := upload(be, randn(rng, g.B*g.T*g.kvHeads*g.D), g.B, g.T, g.kvHeads, g.D)
		dOut := upload(be, randn(rng, g.B*g.T*g.heads*g.D), g.B, g.T, g.heads, g.D)
		out, lse := be.Alloc(engine.F32, q.Shape...), be.Alloc(engine.F32, g.B, g.heads, g.T)
		dq, dk, dv := be.Alloc(engine.F32, q.Shape...), be.Alloc(engine.F32, k.Shape...), be.Alloc(engine.F32, k.Shape...)
		name := fmt.Sprintf("B=%d,T=%d,heads=%d,kv=%d,D=%d,window=%d", g.B, g.T, g.heads, g.kvHeads, g.D, g.W)
		b.Run("forward/"+name, func(b *testing.B) {
			for b.Loop() {
				be.Attention(out, lse, q, k, v, g.W)
			}
			b.ReportMetric(attentionFlops(g)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
		be.Attention(out, lse, q, k, v, g.W)
		b.Run("backward/"+name, func(b *testing.B) {
			for b.Loop() {
				be.AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse, g.W)
			}
			// The four products of the textbook backward (dP, dq, dk, dv);
			// the recomputed scores and probabilities are not counted.
			b.ReportMetric(2*attentionFlops(g)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkAttentionKV times one decoding step's attention against the
// cache: 8 sequences, one new query each, at the small preset's geometry
// (6 heads of 64), with 128 or 384 cached positions.
func BenchmarkAttentionKV(b *testing.B) {
	const B, H, D, Tmax = 8, 6, 64, 512
	be := New(Options{})
	rng := rand.New(rand.NewPCG(6, 6))
	kc, vc := upload(be, randn(rng, B*Tmax*H*D), B, Tmax, H, D), upload(be, randn(rng, B*Tmax*H*D), B, Tmax, H, D)
	q, out := upload(be, randn(rng, B*H*D), B, 1, H, D), be.Alloc(engine.F32, B, 1, H, D)
	for _, pos := range []int32{128, 384} {
		start := make([]int32, B)
		for i := range start {
			start[i] = pos
		}
		st := uploadInt(be, start, B)
		b.Run(fmt.Sprintf("B=%d,heads=%d,D=%d,pos=%d", B, H, D, pos), func(b *testing.B) {
			b.SetBytes(int64(2 * B * H * D * 4 * (int(pos) + 1))) // keys and values read
			for b.Loop() {
				be.AttentionKV(out, q, kc, vc, st, 0)
			}
		})
	}
}

func BenchmarkRMSNorm(b *testing.B) {
	const N, H = 4096, 768
	be := New(Options{})
	rng := rand.New(rand.NewPCG(2, 2))
	x, w, dOut := upload(be, randn(rng, N*H), N, H), upload(be, randn(rng, H), H), upload(be, randn(rng, N*H), N, H)
	out, rstd, dx, dw := be.Alloc(engine.F32, N, H), be.Alloc(engine.F32, N), be.Alloc(engine.F32, N, H), be.Alloc(engine.F32, H)
	b.Run("forward/N=4096,H=768", func(b *testing.B) {
		b.SetBytes(2 * N * H * 4)
		for b.Loop() {
			be.RMSNorm(out, rstd, x, w, 1e-5)
		}
	})
	be.RMSNorm(out, rstd, x, w, 1e-5)
	b.Run("backward/N=4096,H=768", func(b *testing.B) {
		b.SetBytes(3 * N * H * 4)
		for b.Loop() {
			be.RMSNormBackward(dx, dw, dOut, x, w, rstd)
		}
	})
}

func BenchmarkCrossEntropy(b *testing.B) {
	const N, V = 256, 32000
	be := New(Options{})
	rng := rand.New(rand.NewPCG(3, 3))
	logits := upload(be, randn(rng, N*V), N, V)
	tg := make([]int32, N)
	for i := range tg {
		tg[i] = int32(rng.IntN(V))
	}
	targets, weights := uploadInt(be, tg, N), upload(be, fillF32(N, 1), N)
	losses, dLogits := be.Alloc(engine.F32, N), be.Alloc(engine.F32, N, V)
	b.Run("loss+grad/N=256,V=32000", func(b *testing.B) {
		b.SetBytes(N * V * 4)
		for b.Loop() {
			be.CrossEntropy(losses, dLogits, logits, targets, weights, 1.0/N)
		}
	})
	dBF16 := be.Alloc(engine.BF16, N, V)
	b.Run("loss+bf16grad/N=256,V=32000", func(b *testing.B) {
		b.SetBytes(N * V * 4)
		for b.Loop() {
			be.CrossEntropy(losses, dBF16, logits, targets, weights, 1.0/N)
		}
	})
	b.Run("loss+grad+copy/N=256,V=32000", func(b *testing.B) {
		b.SetBytes(N * V * 4)
		for b.Loop() {
			be.CrossEntropy(losses, dLogits, logits, targets, weights, 1.0/N)
			be.Copy(dBF16, dLogits)
		}
	})
	b.Run("loss/N=256,V=32000", func(b *testing.B) {
		b.SetBytes(N * V * 4)
		for b.Loop() {
			be.CrossEntropy(losses, nil, logits, targets, weights, 1.0/N)
		}
	})
}

func BenchmarkSwiGLU(b *testing.B) {
	const n = 4096 * 2048
	be := New(Options{})
	rng := rand.New(rand.NewPCG(4, 4))
	g, u, d := upload(be, randn(rng, n), n), upload(be, randn(rng, n), n), upload(be, randn(rng, n), n)
	out, dg, du := be.Alloc(engine.F32, n), be.Alloc(engine.F32, n), be.Alloc(engine.F32, n)
	b.Run("forward/n=8M", func(b *testing.B) {
		b.SetBytes(3 * n * 4)
		for b.Loop() {
			be.SwiGLU(out, g, u)
		}
	})
	b.Run("backward/n=8M", func(b *testing.B) {
		b.SetBytes(5 * n * 4)
		for b.Loop() {
			be.SwiGLUBackward(dg, du, d, g, u)
		}
	})
}

func BenchmarkAdamW(b *testing.B) {
	const n = 1 << 22
	be := New(Options{})
	rng := rand.New(rand.NewPCG(5, 5))
	p, g := upload(be, randn(rng, n), n), upload(be, randn(rng, n), n)
	m, v := be.Alloc(engine.F32, n), be.Alloc(engine.F32, n)
	hp := engine.AdamWParams{LR: 1e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	b.Run("n=4M", func(b *testing.B) {
		b.SetBytes(7 * n * 4) // read p, g, m, v; write p, m, v
		for i := 0; b.Loop(); i++ {
			hp.Step = i + 1
			be.AdamW(p, g, m, v, hp)
		}
	})
}

func fillF32(n int, v float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return x
}
