package llama

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

func testAdapter(r int, rslora bool, dropout float64, targets ...string) *checkpoints.AdapterConfig {
	if len(targets) == 0 {
		targets = checkpoints.LoRAModules()
	}
	return &checkpoints.AdapterConfig{PEFTType: "LORA", TaskType: "CAUSAL_LM", R: r, LoRAAlpha: 2 * float64(r),
		LoRADropout: dropout, TargetModules: targets, Bias: "none", UseRSLoRA: rslora}
}

// loraModel is randomModel with adapters whose A and B are both random,
// so that every adapter gradient is non-zero (and their bf16 copies, in
// mixed precision, the values rounded).
func loraModel(t *testing.T, b engine.Backend, cfg *checkpoints.Config, opt Options, seed uint64) *Model {
	t.Helper()
	return scaledLoRAModel(t, b, cfg, opt, seed, 0.3, 0.3)
}

// scaledLoRAModel is loraModel with A's values of standard deviation sa
// and B's of sb.
func scaledLoRAModel(t *testing.T, b engine.Backend, cfg *checkpoints.Config, opt Options, seed uint64, sa, sb float32) *Model {
	t.Helper()
	m := randomModel(t, b, cfg, opt, seed)
	r := rand.New(rand.NewPCG(seed, 7))
	for i, p := range m.Trainable() {
		sd := sa
		if i%2 == 1 { // B
			sd = sb
		}
		v := make([]float32, p.Value.Len())
		for i := range v {
			v[i] = sd * float32(r.NormFloat64())
		}
		b.Upload(p.Value, v)
		m.refreshCopy(p, p.Value)
	}
	return m
}

// mergedWeights is W + s·B·A in float64 for every adapted projection.
func mergedWeights(m *Model) []checkpoints.Tensor {
	w := m.Weights()
	ad := map[string][]float32{}
	for _, t := range m.AdapterTensors() {
		ad[t.Name] = t.Data
	}
	s, r := m.Adapter().Scale(), m.Adapter().R
	for i := range w {
		for l := range m.Layers {
			for _, module := range m.Adapter().TargetModules {
				path, _ := checkpoints.LoRAModulePath(module)
				if w[i].Name != checkpoints.LayerTensorName(l, path) {
					continue
				}
				A, B := ad[checkpoints.LoRATensorName(l, module, "A")], ad[checkpoints.LoRATensorName(l, module, "B")]
				out, in := w[i].Shape[0], w[i].Shape[1]
				for o := 0; o < out; o++ {
					for j := 0; j < in; j++ {
						acc := 0.0
						for k := 0; k < r; k++ {
							acc += float64(B[o*r+k]) * float64(A[k*in+j])
						}
						w[i].Data[o*in+j] = float32(float64(w[i].Data[o*in+j]) + s*acc)
					}
				}
			}
		}
	}
	return w
}

// TestLoRAEqualsMergedModel: a model with adapters computes the logits
// and greedy continuations of its base with W + s·B·A merged in.
func TestLoRAEqualsMergedModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		a    *checkpoints.AdapterConfig
		tie  bool
	}{
		{"all-untied", testAdapter(3, false, 0), false},
		{"qv-rslora-tied", testAdapter(2, true, 0, "q_proj", "v_proj", "down_proj"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(tc.tie, 2)
			b := newBackend(2)
			m := loraModel(t, b, cfg, Options{LoRA: tc.a}, 5)
			defer m.Free()
			plain, err := New(b, cfg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Free()
			if err := plain.SetWeights(mergedWeights(m)); err != nil {
				t.Fatal(err)
			}
			batch := randomBatch(cfg, 2, 7, 3)
			got, err := m.Logits(batch)
			if err != nil {
				t.Fatal(err)
			}
			want, err := plain.Logits(batch)
			if err != nil {
				t.Fatal(err)
			}
			if err := numtest.CloseMax(got, want, 1e-5); err != nil {
				t.Errorf("logits: %v", err)
			}
			sameGreedy(t, m, plain, [][]int32{{1, 2, 3}, {4, 5}}, 6, "the adapted model", "the merged one")
		})
	}
}

