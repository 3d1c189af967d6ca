package cuda

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/commtest"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/enginetest"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

// These tests run on the fake CUDA libraries (fake_test.go): the kernels'
// own sources emulated on the CPU behind the backend's real bindings. They
// skip where the fake cannot be built (no g++, not linux/amd64). The same
// checks run on a real GPU in gpu_test.go.

// A maker returns a backend on device dev with the given GEMM precision,
// closed when the test ends.
type maker func(t testing.TB, dev int, gemm string) *Backend

// TestConformanceEmulated runs the conformance suite.
func TestConformanceEmulated(t *testing.T) {
	fakeCUDA(t)
	// newFake's backends poison their Empty tensors.
	enginetest.RunConfig(t, enginetest.Config{New: func() engine.Backend { return newFake(t, 0, GemmF32) }, Poisoned: true})
}

// testConfig is a small Llama with grouped queries, an untied head and
// llama3 rope scaling, as engine/llama's tests use.
func testConfig() *checkpoints.Config {
	c := &checkpoints.Config{
		HiddenSize: 32, IntermediateSize: 48, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 64, VocabSize: 97,
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.3,
		RopeScaling: &checkpoints.RopeScaling{RopeType: "llama3", Factor: 4, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 16},
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

func randomModel(t *testing.T, b engine.Backend, cfg *checkpoints.Config) *llama.Model {
	t.Helper()
	return randomModelWith(t, b, cfg, llama.Options{})
}

// randomModelWith is randomModel with the model's options.
func randomModelWith(t *testing.T, b engine.Backend, cfg *checkpoints.Config, opt llama.Options) *llama.Model {
	t.Helper()
	m, err := llama.New(b, cfg, opt)
	if err != nil {
		t.Fatal(err)
	}
	w := checkpoints.RandomWeights(cfg, 3)
	r := rand.New(rand.NewPCG(3, 1))
	for i := range w {
		if len(w[i].Shape) == 1 {
			for j := range w[i].Data {
				w[i].Data[j] = 1 + 0.2*float32(r.NormFloat64())
			}
		}
	}
	if err := m.SetWeights(w); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Free)
	return m
}

func randomBatch(cfg *checkpoints.Config, B, T int) llama.Batch {
	r := rand.New(rand.NewPCG(5, 2))
	n := B * T
	batch := llama.Batch{B: B, T: T, IDs: make([]int32, n), Targets: make([]int32, n), Weights: make([]float32, n)}
	for i := range n {
		batch.IDs[i] = int32(r.IntN(cfg.VocabSize))
		batch.Targets[i] = int32(r.IntN(cfg.VocabSize))
		if r.Float64() < 0.8 {
			batch.Weights[i] = 1
		} else {
			batch.Targets[i] = -1
		}
	}
	batch.IDs[3] = batch.IDs[0] // a repeated token
	return batch
}

// trainStep runs a forward and backward pass and an AdamW step, and returns
// the loss and every parameter's gradient and new value.
func trainStep(t *testing.T, m *llama.Model, batch llama.Batch) (llama.Loss, map[string][]float32) {
	t.Helper()
	b := m.Backend()
	m.ZeroGrads()
	loss, err := m.ForwardBackward(batch, 1/float32(len(batch.IDs)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float32{}
	for _, p := range m.Trainable() {
		g := make([]float32, p.Grad.Len())
		b.Download(g, p.Grad)
		out["grad "+p.Name] = g
		mom, v := b.Alloc(engine.F32, p.Value.Shape...), b.Alloc(engine.F32, p.Value.Shape...)
		b.AdamW(p.Value, p.Grad, mom, v, engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 1})
		b.Free(mom)
		b.Free(v)
		val := make([]float32, p.Value.Len())
		b.Download(val, p.Value)
		out["value "+p.Name] = val
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return loss, out
}

// TestModelEmulated trains a small Llama for a step on the CPU and on the
// emulated GPU and compares the loss, every gradient and every updated
// weight, then compares greedy generations.
func TestModelEmulated(t *testing.T) {
	fakeCUDA(t)
	testModel(t, newFake)
}

func testModel(t *testing.T, newBackend maker) {
	cfg := testConfig()
	batch := randomBatch(cfg, 2, 24)
	ref := randomModel(t, cpu.New(cpu.Options{Threads: 2}), cfg)
	refLoss, refOut := trainStep(t, ref, batch)
	for _, mode := range []string{GemmF32, GemmBF16} {
		t.Run(mode, func(t *testing.T) {
			m := randomModel(t, newBackend(t, 0, mode), cfg)
			loss, out := trainStep(t, m, batch)
			tol := 1e-5
			if mode == GemmBF16 {
				tol = 3e-2 // products of bf16-rounded inputs
			}
			if err := numtest.Scalar(loss.Mean(), refLoss.Mean(), numtest.Tol{Rel: tol}); err != nil || loss.Weight != refLoss.Weight {
				t.Errorf("loss (weight %v) against the CPU's (weight %v): %v", loss.Weight, refLoss.Weight, err)
			}
			if err := numtest.EachClose(out, refOut, numtest.Tol{Max: tol * 10}); err != nil {
				t.Errorf("against the CPU's: %v", err)
			}
		})
	}

	gpu := randomModel(t, newBackend(t, 0, GemmF32), cfg)
	cpuModel := randomModel(t, cpu.New(cpu.Options{Threads: 2}), cfg)
	sameGenerations(t, gpu, cpuModel, [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8, 9, 10}, {11}}, "the model")
}

// sameGenerations checks that gpu's greedy tokens after prompts are
// host's.
func sameGenerations(t *testing.T, gpu, host *llama.Model, prompts [][]int32, what string) {
	t.Helper()
	want, err := host.Generate(prompts, llama.GenerateOptions{MaxNewTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	got, err := gpu.Generate(prompts, llama.GenerateOptions{MaxNewTokens: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%s: %d generations on the GPU, %d on the CPU", what, len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("prompt %d: %s generated %v on the GPU, %v on the CPU", i, what, got[i], want[i])
		}
	}
}

// TestModelBF16Emulated compares a mixed-precision Llama step on the
// emulated GPU with the CPU backend's mixed-precision step, then greedy
// generation after training.
func TestModelBF16Emulated(t *testing.T) {
	fakeCUDA(t)
	testModelBF16(t, newFake)
}

// Tolerances of the GPU's mixed-precision step against the CPU's, in
// units of bf16's u = 2⁻⁸. Both round every activation to bf16 once, from
// float32 values that differ in their last bits (cuBLAS's sums in another
// order, the emulator's in float64): now and then the two round a value
// to neighbouring bf16 numbers, a difference of u relative in one
// element, which then spreads through the layers. So the step differs by
// a fraction of u, not by float32 roundoff: the loss within u/8
// relative, every gradient and updated weight within 4u of its tensor's
// largest element. (Measured on the emulator: the loss within 2e-9, the
// worst element within 2e-7 of its tensor's largest: the two rarely
// round a value differently. cuBLAS's other order of sums may flip more.)
const (
	bf16U              = 1.0 / 256
	bf16StepLossTol    = bf16U / 8
	bf16StepElementTol = 4 * bf16U
)

func testModelBF16(t *testing.T, newBackend maker) {
	cfg := testConfig()
	batch := randomBatch(cfg, 2, 24)
	opt := llama.Options{Activations: engine.BF16}
	ref := randomModelWith(t, cpu.New(cpu.Options{Threads: 2}), cfg, opt)
	refLoss, refOut := trainStep(t, ref, batch)
	m := randomModelWith(t, newBackend(t, 0, GemmF32), cfg, opt)
	loss, out := trainStep(t, m, batch)
	checkBF16Step(t, "bf16 step", loss, refLoss, out, refOut)

	// Trained on the batch (its next ids), both backends' models decode
	// prompts that begin its sequences to the same tokens: they have
	// learnt those continuations, by margins far above the bf16 noise.
	// (Thirty steps apart, the two models' weights differ by more than a
	// single step's: a prompt the batch does not begin with, whose
	// continuation neither has learnt, may decode differently after a
	// few tokens.)
	learn := batch
	learn.Targets = make([]int32, len(batch.IDs))
	for i := range learn.Targets {
		learn.Targets[i] = batch.IDs[(i+1)%len(batch.IDs)]
		learn.Weights[i] = 1
	}
	gpu := randomModelWith(t, newBackend(t, 0, GemmF32), cfg, opt)
	host := randomModelWith(t, cpu.New(cpu.Options{Threads: 2}), cfg, opt)
	lg, lh := trainAdamW(t, gpu, learn, 30), trainAdamW(t, host, learn, 30)
	t.Logf("after 30 bf16 steps: loss %.4f on the GPU, %.4f on the CPU", lg, lh)
	sameGenerations(t, gpu, host, [][]int32{batch.IDs[:5], batch.IDs[24:30], batch.IDs[:1]}, "the bf16 model")
}

// trainAdamW trains m for steps fused AdamW steps on batch (the steps
// TestModelBF16LoRAEmulated: LoRA in mixed precision (a bf16 base, bf16
// activations and adapter copies, with dropout) on the emulated GPU:
// a step's loss, adapter gradients and updated adapters are the CPU's
// within the bf16 step tolerances above.
func TestModelBF16LoRAEmulated(t *testing.T) {
	fakeCUDA(t)
	cfg := testConfig()
	batch := randomBatch(cfg, 2, 24)
	batch.Keys = []uint64{3, 8}
	a := &checkpoints.AdapterConfig{PEFTType: "LORA", TaskType: "CAUSAL_LM", R: 4, LoRAAlpha: 8, LoRADropout: 0.1,
		TargetModules: checkpoints.LoRAModules(), Bias: "none"}
	opt := llama.Options{Activations: engine.BF16, LoRA: a, BaseDType: engine.BF16}
	adapters := func(m *llama.Model) *llama.Model {
		r := rand.New(rand.NewPCG(9, 4))
		ts := adapterReader{}
		for i, p := range m.Trainable() {
			sd := float32(0.3)
			if i%2 == 1 {
				sd = 0.03 // B: a fine-tune under way
			}
			v := make([]float32, p.Value.Len())
			for j := range v {
				v[j] = sd * float32(r.NormFloat64())
			}
			ts[p.Name] = v
		}
		if err := m.LoadAdapters(ts); err != nil {
			t.Fatal(err)
		}
		return m
	}
	ref := adapters(randomModelWith(t, cpu.New(cpu.Options{Threads: 2}), cfg, opt))
	refLoss, refOut := trainStep(t, ref, batch)
	m := adapters(randomModelWith(t, newFake(t, 0, GemmF32), cfg, opt))
	loss, out := trainStep(t, m, batch)
	checkBF16Step(t, "bf16 LoRA step", loss, refLoss, out, refOut)
}

// checkBF16Step checks a bf16 step's loss and tensors (trainStep's) on the
// emulated GPU against the CPU's within the bf16 step tolerances.
func checkBF16Step(t *testing.T, what string, loss, refLoss llama.Loss, out, refOut map[string][]float32) {
	t.Helper()
	worst, worstName := 0.0, ""
	for _, name := range slices.Sorted(maps.Keys(refOut)) {
		if d, err := numtest.Measure(out[name], refOut[name]); err == nil && d.MaxRel > worst {
			worst, worstName = d.MaxRel, name
		}
	}
	t.Logf("%s: loss %.6f, CPU %.6f; worst %s at %.3g of its largest element", what, loss.Mean(), refLoss.Mean(), worstName, worst)
	if err := numtest.Scalar(loss.Mean(), refLoss.Mean(), numtest.Tol{Rel: bf16StepLossTol}); err != nil || loss.Weight != refLoss.Weight {
		t.Errorf("%s: loss (weight %v) against the CPU's (weight %v): %v", what, loss.Weight, refLoss.Weight, err)
	}
	if err := numtest.EachClose(out, refOut, numtest.Tol{Max: bf16StepElementTol}); err != nil {
		t.Errorf("%s: against the CPU's: %v", what, err)
	}
}

// adapterReader serves adapter matrices by name to LoadAdapters.
type adapterReader map[string][]float32

func (r adapterReader) ReadFloat32(name string) ([]float32, error) {
	v, ok := r[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %q", name)
	}
	return v, nil
}

// refreshing the bf16 weight copies) and returns the last loss.
func trainAdamW(t *testing.T, m *llama.Model, batch llama.Batch, steps int) float64 {
	t.Helper()
	b := m.Backend()
	var ts []engine.AdamWTensors
	for _, p := range m.Trainable() {
		ts = append(ts, engine.AdamWTensors{Param: p.Value, Grad: p.Grad, Copy: p.Copy,
			M: b.Alloc(engine.F32, p.Value.Shape...), V: b.Alloc(engine.F32, p.Value.Shape...)})
	}
	ctl := b.Alloc(engine.F32, 2)
	b.Upload(ctl, []float32{1, 1})
	var loss llama.Loss
	for s := 1; s <= steps; s++ {
		m.ZeroGrads()
		var err error
		if loss, err = m.ForwardBackward(batch, 1/float32(len(batch.IDs))); err != nil {
			t.Fatal(err)
		}
		b.AdamWStep(ts, engine.AdamWParams{LR: 2e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: s}, 0, ctl)
	}
	for _, x := range ts {
		b.Free(x.M)
		b.Free(x.V)
	}
	b.Free(ctl)
	return loss.Mean()
}

// TestBF16Emulated checks the BF16 storage and the kernels' mixed-type
// paths against float32 results, within bf16's rounding.
func TestBF16Emulated(t *testing.T) {
	fakeCUDA(t)
	testBF16(t, newFake)
}

func testBF16(t *testing.T, newBackend maker) {
	b := newBackend(t, 0, GemmF32)
	r := rand.New(rand.NewPCG(7, 7))
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	get := func(x *engine.Tensor) []float32 {
		out := make([]float32, x.Len())
		b.Download(out, x)
		return out
	}
	round := func(x []float32) []float32 {
		y := make([]float32, len(x))
		for i, v := range x {
			y[i] = checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(v))
		}
		return y
	}
	put := func(dt engine.DType, x []float32, shape ...int) *engine.Tensor {
		tt := b.Alloc(dt, shape...)
		t.Cleanup(func() { b.Free(tt) })
		b.Upload(tt, x)
		return tt
	}

	const n = 1000
	x := randn(n)
	x[0], x[1] = float32(math.Inf(-1)), 1+1.0/256 // a tie, rounded to even
	xb := put(engine.BF16, x, n)
	if err := numtest.Equal(get(xb), round(x)); err != nil {
		t.Errorf("BF16 upload/download is not the host's rounding: %v", err)
	}
	// Casts both ways, through Copy.
	xf := put(engine.F32, x, n)
	cast := put(engine.BF16, nil2(n), n)
	b.Copy(cast, xf)
	if err := numtest.Equal(get(cast), round(x)); err != nil {
		t.Errorf("F32→BF16 cast differs from the host's rounding: %v", err)
	}
	back := put(engine.F32, nil2(n), n)
	b.Copy(back, cast)
	if err := numtest.Equal(get(back), round(x)); err != nil {
		t.Errorf("BF16→F32 cast is not exact: %v", err)
	}
	b.Fill(cast, 0.1)
	if got := get(cast); got[7] != checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(0.1)) {
		t.Errorf("Fill BF16 gave %v", got[7])
	}

	// A mixed Add: BF16 + F32 into F32.
	y := randn(n)
	sum := put(engine.F32, nil2(n), n)
	b.Add(sum, put(engine.BF16, y, n), put(engine.F32, y, n))
	want := make([]float32, n)
	for i := range want {
		want[i] = round(y)[i] + y[i]
	}
	if err := numtest.CloseMax(get(sum), want, 1e-7); err != nil {
		t.Errorf("mixed Add: %v", err)
	}

	// GEMMs of BF16 operands into F32 and BF16, against float64.
	const M, N, K = 17, 9, 33
	a, bb := round(randn(M*K)), round(randn(K*N))
	ref := make([]float32, M*N)
	for i := range M {
		for j := range N {
			var s float64
			for l := range K {
				s += float64(a[i*K+l]) * float64(bb[l*N+j])
			}
			ref[i*N+j] = float32(s)
		}
	}
	p := engine.GemmParams{M: M, N: N, K: K, Alpha: 1, LDA: K, LDB: N, LDC: N}
	for _, cdt := range []engine.DType{engine.F32, engine.BF16} {
		c := put(cdt, nil2(M*N), M, N)
		b.Gemm(p, put(engine.BF16, a, M, K), put(engine.BF16, bb, K, N), c)
		tol := 1e-6
		if cdt == engine.BF16 {
			tol = 1.0 / 128
		}
		if err := numtest.CloseMax(get(c), ref, tol); err != nil {
			t.Errorf("BF16 GEMM into %v: %v", cdt, err)
		}
	}

	// RMSNorm and SwiGLU on BF16 activations with F32 weights and
	// statistics, against the same on F32 copies of the rounded values.
	const rows, h = 5, 64
	xs := round(randn(rows * h))
	w := randn(h)
	outB, rstdB := put(engine.BF16, nil2(rows*h), rows, h), put(engine.F32, nil2(rows), rows)
	b.RMSNorm(outB, rstdB, put(engine.BF16, xs, rows, h), put(engine.F32, w, h), 1e-5)
	outF, rstdF := put(engine.F32, nil2(rows*h), rows, h), put(engine.F32, nil2(rows), rows)
	b.RMSNorm(outF, rstdF, put(engine.F32, xs, rows, h), put(engine.F32, w, h), 1e-5)
	if err := errors.Join(numtest.Equal(get(outB), round(get(outF))), numtest.Equal(get(rstdB), get(rstdF))); err != nil {
		t.Errorf("BF16 RMSNorm is not the F32 one rounded: %v", err)
	}
	g, u := round(randn(n)), round(randn(n))
	sB, sF := put(engine.BF16, nil2(n), n), put(engine.F32, nil2(n), n)
	b.SwiGLU(sB, put(engine.BF16, g, n), put(engine.BF16, u, n))
	b.SwiGLU(sF, put(engine.F32, g, n), put(engine.F32, u, n))
	if err := numtest.Equal(get(sB), round(get(sF))); err != nil {
		t.Errorf("BF16 SwiGLU is not the F32 one rounded: %v", err)
	}

	// An F32 A by a BF16 B (a frozen weight) is the F32 product with B
	// widened: the bits of the F32 GEMM on the widened values.
	for _, tB := range []bool{false, true} {
		q := p
		bt := bb
		if tB {
			q.TransB, q.LDB = true, K
			bt = make([]float32, K*N)
			for l := range K {
				for j := range N {
					bt[j*K+l] = bb[l*N+j]
				}
			}
		}
		mixed, wide := put(engine.F32, nil2(M*N), M, N), put(engine.F32, nil2(M*N), M, N)
		b.Gemm(q, put(engine.F32, a, M, K), put(engine.BF16, bt, len(bt)), mixed)
		b.Gemm(q, put(engine.F32, a, M, K), put(engine.F32, bt, len(bt)), wide)
		if err := numtest.Equal(get(mixed), get(wide)); err != nil {
			t.Errorf("F32·BF16 GEMM (transB %v) differs from the F32 GEMM on the widened B: %v", tB, err)
		}
	}

	// Mixed dtypes the cuBLAS path cannot take are refused.
	for _, c := range []struct{ a, b, c engine.DType }{{engine.BF16, engine.F32, engine.F32}, {engine.F32, engine.BF16, engine.BF16}} {
		func() {
			defer func() {
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), "must share a dtype") {
					t.Errorf("%v·%v→%v GEMM: %v", c.a, c.b, c.c, p)
				}
			}()
			b.Gemm(p, put(c.a, a, M, K), put(c.b, bb, K, N), put(c.c, nil2(M*N), M, N))
		}()
	}
}

