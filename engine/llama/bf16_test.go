package llama

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// Mixed-precision tolerances, from bf16's unit roundoff u = 2⁻⁸ ≈ 0.0039
// (enginetest's bf16Unit). On the way from the loss to a weight's
// gradient a value is rounded to bf16 about k ≈ 30 times (the forward's
// ten saved activations of each of L = 2 layers, the backward's activation
// gradients, the weight copies), each a relative error of at most u and
// about u/√3 in RMS: were they independent, the gradients would be off
// by √k·u/√3 ≈ 3u in RMS. They are not (the backward reads the forward's
// rounded values, and the layers feed each other), and on these tiny
// models (H = 16, weights of scale 0.3) the measured errors are 2–4
// times that. The tolerances below are about 1.5–2 times the measured
// worst, in units of u:
//
//   - The loss: a mean over many tokens of −log p whose logits' errors
//     average out: bf16LossTol = u/2 relative (measured 1.3e-4–1.5e-4).
//   - All gradients together: ‖g − g₃₂‖₂/‖g₃₂‖₂ ≤ bf16GradTotalTol = 16u
//     ≈ 0.0625 (measured 0.032–0.043, 8–11u).
//   - Each gradient tensor: ‖g − g₃₂‖₂/‖g₃₂‖₂ ≤ bf16GradL2Tol = 24u ≈
//     0.094 (measured 0.011–0.074; the worst a norm weight of the tied
//     model, whose gradient is a sum over tokens that largely cancels),
//     and max|g − g₃₂|/max|g₃₂| ≤ bf16GradMaxTol = 40u ≈ 0.16 (measured
//     0.011–0.118, the same tensor; an earlier attempt measured 0.056).
const (
	bf16Unit         = 1.0 / 256
	bf16LossTol      = bf16Unit / 2
	bf16GradL2Tol    = 24 * bf16Unit
	bf16GradMaxTol   = 40 * bf16Unit
	bf16GradTotalTol = 16 * bf16Unit
)

// An adapter's gradient is a small matrix (r × in, out × r) reached
// through the rounded rank-r bottleneck (z and dz, r values a token), so
// its errors average over fewer roundings than a full weight's: its own
// per-tensor tolerances, about 1.7 times the measured worst (0.034–0.087
// in L2, 0.039–0.148 of the largest element, TestBF16LoRAStepMatchesF32).
const (
	bf16LoRAGradL2Tol  = 40 * bf16Unit
	bf16LoRAGradMaxTol = 64 * bf16Unit
)

// TestBF16StepMatchesF32: a training pass with bf16 activations and bf16
// weight copies gives the float32 pass's loss and gradients within the
// stated tolerances, tied and untied, with and without recomputation; a
// forward-only pass the same loss; and the float32 master weights and
// their gradients stay float32.
//
// The wide case's products all exceed the skinny path and half of the
// pair kernel's tile (hidden 64, MLP 96, vocabulary 80, 48 tokens), so on
// a CPU with AVX512_BF16 they run on it (gemm.GemmBF16), as a real
// model's do; the tiny one's mostly widen.
func TestBF16StepMatchesF32(t *testing.T) {
	wide := testConfig(false, 2)
	wide.HiddenSize, wide.IntermediateSize, wide.VocabSize = 64, 96, 80
	wide.InitializerRange = 0.15 // the tiny one's activations: 0.3·√(16/64)
	for _, tie := range []bool{false, true} {
		for _, recompute := range recomputeModes {
			cfg, batch := testConfig(tie, 2), randomBatch(testConfig(tie, 2), 3, 12, 4)
			if !tie && recompute != RecomputeNone {
				cfg, batch = wide, randomBatch(wide, 2, 24, 4)
			}
			ref := randomModel(t, newBackend(2), cfg, Options{}, 6)
			half := randomModel(t, newBackend(2), cfg, Options{Activations: engine.BF16, Recompute: recompute}, 6)
			for _, p := range half.Params() {
				if p.Value.DType() != engine.F32 || p.Grad.DType() != engine.F32 {
					t.Fatalf("%s: master %v, gradient %v; want F32", p.Name, p.Value, p.Grad)
				}
				if want := len(p.Full) == 2; (p.Copy != nil) != want || (want && p.Copy.DType() != engine.BF16) {
					t.Fatalf("%s: copy %v", p.Name, p.Copy)
				}
			}
			checkBF16Pass(t, fmt.Sprintf("tie=%v recompute=%v hidden=%d", tie, recompute, cfg.HiddenSize), ref, half, batch, bf16GradL2Tol, bf16GradMaxTol)
			ref.Free()
			half.Free()
		}
	}
}

