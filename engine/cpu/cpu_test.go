package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/enginetest"
	"github.com/memtrain/memtrain/engine/gemm"
	"github.com/memtrain/memtrain/internal/numtest"
)

func TestConformance(t *testing.T) {
	for _, threads := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("threads=%d", threads), func(t *testing.T) {
			// Poisoned: Empty tensors are checked to hold NaN.
			enginetest.RunConfig(t, enginetest.Config{New: func() engine.Backend { return New(Options{Threads: threads, Poison: true}) }, Poisoned: true})
		})
	}
	// Once more on gonum's GEMM, so that nothing passes only because of a
	// property of the default one.
	t.Run("threads=2,gemm=gonum", func(t *testing.T) {
		enginetest.Run(t, func() engine.Backend { return New(Options{Threads: 2, GEMM: gemm.Reference{}}) })
	})
}

// mustPanic runs f and checks that it panics with a message containing
// want.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one mentioning %q", want)
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Fatalf("panic %q, want one mentioning %q", msg, want)
		}
	}()
	f()
}

func randn(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func upload(b *Backend, x []float32, shape ...int) *engine.Tensor {
	t := b.Alloc(engine.F32, shape...)
	b.Upload(t, x)
	return t
}

func uploadInt(b *Backend, x []int32, shape ...int) *engine.Tensor {
	t := b.Alloc(engine.I32, shape...)
	b.UploadInt32(t, x)
	return t
}

func TestMemStatsPeak(t *testing.T) {
	b := New(Options{Threads: 1})
	x := b.Alloc(engine.F32, 100) // 400 bytes
	y := b.Alloc(engine.I32, 10)  // 40
	b.Free(x)
	z := b.Alloc(engine.F32, 50) // 200
	if got := b.MemStats(); got != (engine.MemStats{Allocated: 240, Peak: 440}) {
		t.Errorf("MemStats() = %+v, want {240 440}", got)
	}
	b.Free(y)
	b.Free(z)
	mustPanic(t, "already freed", func() { b.Free(z) })
	mustPanic(t, "freed", func() { Float32s(x) })
}

func TestFloat32sIsZeroCopy(t *testing.T) {
	b := New(Options{Threads: 1})
	x := b.Alloc(engine.F32, 2, 5)
	row := x.Row(1)
	s := Float32s(row)
	if len(s) != 5 || cap(s) != 5 {
		t.Fatalf("Float32s of a row: len %d cap %d, want 5 and 5", len(s), cap(s))
	}
	s[2] = 7
	got := make([]float32, 10)
	b.Download(got, x)
	if err := numtest.Scalar(float64(got[7]), 7, numtest.Tol{}); err != nil {
		t.Errorf("write through Float32s did not reach the tensor: %v: %v", got, err)
	}
	ids := b.Alloc(engine.I32, 3)
	Int32s(ids)[1] = 42
	if v := Int32s(ids.View(1, 1))[0]; v != 42 {
		t.Errorf("Int32s of a view = %d, want 42", v)
	}
	mustPanic(t, "Float32s: dtype: a i32", func() { Float32s(ids) })
}

func TestCrossEntropyPanicsOnBadTarget(t *testing.T) {
	b := New(Options{Threads: 2})
	logits := upload(b, make([]float32, 6), 2, 3)
	losses := b.Alloc(engine.F32, 2)
	weights := upload(b, []float32{1, 1}, 2)
	for _, bad := range []int32{-1, 3} {
		targets := uploadInt(b, []int32{0, bad}, 2)
		mustPanic(t, "outside the vocabulary", func() {
			b.CrossEntropy(losses, nil, logits, targets, weights, 1)
		})
	}
}

func TestEmbeddingPanicsOnBadID(t *testing.T) {
	b := New(Options{Threads: 2})
	table := b.Alloc(engine.F32, 4, 2)
	out := b.Alloc(engine.F32, 1, 2)
	mustPanic(t, "outside the table", func() { b.Embedding(out, table, uploadInt(b, []int32{4}, 1)) })
}

// TestCrossEntropyInPlace checks that the gradient may overwrite the
// logits, which saves the N×V buffer.
func TestCrossEntropyInPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const N, V = 5, 301
	b := New(Options{Threads: 2})
	x := randn(rng, N*V)
	targets := uploadInt(b, []int32{3, -1, 300, 0, 17}, N)
	weights := upload(b, []float32{1, 0, 2, 0.5, 1}, N)
	sep, sepLoss := b.Alloc(engine.F32, N, V), b.Alloc(engine.F32, N)
	b.CrossEntropy(sepLoss, sep, upload(b, x, N, V), targets, weights, 0.5)
	logits, loss := upload(b, x, N, V), b.Alloc(engine.F32, N)
	b.CrossEntropy(loss, logits, logits, targets, weights, 0.5)
	if err := numtest.Equal(Float32s(logits), Float32s(sep)); err != nil {
		t.Errorf("in-place gradient against separate: %v", err)
	}
	if err := numtest.Equal(Float32s(loss), Float32s(sepLoss)); err != nil {
		t.Errorf("in-place loss against separate: %v", err)
	}
}