// TestGemmBF16BEmulated checks the F32·BF16 GEMM, B widened into a
// scratch buffer, against the F32 GEMM with B widened on the host, bit for
// bit: every transpose, padded rows, batches with B's own stride or a
// shared B (stride 0), and a scratch buffer that grows and is reused.
func TestGemmBF16BEmulated(t *testing.T) {
	fakeCUDA(t)
	b := newFake(t, 0, GemmF32)
	r := rand.New(rand.NewPCG(9, 9))
	put := func(dt engine.DType, x []float32) *engine.Tensor {
		tt := b.Alloc(dt, len(x))
		t.Cleanup(func() { b.Free(tt) })
		b.Upload(tt, x)
		return tt
	}
	randn := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		return x
	}
	for i, s := range []struct{ m, n, k, batch int }{{3, 5, 7, 1}, {17, 9, 33, 3}, {40, 70, 300, 2}, {5, 6, 4, 4}} {
		for tr := 0; tr < 4; tr++ {
			tA, tB := tr&1 != 0, tr&2 != 0
			ar, ac, br, bc := engine.GemmParams{TransA: tA, TransB: tB, M: s.m, N: s.n, K: s.k}.Stored()
			p := engine.GemmParams{TransA: tA, TransB: tB, M: s.m, N: s.n, K: s.k, Alpha: 0.5, Beta: 0.25,
				LDA: ac + 1, LDB: bc + tr%3, LDC: s.n + 2, Batch: s.batch}
			p.StrideA, p.StrideB, p.StrideC = ar*p.LDA+3, br*p.LDB+1, s.m*p.LDC+1
			if (i+tr)%2 == 1 {
				p.StrideB = 0
			}
			nb := (s.batch-1)*p.StrideB + br*p.LDB
			bv := randn(nb)
			wide := make([]float32, nb)
			for j, v := range bv {
				wide[j] = checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(v))
			}
			A, c0 := put(engine.F32, randn(s.batch*p.StrideA)), randn(s.batch*p.StrideC)
			got, want := put(engine.F32, c0), put(engine.F32, c0)
			b.Gemm(p, A, put(engine.BF16, bv), got)
			b.Gemm(p, A, put(engine.F32, wide), want)
			g, w := make([]float32, len(c0)), make([]float32, len(c0))
			b.Download(g, got)
			b.Download(w, want)
			if err := numtest.Equal(g, w); err != nil {
				t.Errorf("%+v: F32·BF16 differs from F32·(widened B): %v", p, err)
			}
		}
	}
}