// checkBF16Pass runs a training pass of batch on ref (float32
// activations) and half (bf16) from zeroed gradients, and checks half's
// loss and the gradients of its trainable parameters against ref's
// within the mixed-precision tolerances (l2Tol and maxTol for each
// gradient tensor), and a forward-only pass's loss.
func checkBF16Pass(t *testing.T, what string, ref, half *Model, batch Batch, l2Tol, maxTol float64) {
	t.Helper()
	checkBF16PassTols(t, what, ref, half, batch, func(string) (float64, float64) { return l2Tol, maxTol })
}

// checkBF16PassTols is checkBF16Pass with each gradient tensor's
// tolerances by name.
func checkBF16PassTols(t *testing.T, what string, ref, half *Model, batch Batch, tols func(name string) (l2, max float64)) {
	t.Helper()
	ref.ZeroGrads()
	half.ZeroGrads()
	scale := 1 / float32(len(batch.IDs))
	l32, err := ref.ForwardBackward(batch, scale)
	if err != nil {
		t.Fatal(err)
	}
	l16, err := half.ForwardBackward(batch, scale)
	if err != nil {
		t.Fatal(err)
	}
	if err := numtest.Scalar(l16.Mean(), l32.Mean(), numtest.Tol{Rel: bf16LossTol}); err != nil || l16.Weight != l32.Weight {
		t.Errorf("%s: bf16 loss (weight %v) against f32 (weight %v): %v", what, l16.Weight, l32.Weight, err)
	}
	// Each tensor within l2Tol in L2 and maxTol of its largest element, and
	// all of them together within bf16GradTotalTol; the worst are logged.
	g32, g16 := trainableGrads(ref), trainableGrads(half)
	if len(g16) != len(g32) {
		t.Errorf("%s: %d gradients, want %d", what, len(g16), len(g32))
	}
	for _, name := range slices.Sorted(maps.Keys(g32)) {
		l2Tol, maxTol := tols(name)
		g, w := g16[name], g32[name]
		if err := numtest.CloseL2(g, w, l2Tol); err != nil {
			t.Errorf("%s: gradients: tensor %q: L2: %v", what, name, err)
		} else if err := numtest.CloseMax(g, w, maxTol); err != nil {
			t.Errorf("%s: gradients: tensor %q: %v", what, name, err)
		}
	}
	worstMax, worstL2, maxName, l2Name := 0.0, 0.0, "", ""
	var all16, all32 []float32
	for _, name := range slices.Sorted(maps.Keys(g32)) {
		d, err := numtest.Measure(g16[name], g32[name])
		if err != nil {
			continue // reported above
		}
		if d.MaxRel > worstMax {
			worstMax, maxName = d.MaxRel, name
		}
		if d.L2 > worstL2 {
			worstL2, l2Name = d.L2, name
		}
		all16, all32 = append(all16, g16[name]...), append(all32, g32[name]...)
	}
	if err := numtest.CloseL2(all16, all32, bf16GradTotalTol); err != nil {
		t.Errorf("%s: all gradients together: %v", what, err)
	}
	total, _ := numtest.Measure(all16, all32)
	t.Logf("%s: loss %.6f vs %.6f; gradients: all %.3g (L2), worst %s %.3g (L2), %s %.3g (max)",
		what, l16.Mean(), l32.Mean(), total.L2, l2Name, worstL2, maxName, worstMax)
	e32, err := ref.Evaluate(batch)
	if err != nil {
		t.Fatal(err)
	}
	e16, err := half.Evaluate(batch)
	if err != nil {
		t.Fatal(err)
	}
	if err := numtest.Scalar(e16.Mean(), e32.Mean(), numtest.Tol{Rel: bf16LossTol}); err != nil {
		t.Errorf("%s: bf16 evaluation against f32: %v", what, err)
	}
}

