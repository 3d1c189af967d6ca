package cuda

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	enginebench "github.com/memtrain/memtrain/engine/bench"
	"github.com/memtrain/memtrain/engine/enginetest"
	"github.com/memtrain/memtrain/engine/llama"
)

// The tests in this file run on the machine's GPU, with the CUDA libraries
// the backend finds, and skip saying why when there is none. The
// benchmarks among them also need MEMTRAIN_GPU_BENCH=1; they print one
// line "BENCH {json}" per measurement (scripts/gpu-check.sh collects them).

// needGPU skips the test when the machine has no usable GPU, saying why,
// and returns the number of devices.
func needGPU(t testing.TB) int {
	t.Helper()
	n, err := DeviceCount("")
	if errors.Is(err, ErrNoCUDA) {
		t.Skipf("no GPU: %v", err)
	}
	if err != nil {
		t.Fatalf("CUDA driver: %v", err)
	}
	if n == 0 {
		t.Skip("no GPU: the driver reports no device")
	}
	return n
}

// newGPU returns a backend on GPU dev, closed when the test ends. Call
// needGPU first: a failure here is a failure, not a missing GPU.
func newGPU(t testing.TB, dev int, gemm string) *Backend {
	// Poisoned, as the emulated tests' backends: an Empty tensor read
	// before it is written shows as NaN.
	b, err := New(Options{Device: dev, GEMM: gemm, Poison: true})
	if err != nil {
		// Not Fatal: the conformance suite calls this from its subtests.
		panic(fmt.Sprintf("New on the GPU: %v", err))
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func TestGPUConformance(t *testing.T) {
	needGPU(t)
	b := newGPU(t, 0, GemmF32)
	info := b.Info()
	t.Logf("%s: %d SMs, %.1f GiB, driver %d, NVRTC %s (%s, cached %v), cuBLAS %d; libraries %v",
		b.Name(), info.SMs, float64(info.TotalMemory)/(1<<30), info.DriverVersion, info.NVRTCVersion,
		info.KernelTarget, info.KernelsCached, info.CUBLASVersion, info.Libraries)
	enginetest.RunConfig(t, enginetest.Config{New: func() engine.Backend { return newGPU(t, 0, GemmF32) }, Poisoned: true})
}

// TestGPUVectorPaths: the 16-byte accesses against element by element,
// bit for bit (TestVectorPathsEmulated).
func TestGPUVectorPaths(t *testing.T) {
	needGPU(t)
	testVectorPaths(t, newGPU(t, 0, GemmF32))
}

// TestGPULongRows: the float32 sums at Llama's lengths against the CPU's
// (TestLongRowsEmulated).
func TestGPULongRows(t *testing.T) {
	needGPU(t)
	testLongRows(t, newGPU(t, 0, GemmF32))
}

// TestGPUModel: a Llama step and greedy decoding against the CPU, in
// float32 and in mixed precision.
func TestGPUModel(t *testing.T) {
	needGPU(t)
	testModel(t, newGPU)
	t.Run("bf16 activations", func(t *testing.T) { testModelBF16(t, newGPU) })
}

func TestGPUBF16(t *testing.T) {
	needGPU(t)
	testBF16(t, newGPU)
}

// TestGPUFreeMemory: FreeMemory reads the GPU's own free memory, which a
// backend's allocation lowers by at least its size.
func TestGPUFreeMemory(t *testing.T) {
	needGPU(t)
	b := newGPU(t, 0, GemmBF16)
	free, total, err := FreeMemory("", 0)
	if err != nil || free <= 0 || free > total || total != b.Info().TotalMemory {
		t.Fatalf("FreeMemory: %d of %d, %v (the backend says %d in all)", free, total, err, b.Info().TotalMemory)
	}
	x := b.Alloc(engine.F32, 1<<28) // 1 GiB
	defer b.Free(x)
	after, _, err := FreeMemory("", 0)
	if err != nil || free-after < 1<<30 {
		t.Errorf("after a 1 GiB allocation: %d free (was %d), %v", after, free, err)
	}
	t.Logf("cuda:0: %.1f of %.1f GiB free", float64(free)/(1<<30), float64(total)/(1<<30))
}

// TestGPUSteadyState: a steady-state training step on the GPU makes no
// cuMemAlloc or cuMemFree and at most maxSyncsPerStep synchronisations.
func TestGPUSteadyState(t *testing.T) {
	needGPU(t)
	for _, c := range steadyStates() {
		t.Run(c.name, func(t *testing.T) { testSteadyState(t, newGPU, 0, nil, c) })
	}
}

func TestGPUBackend(t *testing.T) {
	needGPU(t)
	testBackend(t, newGPU)
}

// TestGPUNCCL runs the communicator suite over the machine's GPUs. With
// one GPU NCCL has no peer (it refuses two ranks on one device), so only
// a one-rank group is made from a unique id: the library loads, and the
// id passes by value into ncclCommInitRank.
func TestGPUNCCL(t *testing.T) {
	n := needGPU(t)
	if n >= 2 {
		testNCCL(t, newGPU, "", min(n, 8))
		return
	}
	b := newGPU(t, 0, GemmF32)
	id, err := NewNCCLUniqueID("")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewNCCL(b, id, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	x := b.Alloc(engine.F32, 3)
	defer b.Free(x)
	if err := c.AllReduce(x); err != nil {
		t.Error(err)
	}
	if err := c.Close(); err != nil {
		t.Error(err)
	}
}

// bench reports one measurement as a JSON line.
func bench(t testing.TB, v map[string]any) {
	line, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("BENCH %s\n", line)
}

func needBench(t testing.TB) {
	if os.Getenv("MEMTRAIN_GPU_BENCH") == "" {
		t.Skip("set MEMTRAIN_GPU_BENCH=1 to run the GPU benchmarks")
	}
	needGPU(t)
}

// envInts reads a comma-separated list of integers, or def.
func envInts(name string, def []int) []int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// timeIt runs f once to warm up, then repeatedly for at least half a
// second (and at least 3 times), and returns the median seconds of a run.
func timeIt(t testing.TB, b *Backend, f func()) float64 {
	f()
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	var secs []float64
	for total := 0.0; len(secs) < 3 || (total < 0.5 && len(secs) < 50); {
		start := time.Now()
		f()
		if err := b.Synchronize(); err != nil {
			t.Fatal(err)
		}
		s := time.Since(start).Seconds()
		secs = append(secs, s)
		total += s
	}
	sort.Float64s(secs)
	return secs[len(secs)/2]
}

// fillRandom gives t values uniform in ±scale (or around 1 for norms),
// by tiling one uploaded random block on the device: far faster than
// generating billions of values on the host.
func fillRandom(b *Backend, t *engine.Tensor, tile *engine.Tensor) {
	n, c := t.Len(), tile.Len()
	for off := 0; off < n; off += c {
		k := min(c, n-off)
		b.Copy(t.View(off, k), tile.View(0, k))
	}
}

// BenchmarkGPUGemm measures the GEMM at each size of
// $MEMTRAIN_GPU_BENCH_GEMM (default 8192): bf16 operands into bf16 and
// float32, and float32 operands at each precision. Each case is timed by
// timeIt's protocol (the median of at least half a second of runs) and
// printed as a BENCH line; run it once, with -test.benchtime 1x, as
// scripts/gpu-check.sh does.
func BenchmarkGPUGemm(tb *testing.B) {
	needBench(tb)
	for _, size := range envInts("MEMTRAIN_GPU_BENCH_GEMM", []int{8192}) {
		for _, c := range []struct {
			name     string
			mode     string
			ab, cOut engine.DType
		}{
			{"bf16", GemmF32, engine.BF16, engine.BF16},
			{"bf16 into f32", GemmF32, engine.BF16, engine.F32},
			{"f32 (bf16 tensor cores)", GemmBF16, engine.F32, engine.F32},
			{"f32 (tf32)", GemmTF32, engine.F32, engine.F32},
			{"f32", GemmF32, engine.F32, engine.F32},
		} {
			b := newGPU(tb, 0, c.mode)
			a, bm, out := b.Alloc(c.ab, size, size), b.Alloc(c.ab, size, size), b.Alloc(c.cOut, size, size)
			tile := b.Alloc(engine.F32, 1<<20)
			r := rand.New(rand.NewPCG(1, 2))
			vals := make([]float32, tile.Len())
			for i := range vals {
				vals[i] = 2*r.Float32() - 1
			}
			b.Upload(tile, vals)
			fillRandom(b, a, tile)
			fillRandom(b, bm, tile)
			p := engine.GemmParams{M: size, N: size, K: size, Alpha: 1, LDA: size, LDB: size, LDC: size}
			secs := timeIt(tb, b, func() { b.Gemm(p, a, bm, out) })
			bench(tb, map[string]any{"bench": "gemm", "case": c.name, "m": size, "n": size, "k": size,
				"ms": secs * 1e3, "tflops": 2 * float64(size) * float64(size) * float64(size) / secs / 1e12, "device": b.Info().Name})
			for _, x := range []*engine.Tensor{a, bm, out, tile} {
				b.Free(x)
			}
			b.Close()
		}
	}
}

// attentionFLOPs is the matmul work of causal attention over B sequences of
// T tokens, H query heads of size D, as FlashAttention's benchmarks count
// it: the forward's two products (S = QKᵀ, O = PV) over the causal half,
// 4·B·H·T²·D / 2; the backward's five (S again, dP, dV, dK, dQ) are 2.5
// times that.
func attentionFLOPs(B, T, H, D int) (fwd, bwd float64) {
	fwd = 2 * float64(B) * float64(H) * float64(T) * float64(T) * float64(D)
	return fwd, 2.5 * fwd
}

// BenchmarkGPUAttention measures bf16 causal attention, forward and
// backward, at each sequence length of $MEMTRAIN_GPU_BENCH_ATTN_SEQ
// (default 4096,8192) and the head shape $MEMTRAIN_GPU_BENCH_ATTN_HEADS,
// "heads,kvHeads,headDim" (default Llama 3.1 8B's 32,8,128), batch 1:
// scripts/gpu/torch_attention.py times torch's flash SDPA on the same
// shapes. Run it once, with -test.benchtime 1x.
func BenchmarkGPUAttention(tb *testing.B) {
	needBench(tb)
	hs := envInts("MEMTRAIN_GPU_BENCH_ATTN_HEADS", []int{32, 8, 128})
	if len(hs) != 3 {
		tb.Fatalf("MEMTRAIN_GPU_BENCH_ATTN_HEADS: want heads,kvHeads,headDim, got %v", hs)
	}
	H, KV, D := hs[0], hs[1], hs[2]
	b := newGPU(tb, 0, "")
	tile := b.Alloc(engine.F32, 1<<20)
	r := rand.New(rand.NewPCG(3, 4))
	vals := make([]float32, tile.Len())
	for i := range vals {
		vals[i] = 2*r.Float32() - 1
	}
	b.Upload(tile, vals)
	defer b.Free(tile)
	for _, T := range envInts("MEMTRAIN_GPU_BENCH_ATTN_SEQ", []int{4096, 8192}) {
		const B = 1
		q, out, dOut, dq := b.Alloc(engine.BF16, B, T, H, D), b.Alloc(engine.BF16, B, T, H, D), b.Alloc(engine.BF16, B, T, H, D), b.Alloc(engine.BF16, B, T, H, D)
		k, v, dk, dv := b.Alloc(engine.BF16, B, T, KV, D), b.Alloc(engine.BF16, B, T, KV, D), b.Alloc(engine.BF16, B, T, KV, D), b.Alloc(engine.BF16, B, T, KV, D)
		lse := b.Alloc(engine.F32, B, H, T)
		for _, x := range []*engine.Tensor{q, k, v, dOut} {
			fillRandom(b, x, tile)
		}
		fwdSecs := timeIt(tb, b, func() { b.Attention(out, lse, q, k, v, 0) })
		bwdSecs := timeIt(tb, b, func() { b.AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse, 0) })
		fwd, bwd := attentionFLOPs(B, T, H, D)
		for _, c := range []struct {
			name        string
			secs, flops float64
		}{{"fwd", fwdSecs, fwd}, {"bwd", bwdSecs, bwd}, {"fwd+bwd", fwdSecs + bwdSecs, fwd + bwd}} {
			bench(tb, map[string]any{"bench": "attention", "case": c.name, "batch": B, "seq_len": T, "heads": H, "kv_heads": KV,
				"head_dim": D, "ms": c.secs * 1e3, "tflops": c.flops / c.secs / 1e12, "device": b.Info().Name})
		}
		for _, x := range []*engine.Tensor{q, out, dOut, dq, k, v, dk, dv, lse} {
			b.Free(x)
		}
	}
}

// peakBF16 is the dense bf16 tensor-core peak (FLOP/s) of the GPUs memtrain
// knows, for MFU; 0 for others.
func peakBF16(name string) float64 {
	for _, p := range []struct {
		model string
		flops float64
	}{{"H200", 989e12}, {"H100", 989e12}, {"A100", 312e12}, {"L40S", 362e12}, {"MI250X", 383e12}} {
		if strings.Contains(name, p.model) {
			return p.flops
		}
	}
	return 0
}

// benchConfig is the model of $MEMTRAIN_GPU_BENCH_MODEL, "preset" or
// "preset:layers" (default llama3.1-8b cut to 4 layers).
func benchConfig(t testing.TB, spec string) *checkpoints.Config {
	name, layers, _ := strings.Cut(spec, ":")
	p, err := checkpoints.LookupPreset(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	if layers != "" {
		n, err := strconv.Atoi(layers)
		if err != nil {
			t.Fatalf("%s: layers %q", spec, layers)
		}
		cfg.NumHiddenLayers = n
	}
	return cfg
}

// BenchmarkGPUStep measures full training steps (forward, backward, AdamW
// on every parameter) of $MEMTRAIN_GPU_BENCH_MODEL at batch
// $MEMTRAIN_GPU_BENCH_BATCH × $MEMTRAIN_GPU_BENCH_SEQ (default 1 × 2048),
// at the GEMM precision $MEMTRAIN_CUDA_GEMM (default bf16): tokens/s, model
// FLOP/s and MFU against the device's bf16 peak, timed as BenchmarkGPUGemm
// is (run it once, with -test.benchtime 1x).
func BenchmarkGPUStep(tb *testing.B) {
	needBench(tb)
	spec := os.Getenv("MEMTRAIN_GPU_BENCH_MODEL")
	if spec == "" {
		spec = "llama3.1-8b:4"
	}
	cfg := benchConfig(tb, spec)
	B := envInts("MEMTRAIN_GPU_BENCH_BATCH", []int{1})[0]
	T := envInts("MEMTRAIN_GPU_BENCH_SEQ", []int{2048})[0]
	b := newGPU(tb, 0, "")
	// MEMTRAIN_GPU_BENCH_PRECISION=bf16 times mixed precision (bf16
	// activations and weight copies).
	act, precision := engine.F32, "f32"
	if os.Getenv("MEMTRAIN_GPU_BENCH_PRECISION") == "bf16" {
		act, precision = engine.BF16, "bf16"
	}
	// MEMTRAIN_GPU_BENCH_RECOMPUTE names a recomputation mode; any
	// other non-empty value is full.
	rec := llama.RecomputeNone
	if v := os.Getenv("MEMTRAIN_GPU_BENCH_RECOMPUTE"); v != "" {
		rec = llama.RecomputeFull
		if r, err := llama.ParseRecompute(v); err == nil {
			rec = r
		}
	}
	m, err := llama.New(b, cfg, llama.Options{Recompute: rec, Activations: act})
	if err != nil {
		tb.Fatal(err)
	}
	defer m.Free()
	tile := b.Alloc(engine.F32, 1<<20)
	defer b.Free(tile)
	r := rand.New(rand.NewPCG(3, 4))
	vals := make([]float32, tile.Len())
	for i := range vals {
		vals[i] = 0.02 * float32(r.NormFloat64())
	}
	b.Upload(tile, vals)
	for _, p := range m.Params() {
		if len(p.Full) == 1 {
			b.Fill(p.Value, 1)
		} else {
			fillRandom(b, p.Value, tile)
		}
		if p.Copy != nil {
			b.Copy(p.Copy, p.Value)
		}
	}
	// The step that trains (engine/bench.Trainer, as finetune.TrainStep takes
	// it: sums on the device, one fused AdamW, one synchronisation).
	tr := enginebench.NewTrainer(b, m)
	defer tr.Free()
	n := B * T
	batch := llama.Batch{B: B, T: T, IDs: make([]int32, n), Targets: make([]int32, n)}
	for i := range batch.IDs {
		batch.IDs[i] = int32(r.IntN(cfg.VocabSize))
		batch.Targets[i] = int32(r.IntN(cfg.VocabSize))
	}
	step := 0
	var loss float64
	secs := timeIt(tb, b, func() {
		step++
		var err error
		if loss, err = tr.Step(batch); err != nil {
			tb.Fatal(err)
		}
	})
	flopsPerToken := engine.ModelFLOPsPerToken(cfg, T)
	tps := float64(n) / secs
	res := map[string]any{"bench": "step", "model": spec, "params": cfg.Params().Total, "batch": B, "seq_len": T,
		"gemm": b.GemmPrecision(), "precision": precision, "step_ms": secs * 1e3, "tokens_per_s": tps, "model_flops_per_token": flopsPerToken,
		"achieved_tflops": tps * flopsPerToken / 1e12, "loss": loss, "steps": step,
		"peak_bytes": b.MemStats().Peak, "device": b.Info().Name}
	if peak := peakBF16(b.Info().Name); peak > 0 {
		res["peak_tflops"] = peak / 1e12
		res["mfu"] = tps * flopsPerToken / peak
	}
	bench(tb, res)
}