func nil2(n int) []float32 { return make([]float32, n) }

// TestKernelCacheEmulated: the first backend compiles and stores the
// kernels; the next one loads them from the cache.
func TestKernelCacheEmulated(t *testing.T) {
	dir := fakeCUDA(t)
	cache := t.TempDir()
	b1, err := New(Options{LibDir: dir, CacheDir: cache, GEMM: GemmF32})
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	info := b1.Info()
	if info.KernelsCached || info.KernelTarget != "sm_90" || info.NVRTCVersion != "12.4" || info.Major != 9 {
		t.Errorf("first backend: %+v", info)
	}
	files, _ := filepath.Glob(filepath.Join(cache, "*.cubin"))
	if len(files) != 1 {
		t.Fatalf("cache holds %v", files)
	}
	b2, err := New(Options{LibDir: dir, CacheDir: cache, GEMM: GemmF32, Device: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if !b2.Info().KernelsCached || b2.Device() != (engine.Device{Kind: engine.CUDA, Index: 1}) {
		t.Errorf("second backend: %+v", b2.Info())
	}
	if !strings.HasPrefix(b2.Name(), "cuda:1(memtrain fake GPU 1") || !strings.HasSuffix(b2.Name(), "sm_90, gemm f32)") {
		t.Errorf("name %q", b2.Name())
	}
	// A corrupt cache file is not the driver's problem: it is refused at
	// load and the error says which target it was for.
	if err := os.WriteFile(files[0], []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{LibDir: dir, CacheDir: cache, GEMM: GemmF32}); err == nil || !strings.Contains(err.Error(), "cuModuleLoadData") {
		t.Errorf("corrupt cache: %v", err)
	}
	// The mixed-precision paths compile without --fmad=false: another
	// program, cached in a file of its own.
	b3, err := New(Options{LibDir: dir, CacheDir: cache, GEMM: GemmBF16})
	if err != nil {
		t.Fatal(err)
	}
	defer b3.Close()
	if files, _ := filepath.Glob(filepath.Join(cache, "*.cubin")); len(files) != 2 || b3.Info().KernelsCached {
		t.Errorf("after a bf16 backend the cache holds %v (kernels cached: %v), want a second program", files, b3.Info().KernelsCached)
	}
	if _, err := New(Options{LibDir: dir, Device: 8}); err == nil || err.Error() != "cuda: device cuda:8 requested, but 8 CUDA device(s) found" {
		t.Errorf("device out of range: %v", err)
	}
}

// TestFreeMemoryEmulated: FreeMemory reads cuMemGetInfo in the device's
// primary context, beside a backend holding the same context or not, and
// refuses a device that is not there.
func TestFreeMemoryEmulated(t *testing.T) {
	dir := fakeCUDA(t)
	for _, tt := range []struct {
		env         string // MEMTRAIN_FAKECUDA_FREE; "": the fake's 8 GiB
		device      int
		free, total int64
	}{
		{"", 0, 8 << 30, 16 << 30},
		{"12345", 3, 12345, 16 << 30},
	} {
		t.Setenv("MEMTRAIN_FAKECUDA_FREE", tt.env)
		if tt.env == "" {
			os.Unsetenv("MEMTRAIN_FAKECUDA_FREE")
		}
		free, total, err := FreeMemory(dir, tt.device)
		if err != nil || free != tt.free || total != tt.total {
			t.Errorf("cuda:%d: %d free of %d, %v; want %d of %d", tt.device, free, total, err, tt.free, tt.total)
		}
	}
	b, err := New(Options{LibDir: dir, GEMM: GemmF32})
	if err != nil {
		t.Fatal(err)
	}
	if free, _, err := FreeMemory(dir, 0); err != nil || free <= 0 {
		t.Errorf("beside a backend: %d, %v", free, err)
	}
	// The backend's context survives the query's release of it.
	x := b.Alloc(engine.F32, 4)
	b.Fill(x, 2)
	got := make([]float32, 4)
	b.Download(got, x)
	if got[3] != 2 {
		t.Errorf("backend after FreeMemory read %v", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := FreeMemory(dir, 8); err == nil || err.Error() != "cuda: device cuda:8 requested, but 8 CUDA device(s) found" {
		t.Errorf("device out of range: %v", err)
	}
}

// TestBackendEmulated covers the backend's own contracts: concurrent use,
// misuse that panics with a message, and Close.
func TestBackendEmulated(t *testing.T) {
	fakeCUDA(t)
	testBackend(t, newFake)
}

func testBackend(t *testing.T, newBackend maker) {
	b := newBackend(t, 0, GemmF32)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := b.Alloc(engine.F32, 100)
			defer b.Free(x)
			for i := range 20 {
				v := float32(g*100 + i)
				b.Fill(x, v)
				out := make([]float32, 100)
				b.Download(out, x)
				if out[99] != v {
					t.Errorf("goroutine %d read %v, want %v", g, out[99], v)
				}
			}
		}()
	}
	wg.Wait()

	panics := func(what, want string, f func()) {
		t.Helper()
		defer func() {
			if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), want) {
				t.Errorf("%s: panic %v, want one containing %q", what, p, want)
			}
		}()
		f()
	}
	x := b.Alloc(engine.F32, 10)
	ids := b.Alloc(engine.I32, 3)
	b.UploadInt32(ids, []int32{1, 2, 10})
	panics("id out of range", "ids[2] = 10 is outside the table's 5 rows", func() {
		b.Embedding(b.Alloc(engine.F32, 3, 2), x.Reshape(5, 2), ids)
	})
	other := cpu.New(cpu.Options{Threads: 1}).Alloc(engine.F32, 10)
	panics("CPU tensor", "is not a CUDA tensor", func() { b.Copy(x, other) })
	b.Free(x)
	panics("use after Free", "freed tensor", func() { b.Fill(x, 1) })
	panics("double Free", "already freed", func() { b.Free(x) })

	// Argmax writes ids on the device: the host copy is refreshed.
	logits := b.Alloc(engine.F32, 2, 3)
	b.Upload(logits, []float32{0, 5, 1, 7, 2, 3})
	out := b.Alloc(engine.I32, 2)
	b.Argmax(out, logits)
	got := make([]int32, 2)
	b.DownloadInt32(got, out)
	if !slices.Equal(got, []int32{1, 0}) {
		t.Errorf("Argmax gave %v", got)
	}
	// Overlapping Copy within one storage.
	s := b.Alloc(engine.F32, 6)
	b.Upload(s, []float32{1, 2, 3, 4, 5, 6})
	b.Copy(s.View(1, 4), s.View(0, 4))
	all := make([]float32, 6)
	b.Download(all, s)
	if err := numtest.Equal(all, []float32{1, 1, 2, 3, 4, 6}); err != nil {
		t.Errorf("overlapping Copy: %v", err)
	}

	c := newBackend(t, 0, GemmF32)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	panics("closed backend", "closed backend", func() { c.Alloc(engine.F32, 1) })
}