// trainableGrads are the gradients of m's trainable parameters by name.
func trainableGrads(m *Model) map[string][]float32 {
	out := map[string][]float32{}
	for _, p := range m.Trainable() {
		out[p.Name] = download(m, p.Grad)
	}
	return out
}

// adamWState is what the tests' AdamW steps of m take: zeroed moments for
// each trainable tensor (its bf16 copy refreshed by the step) and the
// clipping control {1, 1} (no clipping, finite); free releases them.
func adamWState(m *Model) (ts []engine.AdamWTensors, ctl *engine.Tensor, free func()) {
	b := m.Backend()
	for _, p := range m.Trainable() {
		ts = append(ts, engine.AdamWTensors{Param: p.Value, Grad: p.Grad, Copy: p.Copy,
			M: b.Alloc(engine.F32, p.Value.Shape...), V: b.Alloc(engine.F32, p.Value.Shape...)})
	}
	ctl = b.Alloc(engine.F32, 2)
	b.Upload(ctl, []float32{1, 1})
	return ts, ctl, func() {
		for _, x := range ts {
			b.Free(x.M)
			b.Free(x.V)
		}
		b.Free(ctl)
	}
}

// trainSteps trains m for steps AdamW steps (one fused AdamWStep each,
// refreshing the bf16 copies) on batch, and returns the last loss.
func trainSteps(t *testing.T, m *Model, batch Batch, steps int) float64 {
	t.Helper()
	b := m.Backend()
	ts, ctl, free := adamWState(m)
	defer free()
	var loss Loss
	for s := 1; s <= steps; s++ {
		m.ZeroGrads()
		var err error
		if loss, err = m.ForwardBackward(batch, 1/float32(len(batch.IDs))); err != nil {
			t.Fatal(err)
		}
		b.AdamWStep(ts, engine.AdamWParams{LR: 3e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: s}, 0, ctl)
	}
	return loss.Mean()
}

// TestBF16TrainsAndGenerates: trained on one batch, a bf16 model's loss
// falls as the float32 model's does, its weight copies stay the rounded
// masters (the step refreshes them), and its greedy continuations of
// the batch's prompts are the float32 model's.
func TestBF16TrainsAndGenerates(t *testing.T) {
	cfg := testConfig(false, 2)
	batch := randomBatch(cfg, 2, 16, 8)
	for i := range batch.Weights {
		batch.Weights[i] = 1
		batch.Targets[i] = batch.IDs[(i+1)%len(batch.IDs)] // learnable: the next id
	}
	ref := randomModel(t, newBackend(2), cfg, Options{}, 2)
	defer ref.Free()
	half := randomModel(t, newBackend(2), cfg, Options{Activations: engine.BF16}, 2)
	defer half.Free()
	const steps = 40
	l32, l16 := trainSteps(t, ref, batch, steps), trainSteps(t, half, batch, steps)
	t.Logf("after %d steps: loss %.4f (bf16), %.4f (f32)", steps, l16, l32)
	// Both have learned the batch (from ln V ≈ 3.1); bf16's rounding of
	// the logits leaves its loss above float32's.
	if limit := 0.05 * math.Log(float64(cfg.VocabSize)); !(l16 < limit) || !(l32 < limit) {
		t.Errorf("after %d steps: bf16 loss %v, f32 %v", steps, l16, l32)
	}
	checkCopiesRounded(t, "after the steps", half, half.Params())
	sameGreedy(t, half, ref, [][]int32{batch.IDs[:4], batch.IDs[16:20]}, 6, "the bf16 model", "the f32 one")
}

// sameGreedy checks that a's greedy tokens after prompts are b's.
func sameGreedy(t *testing.T, a, b *Model, prompts [][]int32, n int, aName, bName string) {
	t.Helper()
	ga, err := a.Generate(prompts, GenerateOptions{MaxNewTokens: n})
	if err != nil {
		t.Fatal(err)
	}
	gb, err := b.Generate(prompts, GenerateOptions{MaxNewTokens: n})
	if err != nil {
		t.Fatal(err)
	}
	for i := range gb {
		if !slices.Equal(ga[i], gb[i]) {
			t.Errorf("prompt %d: %s generated %v, %s %v", i, aName, ga[i], bName, gb[i])
		}
	}
}