func TestArgmaxNaN(t *testing.T) {
	b := New(Options{Threads: 1})
	nan := float32(math.NaN())
	logits := upload(b, []float32{1, nan, 5, nan, nan, 2, 9, 9}, 2, 4)
	out := b.Alloc(engine.I32, 2)
	b.Argmax(out, logits)
	if got := Int32s(out); got[0] != 1 || got[1] != 0 {
		t.Errorf("Argmax = %v, want [1 0]: the first NaN wins", got)
	}
}

// TestAdamWTorchFloat32 checks AdamW bit for bit against a float32
// transcription of torch.optim.AdamW's _single_tensor_adamw, scalars
// computed in float64 as Python does.
func TestAdamWTorchFloat32(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 257
	b := New(Options{Threads: 3})
	p0 := randn(rng, n)
	p, m, v := upload(b, p0, n), b.Alloc(engine.F32, n), b.Alloc(engine.F32, n)
	wp, wm, wv := append([]float32(nil), p0...), make([]float32, n), make([]float32, n)
	hp := engine.AdamWParams{LR: 3e-4, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	lr, wd, b1, b2 := float64(hp.LR), float64(hp.WeightDecay), float64(hp.Beta1), float64(hp.Beta2)
	for step := 1; step <= 5; step++ {
		g := randn(rng, n)
		hp.Step = step
		b.AdamW(p, upload(b, g, n), m, v, hp)

		bc1 := 1 - math.Pow(b1, float64(step))
		bc2 := 1 - math.Pow(b2, float64(step))
		for i := range wp {
			wp[i] = wp[i] * float32(1-lr*wd)
			wm[i] = float32(wm[i]*float32(b1)) + float32(float32(1-b1)*g[i])
			wv[i] = float32(wv[i]*float32(b2)) + float32(float32(float32(1-b2)*g[i])*g[i])
			denom := float32(float32(math.Sqrt(float64(wv[i])))/float32(math.Sqrt(bc2))) + hp.Eps
			wp[i] = wp[i] + float32(float32(float32(-lr/bc1)*wm[i])/denom)
		}
		for _, c := range []struct {
			name      string
			got, want []float32
		}{{"p", Float32s(p), wp}, {"m", Float32s(m), wm}, {"v", Float32s(v), wv}} {
			if err := numtest.Equal(c.got, c.want); err != nil {
				t.Fatalf("step %d: %s against torch's float32 arithmetic: %v", step, c.name, err)
			}
		}
	}
}

// TestThreadCountIndependence checks the package's promise: no kernel
// reduces across a thread's share of the work, so with the default GEMM
// the bits do not depend on the thread count.
// AttentionBackward's 4 (sequence, kv head) pairs take its one-pass path
// with 1 and 2 threads and its two-pass path with 3 and 8: the two must
// agree bit for bit, without a window and with one (of 20 positions,
// which cuts the 64-position tiles).
func TestThreadCountIndependence(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const N, H, V = 97, 257, 40
	x, w, dOut := randn(rng, N*H), randn(rng, H), randn(rng, N*H)
	ids := make([]int32, N)
	for i := range ids {
		ids[i] = int32(rng.IntN(V))
	}
	big := randn(rng, 300001)
	const B, T, heads, kv, D = 2, 70, 4, 2, 8
	q, k, vv := randn(rng, B*T*heads*D), randn(rng, B*T*kv*D), randn(rng, B*T*kv*D)
	dAttn := randn(rng, B*T*heads*D)
	const gm, gn, gk = 190, 150, 300

	run := func(threads int) [][]float32 {
		b := New(Options{Threads: threads})
		tx, tw, tdOut := upload(b, x, N, H), upload(b, w, H), upload(b, dOut, N, H)
		out, rstd, dx, dw := b.Alloc(engine.F32, N, H), b.Alloc(engine.F32, N), b.Alloc(engine.F32, N, H), b.Alloc(engine.F32, H)
		b.RMSNorm(out, rstd, tx, tw, 1e-5)
		b.RMSNormBackward(dx, dw, tdOut, tx, tw, rstd)
		dTable := b.Alloc(engine.F32, V, H)
		b.EmbeddingBackward(dTable, tdOut, uploadInt(b, ids, N))
		ss := b.Alloc(engine.F32, 1)
		b.SumSquares(ss, upload(b, big, len(big)))
		tq, tk, tv := upload(b, q, B, T, heads, D), upload(b, k, B, T, kv, D), upload(b, vv, B, T, kv, D)
		ao, lse := b.Alloc(engine.F32, B, T, heads, D), b.Alloc(engine.F32, B, heads, T)
		b.Attention(ao, lse, tq, tk, tv, 0)
		dq, dk, dv := b.Alloc(engine.F32, B, T, heads, D), b.Alloc(engine.F32, B, T, kv, D), b.Alloc(engine.F32, B, T, kv, D)
		b.AttentionBackward(dq, dk, dv, upload(b, dAttn, B, T, heads, D), tq, tk, tv, ao, lse, 0)
		const window = 20
		wo, wlse := b.Alloc(engine.F32, B, T, heads, D), b.Alloc(engine.F32, B, heads, T)
		b.Attention(wo, wlse, tq, tk, tv, window)
		wdq, wdk, wdv := b.Alloc(engine.F32, B, T, heads, D), b.Alloc(engine.F32, B, T, kv, D), b.Alloc(engine.F32, B, T, kv, D)
		b.AttentionBackward(wdq, wdk, wdv, upload(b, dAttn, B, T, heads, D), tq, tk, tv, wo, wlse, window)
		ga, gb, gc := upload(b, big[:gm*gk], gm, gk), upload(b, big[1:1+gk*gn], gk, gn), b.Alloc(engine.F32, gm, gn)
		b.Gemm(engine.GemmParams{M: gm, N: gn, K: gk, Alpha: 1, LDA: gk, LDB: gn, LDC: gn}, ga, gb, gc)
		losses, dLogits := b.Alloc(engine.F32, N), b.Alloc(engine.F32, N, H)
		b.CrossEntropy(losses, dLogits, tx, uploadInt(b, ids, N), upload(b, x[:N], N), 0.5)
		// SwiGLU over an odd length, so that chunk boundaries fall inside
		// vector blocks.
		sg, su, sd := upload(b, big, len(big)), upload(b, big[1:], len(big)-1), upload(b, big[2:], len(big)-2)
		sgv, suv := sg.View(0, len(big)-2), su.View(0, len(big)-2)
		so, sdg, sdu := b.Alloc(engine.F32, len(big)-2), b.Alloc(engine.F32, len(big)-2), b.Alloc(engine.F32, len(big)-2)
		b.SwiGLU(so, sgv, suv)
		b.SwiGLUBackward(sdg, sdu, sd, sgv, suv)
		kvOut := b.Alloc(engine.F32, B, 3, heads, D)
		b.AttentionKV(kvOut, upload(b, q[:B*3*heads*D], B, 3, heads, D), tk, tv, uploadInt(b, []int32{0, 40}, B), 0)
		var res [][]float32
		for _, t := range []*engine.Tensor{out, rstd, dx, dw, dTable, ss, ao, lse, dq, dk, dv, wo, wlse, wdq, wdk, wdv, gc, losses, dLogits, so, sdg, sdu, kvOut} {
			res = append(res, Float32s(t))
		}
		return res
	}
	want := run(1)
	for _, threads := range []int{2, 3, 8} {
		got := run(threads)
		if len(got) != len(want) {
			t.Fatalf("threads=%d: %d results, with one thread %d", threads, len(got), len(want))
		}
		for i := range want {
			if err := numtest.Equal(got[i], want[i]); err != nil {
				t.Fatalf("threads=%d: result %d against one thread: %v", threads, i, err)
			}
		}
	}
}

func TestParallelForPartition(t *testing.T) {
	b := New(Options{Threads: 3})
	for _, c := range []struct{ n, grain, chunks int }{{10, 1, 3}, {10, 4, 3}, {10, 5, 2}, {2, 1, 2}, {1, 1, 1}, {0, 1, 0}} {
		seen := make([]int, c.n)
		chunks := make(chan [2]int, 8)
		b.parallelFor(c.n, c.grain, func(lo, hi int) {
			chunks <- [2]int{lo, hi}
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		close(chunks)
		if len(chunks) != c.chunks {
			t.Errorf("n=%d grain=%d: %d chunks, want %d", c.n, c.grain, len(chunks), c.chunks)
		}
		for i, s := range seen {
			if s != 1 {
				t.Errorf("n=%d grain=%d: item %d visited %d times", c.n, c.grain, i, s)
			}
		}
	}
	mustPanic(t, "boom", func() {
		b.parallelFor(9, 1, func(lo, hi int) {
			if lo > 0 {
				panic("boom")
			}
		})
	})
}