// TestNCCLEmulated runs the communicators' conformance suite on NCCL
// communicators over fake GPUs, one process driving them all
// (ncclCommInitAll), then a group made from a unique id.
func TestNCCLEmulated(t *testing.T) {
	testNCCL(t, newFake, fakeCUDA(t), 8)
}

// testNCCL runs the suite over devices GPUs (at least 2), then makes a
// group of min(3, devices) ranks from a unique id.
func testNCCL(t *testing.T, newBackend maker, libDir string, devices int) {
	backends := make([]*Backend, devices)
	for i := range backends {
		backends[i] = newBackend(t, i, GemmF32)
	}
	var sizes []int
	for _, n := range []int{1, 2, 3, 4, 8} {
		if n <= devices {
			sizes = append(sizes, n)
		}
	}
	factory := func(t *testing.T, n int, opts ...comm.Option) []comm.Comm {
		comms, err := NewNCCLGroup(backends[:n], opts...)
		if err != nil {
			t.Fatal(err)
		}
		return comms
	}
	commtest.Run(t, factory, commtest.Config{Backend: func(rank int) engine.Backend { return backends[rank] }, Sizes: sizes})

	t.Run("UniqueID", func(t *testing.T) {
		id, err := NewNCCLUniqueID(libDir)
		if err != nil {
			t.Fatal(err)
		}
		ranks := min(3, devices)
		comms := make([]comm.Comm, ranks)
		errs := make([]error, ranks)
		var wg sync.WaitGroup
		for r := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				comms[r], errs[r] = NewNCCL(backends[r], id, r, ranks, comm.WithName("ids"))
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		for r := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := comms[r]
				x := backends[r].Alloc(engine.F32, 5)
				defer backends[r].Free(x)
				backends[r].Fill(x, float32(r+1))
				if err := c.AllReduce(x); err != nil {
					t.Error(err)
				}
				out := make([]float32, 5)
				backends[r].Download(out, x)
				if want := float32(ranks * (ranks + 1) / 2); out[4] != want {
					t.Errorf("rank %d: all-reduce gave %v, want %v", r, out, want)
				}
				if c.Group() != "ids" || c.Rank() != r || c.Size() != ranks {
					t.Errorf("rank %d: group %q rank %d size %d", r, c.Group(), c.Rank(), c.Size())
				}
				if err := c.Close(); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	})
}