// TestBF16LoRAStepMatchesF32: adapters train in mixed precision. On a
// bf16 base, a pass with bf16 activations, bf16 adapter copies and bf16
// adapter activations gives the float32 pass's loss and adapter
// gradients within the mixed-precision tolerances: tied and untied, with
// and without recomputation and dropout, and on the wide shapes that run
// the bf16 pair kernel. The adapters' masters and gradients stay F32,
// their copies BF16; the base has no copies.
//
// The adapters are those of a fine-tune under way: A at 0.3 (PEFT's
// initial bound here is 1/√16 = 0.25), B at 0.03, so s·B·A is about a
// tenth of the base weights. With B at 0.3 as well the adapters outweigh
// the base and the logits grow with them; bf16's error, relative to each
// value, grows with the logits: measured 3e-3 in the loss and 0.32 in
// all the gradients (L2) for the tied model. At 0.03 the loss is within
// 6.4e-5–7e-4 and all the gradients within 0.021–0.048 (the full
// model's, without adapters: 1.3e-4–2.2e-4 and 0.023–0.043).
func TestBF16LoRAStepMatchesF32(t *testing.T) {
	wide := testConfig(false, 2)
	wide.HiddenSize, wide.IntermediateSize, wide.VocabSize = 64, 96, 80
	wide.InitializerRange = 0.15
	for _, tc := range []struct {
		tie       bool
		recompute Recompute
		wide      bool
		dropout   float64
	}{{false, RecomputeNone, false, 0}, {true, RecomputeFull, false, 0}, {false, RecomputeFull, false, 0.3}, {true, RecomputeSelective, false, 0.3},
		{false, RecomputeNone, true, 0.1}, {false, RecomputeSelective, true, 0.1}} {
		cfg, batch := testConfig(tc.tie, 2), randomBatch(testConfig(tc.tie, 2), 3, 12, 4)
		if tc.wide {
			cfg, batch = wide, randomBatch(wide, 2, 24, 4)
		}
		batch.Keys = []uint64{5, 9, 11}[:batch.B]
		a := testAdapter(4, false, tc.dropout)
		ref := scaledLoRAModel(t, newBackend(2), cfg, Options{LoRA: a, BaseDType: engine.BF16}, 6, 0.3, 0.03)
		half := scaledLoRAModel(t, newBackend(2), cfg, Options{LoRA: a, BaseDType: engine.BF16, Activations: engine.BF16, Recompute: tc.recompute}, 6, 0.3, 0.03)
		for _, p := range half.Trainable() {
			if p.Value.DType() != engine.F32 || p.Grad.DType() != engine.F32 || p.Copy == nil || p.Copy.DType() != engine.BF16 {
				t.Fatalf("%s: master %v, gradient %v, copy %v; want F32, F32, BF16", p.Name, p.Value, p.Grad, p.Copy)
			}
		}
		for _, p := range half.Params() {
			if p.Copy != nil || p.Grad != nil {
				t.Fatalf("%s: a frozen base weight has a copy %v or a gradient %v", p.Name, p.Copy, p.Grad)
			}
		}
		what := fmt.Sprintf("tie=%v recompute=%v dropout=%v hidden=%d", tc.tie, tc.recompute, tc.dropout, cfg.HiddenSize)
		checkBF16Pass(t, what, ref, half, batch, bf16LoRAGradL2Tol, bf16LoRAGradMaxTol)
		ref.Free()
		half.Free()
	}
}

