package cuda

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
)

// peakBandwidth is the memory bandwidth (bytes/s) of the GPUs memtrain
// knows, for the fraction of it a kernel reaches; 0 for others.
func peakBandwidth(name string) float64 {
	for _, p := range []struct {
		model string
		bytes float64
	}{{"H200", 4.8e12}, {"H100", 3.35e12}, {"A100", 2.0e12}, {"L40S", 0.864e12}} {
		if strings.Contains(name, p.model) {
			return p.bytes
		}
	}
	return 0
}

// BenchmarkGPUBandwidth times the memory-bound operations at a Llama 3 8B
// layer's shapes — 8192 tokens of hidden size 4096, 14336 intermediate
// features, 32 heads of 128, a head chunk of 523 rows of a 128256-token
// vocabulary — on bf16 activations, and prints each as a BENCH line with
// the bytes its declaration (traffic.go) says it moves, the GB/s that
// makes and the fraction of the device's bandwidth. Needs
// MEMTRAIN_GPU_BENCH=1; run once, with -test.benchtime 1x.
func BenchmarkGPUBandwidth(tb *testing.B) {
	needBench(tb)
	b := newGPU(tb, 0, GemmBF16)
	const (
		n, h, inter, heads, half = 8192, 4096, 14336, 32, 64
		rows, vocab              = 523, 128256
	)
	B, F := engine.BF16, engine.F32
	var all []*engine.Tensor
	tile := b.Alloc(F, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	vals := make([]float32, tile.Len())
	for i := range vals {
		vals[i] = 2*r.Float32() - 1
	}
	b.Upload(tile, vals)
	rnd := func(dt engine.DType, shape ...int) *engine.Tensor {
		x := b.Alloc(dt, shape...)
		fillRandom(b, x, tile)
		all = append(all, x)
		return x
	}
	x, res, out, w, dw := rnd(B, n, h), rnd(B, n, h), rnd(B, n, h), rnd(F, h), rnd(F, h)
	rstd := rnd(F, n)
	gate, up, act := rnd(B, n, inter), rnd(B, n, inter), rnd(B, n, inter)
	q := rnd(B, n, heads, 2*half)
	pos := b.Alloc(engine.I32, n)
	all = append(all, pos)
	ps := make([]int32, n)
	for i := range ps {
		ps[i] = int32(i % 4096) // two sequences of 4096
	}
	b.UploadInt32(pos, ps)
	inv := rnd(F, half)
	logits, dlogits, losses := rnd(F, rows, vocab), rnd(B, rows, vocab), rnd(F, rows)
	targets := b.Alloc(engine.I32, rows)
	all = append(all, targets)
	ones := rnd(F, rows)
	b.Fill(ones, 1)
	p, g, m, v := rnd(F, 1<<26), rnd(F, 1<<26), rnd(F, 1<<26), rnd(F, 1<<26)
	b.Fill(v, 1e-4)
	// Compact AdamW state of an 8192 × 8192 matrix: a split master with
	// 8-bit moments, and a float32 one with bf16 moments.
	const side = 1 << 13
	ix := engine.ElementIndex{Shard: engine.WholeShard(side, side), Cols: side}
	round := &engine.MomentRound{Seed: 1, Tensor: engine.TensorKey("w"), Index: ix}
	q8 := &engine.Int8Moments{Starts: engine.Int8Pieces(ix, side*side)}
	pieces := len(q8.Starts) - 1
	q8.MScale, q8.VScale = rnd(F, pieces), rnd(F, pieces)
	codes := func() *engine.Tensor {
		c := b.Alloc(engine.I8, side*side)
		all = append(all, c)
		return c
	}
	split := engine.AdamWTensors{Grad: g, Copy: rnd(B, side*side), Low: rnd(B, side*side), M: codes(), V: codes(), Round: round, Int8: q8}
	bf16Moments := engine.AdamWTensors{Param: p, Grad: g, Copy: rnd(B, side*side), M: rnd(B, side*side), V: rnd(B, side*side), Round: round}
	b.Fill(bf16Moments.V, 1e-4)
	ctl := rnd(F, 2)
	b.Upload(ctl, []float32{1, 1})
	hp := engine.AdamWParams{LR: 1e-5, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 1}
	tableRows, byPos := ropeTableRows(ps)
	for _, c := range []struct {
		name string
		t    traffic
		run  func()
	}{
		{"add", addTraffic(n*h, B, B, B), func() { b.Add(out, x, res) }},
		{"rmsnorm", rmsnormTraffic(n, h, B, F, B, F), func() { b.RMSNorm(out, rstd, x, w, 1e-5) }},
		{"add_rmsnorm", addRMSNormTraffic(n, h, B, F, B, B, F), func() { b.AddRMSNorm(out, rstd, x, res, w, 1e-5) }},
		{"rmsnorm backward", rmsnormBackwardTraffic(n, h, B, F, B, B, F, F), func() { b.RMSNormBackward(res, dw, out, x, w, rstd) }},
		{"add bias", addBiasTraffic(n, h, B, F), func() { b.AddBias(out, w) }},
		{"bias grad", biasGradTraffic(n, h, F, B), func() { b.BiasGrad(dw, out) }},
		{"swiglu", swigluTraffic(n*inter, B, B, B), func() { b.SwiGLU(act, gate, up) }},
		{"swiglu backward", swigluBackwardTraffic(n*inter, B, B, B, B, B), func() { b.SwiGLUBackward(gate, up, act, gate, up) }},
		{"rope (q)", ropeTraffic(n, heads, half, tableRows, byPos, B, F), func() { b.RoPE(q, pos, inv) }},
		{"cross entropy (head chunk, bf16 gradient)", crossEntropyTraffic(rows, vocab, F, true, B),
			func() { b.CrossEntropy(losses, dlogits, logits, targets, ones, 1) }},
		{"adamw (2^26 parameters)", adamWTraffic(1<<26, F, F, F, F, false, false, F),
			func() { b.AdamW(p, g, m, v, engine.AdamWParams{LR: 1e-5, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 1}) }},
		{"adamw step, split master, int8 moments (2^26 parameters)", compactAdamWTraffic(side*side, pieces, true, engine.I8, false),
			func() { b.AdamWStep([]engine.AdamWTensors{split}, hp, 0, ctl) }},
		{"adamw step, bf16 moments (2^26 parameters)", compactAdamWTraffic(side*side, 0, false, B, false),
			func() { b.AdamWStep([]engine.AdamWTensors{bf16Moments}, hp, 0, ctl) }},
	} {
		secs := timeIt(tb, b, c.run)
		line := map[string]any{"bench": "bandwidth", "case": c.name, "ms": secs * 1e3, "bytes": c.t.bytes,
			"gbps": c.t.bytes / secs / 1e9, "device": b.Info().Name}
		if peak := peakBandwidth(b.Info().Name); peak > 0 {
			line["of_peak"] = c.t.bytes / secs / peak
		}
		bench(tb, line)
	}
	for _, t := range append(all, tile) {
		b.Free(t)
	}
}