// TestLoRAFiniteDifferences checks the adapters' gradients against central
// differences of the loss; the base weights have none.
func TestLoRAFiniteDifferences(t *testing.T) {
	// Llama's, and the families' adapters through their variations: q and
	// k's through Qwen3's head norms, Qwen2's beside the biases, and
	// Mistral's under its window.
	cases := []struct {
		tie    bool
		family string
	}{{false, ""}, {true, ""}, {false, "qwen2"}, {true, "qwen3"}, {false, "mistral"}}
	for _, c := range cases {
		tie := c.tie
		t.Run(fmt.Sprintf("tie=%v %s", tie, c.family), func(t *testing.T) {
			cfg := testConfig(tie, 2)
			if c.family != "" {
				cfg = asFamily(cfg, c.family)
			}
			m := loraModel(t, newBackend(1), cfg, Options{LoRA: testAdapter(2, tie, 0)}, 5)
			defer m.Free()
			for _, p := range m.Params() {
				if p.Grad != nil {
					t.Fatalf("base weight %s has a gradient under adapters", p.Name)
				}
			}
			batch := randomBatch(cfg, 2, 7, 9)
			m.ZeroGrads()
			l0, err := m.ForwardBackward(batch, 1)
			if err != nil {
				t.Fatal(err)
			}
			checkFiniteDifferences(t, m, batch, l0, m.Trainable(), 3)
		})
	}
}

// TestLoRARecomputeAndDropout: recomputation gives the same gradients
// bit for bit, with and without dropout; dropout's masks are a function
// of the sequences' keys (the same keys, the same gradients; others,
// others), and evaluation never drops.
func TestLoRARecomputeAndDropout(t *testing.T) {
	cfg := testConfig(false, 2)
	batch := randomBatch(cfg, 2, 7, 9)
	run := func(recompute Recompute, dropout float64, key uint64) map[string][]float32 {
		m := loraModel(t, newBackend(2), cfg, Options{LoRA: testAdapter(2, false, dropout), Recompute: recompute}, 5)
		defer m.Free()
		m.ZeroGrads()
		b := batch
		b.Keys = []uint64{key, key + 7}
		if _, err := m.ForwardBackward(b, 1); err != nil {
			t.Fatal(err)
		}
		out := map[string][]float32{}
		for _, p := range m.Trainable() {
			out[p.Name] = download(m, p.Grad)
		}
		return out
	}
	equal := func(a, b map[string][]float32) bool { return numtest.Each(a, b, numtest.Equal[float32]) == nil }
	for _, dropout := range []float64{0, 0.3} {
		for _, r := range recomputeModes[1:] {
			if !equal(run(RecomputeNone, dropout, 1), run(r, dropout, 1)) {
				t.Errorf("dropout %v: %v recomputation changed the gradients", dropout, r)
			}
		}
	}
	if !equal(run(RecomputeNone, 0.3, 1), run(RecomputeNone, 0.3, 1)) {
		t.Error("dropout: the same key gave different gradients")
	}
	if equal(run(RecomputeNone, 0.3, 1), run(RecomputeNone, 0.3, 2)) {
		t.Error("dropout: another key gave the same gradients")
	}
	if equal(run(RecomputeNone, 0.3, 1), run(RecomputeNone, 0, 1)) {
		t.Error("dropout 0.3 gave the gradients of no dropout")
	}
	// Evaluation is deterministic and ignores dropout.
	m1 := loraModel(t, newBackend(1), cfg, Options{LoRA: testAdapter(2, false, 0.3)}, 5)
	defer m1.Free()
	m0 := loraModel(t, newBackend(1), cfg, Options{LoRA: testAdapter(2, false, 0)}, 5)
	defer m0.Free()
	l1, _ := m1.Evaluate(batch)
	l0, _ := m0.Evaluate(batch)
	if l1.Sum != l0.Sum {
		t.Errorf("evaluation with dropout %v ≠ without %v", l1.Sum, l0.Sum)
	}
}

// TestLoRAInit: PEFT's initialisation leaves the model equal to its base.
func TestLoRAInit(t *testing.T) {
	cfg := testConfig(false, 2)
	b := newBackend(1)
	m := randomModel(t, b, cfg, Options{LoRA: testAdapter(4, false, 0)}, 5)
	defer m.Free()
	m.InitAdapters(11)
	base := randomModel(t, b, cfg, Options{}, 5)
	defer base.Free()
	batch := randomBatch(cfg, 2, 7, 1)
	got, _ := m.Logits(batch)
	want, _ := base.Logits(batch)
	if err := numtest.Equal(got, want); err != nil {
		t.Errorf("initialised adapters changed the logits: %v", err)
	}
	for i, p := range m.Trainable() {
		v := download(m, p.Value)
		bound := float32(1 / math.Sqrt(float64(p.Full[1])))
		nonzero := 0
		for _, x := range v {
			if i%2 == 0 && (x < -bound || x > bound) {
				t.Fatalf("%s: %v outside ±%v", p.Name, x, bound)
			}
			if x != 0 {
				nonzero++
			}
		}
		if (i%2 == 0) != (nonzero > 0) {
			t.Errorf("%s: %d non-zero values (A random, B zero)", p.Name, nonzero)
		}
	}
}