// TestBF16LoRATrainsAndGenerates: trained on one batch, a bf16 LoRA
// model's loss falls as the float32 one's does, its adapter copies stay
// the rounded masters (the step, InitAdapters and LoadAdapters refresh
// them), and its greedy continuations are the float32 model's.
func TestBF16LoRATrainsAndGenerates(t *testing.T) {
	cfg := testConfig(false, 2)
	batch := randomBatch(cfg, 2, 16, 8)
	for i := range batch.Weights {
		batch.Weights[i] = 1
		batch.Targets[i] = batch.IDs[(i+1)%len(batch.IDs)]
	}
	a := testAdapter(8, false, 0)
	ref := randomModel(t, newBackend(2), cfg, Options{LoRA: a, BaseDType: engine.BF16}, 2)
	defer ref.Free()
	half := randomModel(t, newBackend(2), cfg, Options{LoRA: a, BaseDType: engine.BF16, Activations: engine.BF16}, 2)
	defer half.Free()
	copiesRounded := func(what string) {
		t.Helper()
		for _, p := range half.Trainable() {
			if p.Copy == nil {
				t.Fatalf("%s: adapter %s has no bf16 copy", what, p.Name)
			}
		}
		checkCopiesRounded(t, what, half, half.Trainable())
	}
	ref.InitAdapters(3)
	half.InitAdapters(3)
	copiesRounded("InitAdapters")
	// B = 0: the adapters add zeros, so the logits are the bf16 full
	// model's on the same (rounded) weights, bit for bit.
	full := randomModel(t, newBackend(2), cfg, Options{Activations: engine.BF16}, 2)
	defer full.Free()
	got, err := half.Logits(batch)
	if err != nil {
		t.Fatal(err)
	}
	want, err := full.Logits(batch)
	if err != nil {
		t.Fatal(err)
	}
	if err := numtest.Equal(got, want); err != nil {
		t.Errorf("initialised adapters on a bf16 base changed the bf16 model's logits: %v", err)
	}
	const steps = 40
	l0, err := half.Evaluate(batch)
	if err != nil {
		t.Fatal(err)
	}
	l32, l16 := trainSteps(t, ref, batch, steps), trainSteps(t, half, batch, steps)
	t.Logf("after %d steps: loss %.4f (bf16), %.4f (f32), from %.4f", steps, l16, l32, l0.Mean())
	if !(l16 < 0.5*l0.Mean()) || !(l32 < 0.5*l0.Mean()) {
		t.Errorf("after %d steps: bf16 loss %v, f32 %v, from %v: want both below half", steps, l16, l32, l0.Mean())
	}
	if err := numtest.Scalar(l16, l32, numtest.Tol{Abs: 0.05, Rel: 0.1}); err != nil {
		t.Errorf("after %d steps: bf16 loss against f32: %v", steps, err)
	}
	copiesRounded("the steps")
	sameGreedy(t, half, ref, [][]int32{batch.IDs[:4], batch.IDs[16:20]}, 6, "the bf16 LoRA model", "the f32 one")
	if err := half.LoadAdapters(tensorReader(ref.AdapterTensors())); err != nil {
		t.Fatal(err)
	}
	copiesRounded("LoadAdapters")
}

// TestBF16Refusals: what mixed precision cannot compute is refused when
// the model is made, with one line saying why.
func TestBF16Refusals(t *testing.T) {
	cfg := testConfig(false, 2)
	for _, tc := range []struct {
		name string
		opt  Options
		want string
	}{
		{"adapters on a float32 base", Options{Activations: engine.BF16, LoRA: testAdapter(2, false, 0)}, "bf16 activations multiply the frozen base in bf16: hold it in bf16, not f32"},
		{"an i32 dtype", Options{Activations: engine.I32}, "activations in i32 (want f32 or bf16)"},
	} {
		_, err := New(newBackend(1), cfg, tc.opt)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want one line containing %q", tc.name, err, tc.want)
		}
	}
	// On grids every shape is accepted, with adapters (and their dropout)
	// too (TestGridBF16Training, TestLoRABF16OnGrids).
	for _, tc := range []struct {
		shape comm.Grid
		lora  *checkpoints.AdapterConfig
		want  string
	}{
		{comm.Grid{Data: 1, X: 2, Y: 1, Z: 1}, testAdapter(2, false, 0.1), ""},
		{comm.Grid{Data: 1, X: 1, Y: 1, Z: 2}, testAdapter(2, false, 0.1), ""},
		{comm.Grid{Data: 1, X: 2, Y: 1, Z: 2}, nil, ""},
	} {
		err := launch.Local(tc.shape, parallel.Overlap{}, func(g *parallel.Grid) error {
			opt := Options{Activations: engine.BF16, Parallel: g, LoRA: tc.lora}
			if tc.lora != nil {
				opt.BaseDType = engine.BF16
			}
			m, err := New(newBackend(1), cfg, opt)
			if err == nil {
				m.Free()
			}
			return err
		})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v, adapters %v: %v", tc.shape, tc.lora != nil, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v, adapters with dropout: %v; want an error containing %q", tc.shape, err, tc.want)
		}
	}
}