// TestCublasWorkspaceEmulated: cuBLAS gets its workspace once, at the
// first GEMM, from the caching allocator (the fake checks it is device
// memory), and later GEMMs allocate nothing.
func TestCublasWorkspaceEmulated(t *testing.T) {
	fakeCUDA(t)
	b := newFake(t, 0, GemmF32)
	workspace := func() devBuffer {
		var ws devBuffer
		if err := b.w.try(func() error { ws = b.scratch[scratchCublas]; return nil }); err != nil {
			t.Fatal(err)
		}
		return ws
	}
	if ws := workspace(); ws.ptr != 0 {
		t.Fatalf("a workspace before any GEMM: %+v", ws)
	}
	x := b.Alloc(engine.BF16, 8, 8)
	y := b.Alloc(engine.F32, 8, 8)
	defer b.Free(x)
	defer b.Free(y)
	p := engine.GemmParams{M: 8, N: 8, K: 8, Alpha: 1, LDA: 8, LDB: 8, LDC: 8}
	b.Gemm(p, x, x, y)
	ws := workspace()
	if ws.ptr == 0 || ws.bytes < cublasWorkspaceBytes || !ws.cached {
		t.Fatalf("after a GEMM, workspace %+v; want %d bytes from the allocator", ws, cublasWorkspaceBytes)
	}
	before := b.Counters()
	b.Gemm(p, x, x, y)
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if c := b.Counters().Sub(before); c.Allocs != 0 || workspace() != ws {
		t.Errorf("a second GEMM: %+v, workspace %+v (was %+v)", c, workspace(), ws)
	}
}