// TestLoRAMemoryIsWhatIsAllocated: with adapters the accounting is the
// frozen base, the adapters and their workspace, as allocated.
func TestLoRAMemoryIsWhatIsAllocated(t *testing.T) {
	for _, tc := range []struct {
		recompute Recompute
		dropout   float64
		base, act engine.DType
	}{
		{RecomputeNone, 0, engine.F32, engine.F32}, {RecomputeFull, 0, engine.F32, engine.F32}, {RecomputeNone, 0.1, engine.F32, engine.F32},
		{RecomputeFull, 0.1, engine.BF16, engine.F32}, {RecomputeNone, 0, engine.BF16, engine.F32}, {RecomputeSelective, 0.1, engine.F32, engine.F32},
		{RecomputeNone, 0, engine.BF16, engine.BF16}, {RecomputeFull, 0.1, engine.BF16, engine.BF16}, {RecomputeNone, 0.1, engine.BF16, engine.BF16},
		{RecomputeSelective, 0, engine.BF16, engine.BF16},
	} {
		cfg := testConfig(true, 2)
		a := testAdapter(3, false, tc.dropout, "q_proj", "o_proj", "down_proj")
		name := fmt.Sprintf("recompute=%v/dropout=%v/base=%v/activations=%v", tc.recompute, tc.dropout, tc.base, tc.act)
		b := newBackend(1)
		m := loraModel(t, b, cfg, Options{LoRA: a, Recompute: tc.recompute, BaseDType: tc.base, Activations: tc.act}, 1)
		params := Memory(cfg, Work{LoRA: a, BaseDType: tc.base, Activations: tc.act}).Params
		if got := b.MemStats().Allocated; got != params {
			t.Errorf("%s: New allocated %d, accounted %d", name, got, params)
		}
		train := Memory(cfg, Work{LoRA: a, BaseDType: tc.base, Activations: tc.act, Train: true, Recompute: tc.recompute, Batch: 2, SeqLen: 5})
		if _, err := m.ForwardBackward(randomBatch(cfg, 2, 5, 1), 1); err != nil {
			t.Fatal(err)
		}
		if got, want := b.MemStats().Allocated, params+train.Workspace; got != want {
			t.Errorf("%s: training allocated %d, accounted %d", name, got, want)
		}
		if _, err := m.Generate([][]int32{{1, 2, 3}}, GenerateOptions{MaxNewTokens: 3}); err != nil {
			t.Fatal(err)
		}
		m.Free()
		if b.MemStats().Allocated != 0 {
			t.Errorf("%s: leaked %d bytes", name, b.MemStats().Allocated)
		}
	}
}

// TestLoRADropoutFollowsTheSequence: a sequence's masks depend on its key,
// not on its place in the batch: two passes over the halves of a batch
// accumulate the gradients of one pass over the whole.
func TestLoRADropoutFollowsTheSequence(t *testing.T) {
	cfg := testConfig(false, 2)
	batch := randomBatch(cfg, 4, 6, 9)
	batch.Keys = []uint64{11, 12, 13, 14}
	grads := func(parts ...Batch) map[string][]float32 {
		m := loraModel(t, newBackend(1), cfg, Options{LoRA: testAdapter(2, false, 0.4)}, 5)
		defer m.Free()
		m.ZeroGrads()
		for _, b := range parts {
			if _, err := m.ForwardBackward(b, 1); err != nil {
				t.Fatal(err)
			}
		}
		out := map[string][]float32{}
		for _, p := range m.Trainable() {
			out[p.Name] = download(m, p.Grad)
		}
		return out
	}
	whole := grads(batch)
	halves := grads(sliceBatch(batch, 2, 4), sliceBatch(batch, 0, 2))
	if err := numtest.EachClose(halves, whole, numtest.Tol{Max: 1e-4}); err != nil {
		t.Error(err)
	}
}