// TestBF16DataParallel: data parallelism alone works in mixed precision:
// two ranks, each with half the batch, sum the gradients of one rank
// with all of it (the bf16 roundings are per token, so only the order of
// the weight gradients' float32 sums differs).
func TestBF16DataParallel(t *testing.T) {
	cfg := testConfig(false, 2)
	batch := randomBatch(cfg, 4, 6, 3)
	w := checkpoints.RandomWeights(cfg, 5)
	one, err := New(newBackend(1), cfg, Options{Activations: engine.BF16})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Free()
	if err := one.SetWeights(w); err != nil {
		t.Fatal(err)
	}
	scale := 1 / float32(len(batch.IDs))
	if _, err := one.ForwardBackward(batch, scale); err != nil {
		t.Fatal(err)
	}
	want := gradsOf(one)
	err = launch.Local(comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}, parallel.AllOverlap(), func(g *parallel.Grid) error {
		m, err := New(newBackend(1), cfg, Options{Activations: engine.BF16, Parallel: g})
		if err != nil {
			return err
		}
		defer m.Free()
		if err := m.SetWeights(w); err != nil {
			return err
		}
		d := g.At.Data
		if _, err := m.ForwardBackward(sliceBatch(batch, 2*d, 2*d+2), scale); err != nil {
			return err
		}
		if err := m.ReduceGradients(); err != nil {
			return err
		}
		got := gradsOf(m)
		if err := numtest.EachClose(got, want, numtest.Tol{Max: 1e-5}); err != nil {
			t.Errorf("rank %d: gradients against one rank's: %v", d, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sliceReader is a parallel.SliceReader over full-shape tensors in memory.
type sliceReader map[string]checkpoints.Tensor

func (r sliceReader) ReadFloat32(name string) ([]float32, error) {
	return append([]float32(nil), r[name].Data...), nil
}

func (r sliceReader) ReadSlice(name string, r0, r1, c0, c1 int) ([]float32, error) {
	t := r[name]
	cols := t.Shape[len(t.Shape)-1]
	var out []float32
	for i := r0; i < r1; i++ {
		out = append(out, t.Data[i*cols+c0:i*cols+c1]...)
	}
	return out, nil
}

// checkCopiesRounded checks that every parameter of params with a bf16
// copy holds its master rounded to nearest even.
func checkCopiesRounded(t *testing.T, what string, m *Model, params []*engine.Param) {
	t.Helper()
	for _, p := range params {
		if p.Copy == nil {
			continue
		}
		want := download(m, p.Value)
		for i := range want {
			want[i] = checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(want[i]))
		}
		if err := numtest.Equal(download(m, p.Copy), want); err != nil {
			t.Errorf("%s: %s's bf16 copy is not its master rounded: %v", what, p.Name, err)
		}
	}
}

// TestBF16CopiesFollowTheMasters: wherever a master weight is written —
// SetWeights, LoadWeights (whole, or a block of rows at a time, as a
// checkpoint or a resume loads it) — its bf16 copy is the master rounded
// to nearest even.
func TestBF16CopiesFollowTheMasters(t *testing.T) {
	cfg := testConfig(false, 2)
	check := func(what string, m *Model) {
		t.Helper()
		checkCopiesRounded(t, what, m, m.Params())
	}
	m := randomModel(t, newBackend(1), cfg, Options{Activations: engine.BF16}, 3)
	defer m.Free()
	check("SetWeights", m)
	r := sliceReader{}
	for _, w := range checkpoints.RandomWeights(cfg, 11) {
		r[w.Name] = w
	}
	for _, chunk := range []int{0, 7} {
		m.loadChunkLimit = chunk
		if err := m.LoadWeights(r); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("LoadWeights (chunk limit %d)", chunk), m)
	}
}
