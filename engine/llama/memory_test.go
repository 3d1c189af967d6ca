package llama

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
)

// TestMemoryIsWhatIsAllocated: Memory, which Preflight compares with the
// machine, is what a model allocates on one rank: its parameters with
// their gradients after New, then the workspace of a training pass, of a
// forward-only pass, and the decoder of a generation.
func TestMemoryIsWhatIsAllocated(t *testing.T) {
	for _, act := range []engine.DType{engine.F32, engine.BF16} {
		for _, tie := range []bool{false, true} {
			testMemoryIsWhatIsAllocated(t, testConfig(tie, 2), act)
		}
		// The families' variations: biases, head norms and their
		// activations, a window.
		for _, family := range []string{"mistral", "qwen2", "qwen3"} {
			testMemoryIsWhatIsAllocated(t, asFamily(testConfig(false, 2), family), act)
		}
	}
}

func testMemoryIsWhatIsAllocated(t *testing.T, cfg *checkpoints.Config, act engine.DType) {
	tie := fmt.Sprintf("%v %s", cfg.TieWordEmbeddings, cfg.ModelType)
	for _, recompute := range recomputeModes {
		name := fmt.Sprintf("tie=%v/recompute=%v/activations=%v", tie, recompute, act)
		b := newBackend(1)
		m := randomModel(t, b, cfg, Options{Recompute: recompute, Activations: act}, 1)
		params := Memory(cfg, Work{Activations: act}).Params
		if got := b.MemStats().Allocated; got != params {
			t.Errorf("%s: New allocated %d, accounted %d", name, got, params)
		}
		train := Memory(cfg, Work{Train: true, Recompute: recompute, Batch: 2, SeqLen: 5, Activations: act})
		if _, err := m.ForwardBackward(randomBatch(cfg, 2, 5, 1), 1); err != nil {
			t.Fatal(err)
		}
		if got, want := b.MemStats().Allocated, params+train.Workspace; got != want {
			t.Errorf("%s: training allocated %d, accounted %d", name, got, want)
		}
		// The evaluation's workspace replaces the training one.
		eval := Memory(cfg, Work{Train: true, Recompute: recompute, Batch: 1, SeqLen: 5, EvalBatch: 3, Activations: act})
		if _, err := m.Evaluate(randomBatch(cfg, 3, 5, 2)); err != nil {
			t.Fatal(err)
		}
		if got, want := b.MemStats().Allocated, params+eval.Workspace; got != want {
			t.Errorf("%s: evaluating allocated %d, accounted %d (training batch 1, evaluation batch 3)", name, got, want)
		}
		m.Free()
		if b.MemStats().Allocated != 0 {
			t.Errorf("%s: leaked %d bytes", name, b.MemStats().Allocated)
		}
	}
	// Decoding: the peak is the parameters and the decoder, whose plan
	// sizes equal-length prompts prefilled together.
	b := newBackend(1)
	m := randomModel(t, b, cfg, Options{Activations: act}, 1)
	if _, err := m.Generate([][]int32{{1, 2, 3}, {4, 5, 6}}, GenerateOptions{MaxNewTokens: 4}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.MemStats().Peak, Memory(cfg, Work{Batch: 2, SeqLen: 3, NewTokens: 4, Activations: act}).Total(); got != want {
		t.Errorf("tie=%v/activations=%v: decoding peaked at %d, accounted %d", tie, act, got, want)
	}
	m.Free()
}

// TestMemoryOnAGridIsWhatIsAllocated: on a grid, a rank's shards, the
// Z-sharding buffers (two with OAG) and its workspace are what it
// allocates.
func TestMemoryOnAGridIsWhatIsAllocated(t *testing.T) {
	grids := []comm.Grid{{Data: 2, X: 1, Y: 1, Z: 1}, {Data: 1, X: 2, Y: 2, Z: 1}, {Data: 1, X: 1, Y: 2, Z: 2}, {Data: 1, X: 2, Y: 1, Z: 4}}
	adapter := testAdapter(2, false, 0.1, "q_proj", "down_proj") // with dropout: lora_xd
	for _, cfg := range []*checkpoints.Config{gridConfig(false), gridConfig(true), asFamily(gridConfig(false), "qwen2"), asFamily(gridConfig(true), "qwen3")} {
		tie := fmt.Sprintf("%v %s", cfg.TieWordEmbeddings, cfg.ModelType)
		for _, shape := range grids {
			for _, ov := range []parallel.Overlap{{}, parallel.AllOverlap()} {
				for _, act := range []engine.DType{engine.F32, engine.BF16} {
					for _, lora := range []*checkpoints.AdapterConfig{nil, adapter} {
						opt := Options{Activations: act, LoRA: lora}
						if lora != nil {
							opt.BaseDType = engine.BF16 // gathered over Z in bf16
						}
						name := fmt.Sprintf("tie=%v/%v/%v/%v/lora=%v", tie, shape, ov, act, lora != nil)
						checkGridMemory(t, name, cfg, shape, ov, opt)
					}
				}
			}
		}
	}
}

// checkGridMemory checks on every rank of a grid that New allocates what
// Memory accounts for the parameters and the Z buffers, and a training
// pass what it accounts in all.
func checkGridMemory(t *testing.T, name string, cfg *checkpoints.Config, shape comm.Grid, ov parallel.Overlap, opt Options) {
	t.Helper()
	w := Work{Grid: shape, Overlap: ov, Activations: opt.Activations, LoRA: opt.LoRA, BaseDType: opt.BaseDType}
	noPass := Memory(cfg, w)
	w.Train, w.Batch, w.SeqLen = true, 2, 6
	want := Memory(cfg, w)
	var mu sync.Mutex
	err := launch.Local(shape, ov, func(g *parallel.Grid) error {
		b := newBackend(1)
		o := opt
		o.Parallel = g
		m, err := New(b, cfg, o)
		if err != nil {
			return err
		}
		defer m.Free()
		afterNew := b.MemStats().Allocated
		batch := randomBatch(cfg, 2, 6, uint64(g.BatchRank()))
		if _, err := m.ForwardBackward(batch, 1); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if afterNew != noPass.Params+noPass.Workspace {
			t.Errorf("%s rank %d: New allocated %d, accounted %d (parameters %d, Z buffers %d)", name, g.Rank(), afterNew, noPass.Total(), noPass.Params, noPass.Workspace)
		}
		if got := b.MemStats().Allocated; got != want.Total() {
			t.Errorf("%s rank %d: training allocated %d, accounted %d", name, g.Rank(), got, want.Total())
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// TestZBuffersBF16: in mixed precision the Z all-gathers' buffers hold
// bf16 copies, half the bytes of the float32 ones; the gradient blocks
// stay float32. A frozen bf16 base is gathered in bf16 too.
func TestZBuffersBF16(t *testing.T) {
	cfg := gridConfig(false)
	g := comm.Grid{Data: 1, X: 2, Y: 1, Z: 4}
	for _, ov := range []parallel.Overlap{{}, parallel.AllOverlap()} {
		_, z := shardElements(cfg, g, ov)
		if z.gather == 0 || z.grad == 0 {
			t.Fatalf("%v: no Z buffers (%+v)", ov, z)
		}
		f32 := Itemize(cfg, Work{Grid: g, Overlap: ov}).Gathered
		bf16 := Itemize(cfg, Work{Grid: g, Overlap: ov, Activations: engine.BF16}).Gathered
		if f32 != 4*(z.gather+z.grad) || bf16 != 2*z.gather+4*z.grad {
			t.Errorf("%v: Z buffers %d bytes in f32, %d in bf16; want %d and %d", ov, f32, bf16, 4*(z.gather+z.grad), 2*z.gather+4*z.grad)
		}
		a := testAdapter(2, false, 0, "q_proj")
		for _, base := range []engine.DType{engine.F32, engine.BF16} {
			got := Itemize(cfg, Work{Grid: g, Overlap: ov, LoRA: a, BaseDType: base}).Gathered
			if want := int64(base.Size()) * z.gather; got != want {
				t.Errorf("%v: a %v base's Z buffers: %d bytes, want %d", ov, base, got, want)
			}
		}
	}
}

// TestMemorySaturates: shapes no device could hold count as
// math.MaxInt64 rather than wrapping around into a size that fits.
func TestMemorySaturates(t *testing.T) {
	p, err := checkpoints.LookupPreset("llama3.1-405b")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	for _, w := range []Work{
		{Train: true, Batch: 1 << 30, SeqLen: 1 << 30},
		{Train: true, Batch: math.MaxInt64, SeqLen: 1 << 40},
		{Batch: 1 << 40, SeqLen: 131072, NewTokens: 1 << 40},
		{Train: true, Batch: 1, SeqLen: 8, EvalBatch: math.MaxInt64},
	} {
		if got := Memory(cfg, w).Total(); got != math.MaxInt64 {
			t.Errorf("%+v: %d bytes, want saturated", w, got)
		}
	}
	if got := ActivationBytes(cfg, 1_000_000_000, 1_000_000_000, true, RecomputeFull); got != math.MaxInt64 {
		t.Errorf("ActivationBytes of 10^18 tokens = %d, want saturated", got)
	}
}

func TestPreflight(t *testing.T) {
	cfg := gridConfig(false)
	w := Work{Train: true, Moments: 2, Batch: 8, SeqLen: 16}
	need := Memory(cfg, w).Total()
	rec := w
	rec.Recompute = RecomputeFull
	needRec := Memory(cfg, rec).Total()
	sel := w
	sel.Recompute = RecomputeSelective
	needSel := Memory(cfg, sel).Total()
	one := withBatch(rec, 1)
	onGrid32 := one
	onGrid32.Grid = comm.Grid{Data: 1, X: 8, Y: 4, Z: 1}
	host := func(free int64, ranks int) []engine.DeviceMemory {
		return []engine.DeviceMemory{{Device: "host", Free: free, Source: "test", Ranks: ranks}}
	}
	tests := []struct {
		name string
		w    Work
		have []engine.DeviceMemory
		want []string // in the error, in order; nil: fits
	}{
		{"fits", w, host(need, 1), nil},
		{"a reference model beside", Work{Train: true, Moments: 2, Batch: 8, SeqLen: 16, Beside: 1}, host(need, 1), []string{"not enough memory on host: "}},
		{"unknown", w, host(-1, 1), nil},
		{"no devices", w, nil, nil},
		{"recomputation fits", w, host(needRec, 1), []string{"not enough memory on host: training ", " on 8 sequences of 16 tokens a pass needs ",
			", but ", " is free (test); would fit: activation recomputation ("}},
		{"selective recomputation fits", w, host(needSel, 1), []string{" is free (test); would fit: selective activation recomputation ("}},
		{"selective recomputation with a smaller batch", w, host(Memory(cfg, withBatch(sel, 2)).Total(), 1), []string{"would fit: batches of 1 sequence (", "; or selective activation recomputation with batches of 2 sequences ("}},
		{"ranks share the host", w, host(need, 2), []string{" for its 2 ranks"}},
		{"a smaller batch fits", w, host(Memory(cfg, withBatch(w, 3)).Total(), 1), []string{"would fit: batches of 3 sequences ("}},
		{"recomputation with a smaller batch", w, host(Memory(cfg, withBatch(rec, 2)).Total(), 1), []string{"would fit: batches of 1 sequence (", "; or activation recomputation with batches of 2 sequences ("}},
		{"a grid", w, host(Memory(cfg, one).Params, 1), []string{"would fit: a grid of ", " ranks, each on a GPU or machine of its own, e.g. dp=1,", " ("}},
		// Enough for a rank of a 32-rank grid only with recomputation and
		// one sequence a pass.
		{"a grid with recomputation", w, host(Memory(cfg, onGrid32).Total(), 1), []string{"would fit: a grid of 32 ranks, each on a GPU or machine of its own, e.g. dp=1,x=8,y=4,z=1 with activation recomputation and 1 sequence a pass ("}},
		{"the second device", w, append(host(need, 1), engine.DeviceMemory{Device: "cuda:1", Free: need - 1, Source: "cuMemGetInfo", Ranks: 1}), []string{"not enough memory on cuda:1: "}},
		{"nothing fits", w, host(1000, 1), []string{"nothing smaller fits"}},
		{"decoding", Work{Batch: 4, SeqLen: 8, NewTokens: 8}, host(Memory(cfg, Work{Batch: 2, SeqLen: 8, NewTokens: 8}).Total(), 1), []string{"decoding 8 new tokens after 4 prompts of 8 tokens", "would fit: 2 prompts at a time ("}},
	}
	for _, tt := range tests {
		err := Preflight(cfg, tt.w, tt.have)
		if tt.want == nil {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		var me *engine.MemoryError
		if !errors.As(err, &me) {
			t.Errorf("%s: error %v, want a MemoryError", tt.name, err)
			continue
		}
		msg, at := err.Error(), 0
		for _, s := range tt.want {
			i := strings.Index(msg[at:], s)
			if i < 0 {
				t.Errorf("%s: %q lacks %q after byte %d", tt.name, msg, s, at)
				break
			}
			at += i + len(s)
		}
		if strings.Contains(msg, "\n") || me.Need <= me.Have {
			t.Errorf("%s: %q (need %d, have %d)", tt.name, msg, me.Need, me.Have)
		}
	}
}

// TestActivationMemoryLinearInT: attention keeps a log-sum-exp per row
// and no T×T probabilities, and the head holds one chunk of logits rows,
// so a training step's activation memory grows at most linearly with the
// sequence length. At batch 1 of the small preset, T = 8192 takes at most
// 16× what T = 512 does by the accounting (with the probabilities it took
// 63×; with the whole logits exactly 16×), with and without
// recomputation, and once the logits chunk is full (past 2,097 tokens of
// small's 32,000-token vocabulary) equal steps in T add equal bytes:
// affine in T; and for a
// one-layer model of small's shape the backend's allocation counter
// agrees with the accounting and grows 4× from T = 256 to 1024 (the
// workspace is allocated, not run: cheap).
func TestActivationMemoryLinearInT(t *testing.T) {
	p, err := checkpoints.LookupPreset("small")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	for _, rec := range recomputeModes {
		short, long := ActivationBytes(cfg, 1, 512, true, rec), ActivationBytes(cfg, 1, 8192, true, rec)
		if r := float64(long) / float64(short); r < 7 || r > 16 {
			t.Errorf("recompute=%v: activations %d bytes at T=512, %d at T=8192: ×%.2f, want ×7 to ×16", rec, short, long, r)
		}
		a4, a6 := ActivationBytes(cfg, 1, 4096, true, rec), ActivationBytes(cfg, 1, 6144, true, rec)
		if d1, d2 := a6-a4, long-a6; d1 != d2 {
			t.Errorf("recompute=%v: activations grow %d bytes from T=4096 to 6144 and %d from 6144 to 8192, want the same", rec, d1, d2)
		}
	}

	one := cfg.Clone()
	one.NumHiddenLayers, one.VocabSize = 1, 512
	if err := one.Validate(); err != nil {
		t.Fatal(err)
	}
	var allocated []int64
	for _, T := range []int{256, 1024} {
		b := newBackend(1)
		m := randomModel(t, b, one, Options{}, 1)
		before := b.MemStats().Allocated
		m.prepare(1, T, true)
		got := b.MemStats().Allocated - before
		if want := ActivationBytes(one, 1, T, true, RecomputeNone); got != want {
			t.Errorf("T=%d: the workspace allocated %d bytes, the accounting says %d", T, got, want)
		}
		allocated = append(allocated, got)
		m.Free()
	}
	if r := float64(allocated[1]) / float64(allocated[0]); r < 3.99 || r > 4.01 {
		t.Errorf("allocated %d bytes at T=256, %d at T=1024: ×%.3f, want ×4", allocated[0], allocated[1], r)
	}
}

// TestWorkDescribesOne: a batch of one reads "1 sequence", not "1 sequences".
func TestWorkDescribesOne(t *testing.T) {
	p, err := checkpoints.LookupPreset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	for _, w := range []Work{{Train: true, Batch: 1, SeqLen: 1}, {Batch: 1, SeqLen: 8}, {Batch: 1, SeqLen: 1, NewTokens: 1}} {
		s := describe(cfg, w)
		if strings.Contains(s, "1 sequences") || strings.Contains(s, "1 tokens") || strings.Contains(s, "1 prompts") || strings.Contains(s, "1 new tokens") {
			t.Errorf("%+v: %q", w, s)
		}
	}
}

// TestLayerBytesIsThePlans: sizing a plan from its one- and two-layer
// plans gives the size of its whole list, for training with and without
// recomputation, forward passes, decoding, adapters, grids and bf16.
func TestLayerBytesIsThePlans(t *testing.T) {
	cfg := gridConfig(false)
	cfg.NumHiddenLayers = 7
	lora := &checkpoints.AdapterConfig{R: 2, LoRAAlpha: 4, TargetModules: []string{"q_proj", "down_proj"}}
	for _, g := range []comm.Grid{{}, {Data: 1, X: 2, Y: 2, Z: 1}} {
		for _, act := range []engine.DType{engine.F32, engine.BF16} {
			d := fullDims(cfg)
			if g != (comm.Grid{}) {
				d = gridDims(cfg, g)
			}
			d.act = act
			for _, a := range []*checkpoints.AdapterConfig{nil, lora} {
				d.lora = a
				lists := map[string]func(dims) []tensorPlan{
					"train":     func(d dims) []tensorPlan { return plan(d, 2, 5, true, RecomputeNone) },
					"recompute": func(d dims) []tensorPlan { return plan(d, 2, 5, true, RecomputeFull) },
					"selective": func(d dims) []tensorPlan { return plan(d, 2, 5, true, RecomputeSelective) },
					"forward":   func(d dims) []tensorPlan { return plan(d, 3, 5, false, RecomputeNone) },
					"decode":    func(d dims) []tensorPlan { return decoderPlan(d, 2, 9, 6) },
				}
				for name, list := range lists {
					if got, want := layerBytes(d, list), planBytes(list(d)); got != want {
						t.Errorf("%v %v lora=%v %s: %d bytes, the list's %d", g, act, a != nil, name, got, want)
					}
				}
			}
		}
	}
}