// TestLoRAOnGrids: with adapters, one step's loss, gradient norm and
// every adapter gradient on grids of in-process ranks (X, Y, Z, data,
// with dropout and recomputation) equal one rank's; every rank holds the
// same whole gradients; the logits and greedy continuations too.
func TestLoRAOnGrids(t *testing.T) {
	grids := []comm.Grid{
		{Data: 1, X: 2, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 2, Z: 1}, {Data: 1, X: 1, Y: 1, Z: 2}, {Data: 2, X: 1, Y: 1, Z: 1},
		{Data: 2, X: 2, Y: 2, Z: 2}, {Data: 1, X: 4, Y: 4, Z: 1},
	}
	// Llama's, and two families': Qwen2's biases and Qwen3's head norms
	// (their heads split over Y).
	for _, cfg := range []*checkpoints.Config{gridConfig(false), gridConfig(true), asFamily(gridConfig(false), "qwen2"), asFamily(gridConfig(true), "qwen3")} {
		tie := cfg.TieWordEmbeddings
		a := testAdapter(3, tie, 0.2)
		ref := loraModel(t, newBackend(1), cfg, Options{LoRA: a}, 7)
		// Adapters of a trained size (loraModel's are large, and a model
		// that far from its base amplifies float32 rounding past 1e-5).
		for _, p := range ref.Trainable() {
			v := download(ref, p.Value)
			for i := range v {
				v[i] *= 0.2
			}
			ref.Backend().Upload(p.Value, v)
		}
		w, ad := ref.Weights(), ref.AdapterTensors()
		global := randomBatch(cfg, 8, 6, 3)
		global.Keys = []uint64{1, 2, 3, 4, 5, 6, 7, 8}
		want, wantGrads, err := oneStep(ref, global)
		if err != nil {
			t.Fatal(err)
		}
		wantNorm, _ := ref.GradNorm()
		wantLogits, _ := ref.Logits(global)
		prompts := [][]int32{{1, 2, 3}, {4, 5}}
		wantGen, _ := ref.Generate(prompts, GenerateOptions{MaxNewTokens: 4})
		for _, shape := range grids {
			for _, rec := range recomputeModes {
				name := fmt.Sprintf("tie=%v/%s/%v/recompute=%v", tie, cfg.ModelType, shape, rec)
				var mu sync.Mutex
				err := launch.Local(shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
					m, err := New(newBackend(1), cfg, Options{Parallel: g, Recompute: rec, LoRA: a})
					if err != nil {
						return err
					}
					defer m.Free()
					if err := m.SetWeights(w); err != nil {
						return err
					}
					if err := m.LoadAdapters(tensorReader(ad)); err != nil {
						return err
					}
					got, grads, err := oneStep(m, global)
					if err != nil {
						return err
					}
					norm, err := m.GradNorm()
					if err != nil {
						return err
					}
					logits, err := m.Logits(global)
					if err != nil {
						return err
					}
					gen, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 4})
					if err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					if err := numtest.Scalar(got.Sum, want.Sum, numtest.Tol{Rel: 1e-5}); err != nil || got.Weight != want.Weight {
						t.Errorf("%s rank %d: loss %v/%v, want %v/%v: %v", name, g.Rank(), got.Sum, got.Weight, want.Sum, want.Weight, err)
					}
					if err := numtest.Scalar(norm, wantNorm, numtest.Tol{Rel: 1e-5}); err != nil {
						t.Errorf("%s rank %d: grad norm: %v", name, g.Rank(), err)
					}
					if err := numtest.EachL2(grads, wantGrads, 1e-5); err != nil {
						t.Errorf("%s rank %d: gradients: %v", name, g.Rank(), err)
					}
					if err := numtest.CloseL2(logits, wantLogits, 1e-5); err != nil {
						t.Errorf("%s rank %d: logits: %v", name, g.Rank(), err)
					}
					for i := range gen {
						if !slices.Equal(gen[i], wantGen[i]) {
							t.Errorf("%s rank %d: prompt %d generated %v, want %v", name, g.Rank(), i, gen[i], wantGen[i])
						}
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	}
}

// tensorReader reads tensors by name from a list.
type tensorReader []checkpoints.Tensor

func (r tensorReader) ReadFloat32(name string) ([]float32, error) {
	for _, t := range r {
		if t.Name == name {
			return t.Data, nil
		}
	}
	return nil, fmt.Errorf("no tensor %q", name)
}
