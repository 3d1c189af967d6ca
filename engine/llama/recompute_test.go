package llama

import (
	"fmt"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// recomputeModes are the recomputation modes, for the tests that run each.
var recomputeModes = []Recompute{RecomputeNone, RecomputeSelective, RecomputeFull}

// exactRun is what recomputeRun records on a grid's rank 0: each step's
// loss sums (Sum, Weight, ReportSum, ReportWeight) and full-shape
// trainable gradients, and the trainable weights after the steps.
type exactRun struct {
	losses  [][]float64
	grads   []map[string][]float32
	weights map[string][]float32
}

// recomputeRun trains a model of cfg holding w (and adapters ad, with
// opt.LoRA) for steps AdamW steps of oneStep's two micro-batches on one
// rank (shape the zero Grid) or on every rank of an in-process grid,
// checking each rank's allocation against Memory after the first step.
func recomputeRun(t *testing.T, shape comm.Grid, cfg *checkpoints.Config, opt Options, w, ad []checkpoints.Tensor, global Batch, steps int) exactRun {
	t.Helper()
	var mu sync.Mutex
	var out exactRun
	run := func(g *parallel.Grid) error {
		o := opt
		o.Parallel = g
		m, err := New(newBackend(1), cfg, o)
		if err != nil {
			return err
		}
		defer m.Free()
		if err := m.SetWeights(w); err != nil {
			return err
		}
		if ad != nil {
			if err := m.LoadAdapters(tensorReader(ad)); err != nil {
				return err
			}
		}
		ts, ctl, free := adamWState(m)
		defer free()
		var r exactRun
		for s := 1; s <= steps; s++ {
			l, grads, err := oneStep(m, global)
			if err != nil {
				return err
			}
			if s == 1 {
				// What the rank holds is what Memory accounts: the model,
				// its training workspace and the moments (and the
				// clipping control, 2 float32).
				ranks, ov := 1, parallel.Overlap{}
				if g != nil {
					ranks, ov = g.BatchRanks(), parallel.AllOverlap()
				}
				w := Work{Grid: shape, Overlap: ov, Train: true, Recompute: o.Recompute, Moments: 2, Batch: global.B / ranks / 2, SeqLen: global.T,
					LoRA: o.LoRA, BaseDType: o.BaseDType, Activations: o.Activations}
				if got, want := m.Backend().MemStats().Allocated, Memory(cfg, w).Total()+8; got != want {
					t.Errorf("%v %v recompute=%v: allocated %d bytes, accounted %d", shape, o.Activations, o.Recompute, got, want)
				}
			}
			r.losses = append(r.losses, []float64{l.Sum, l.Weight, l.ReportSum, l.ReportWeight})
			r.grads = append(r.grads, grads)
			m.Backend().AdamWStep(ts, engine.AdamWParams{LR: 0.05, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: s}, 0, ctl)
		}
		r.weights = map[string][]float32{}
		for _, p := range m.Trainable() {
			if m.Adapter() != nil { // adapters: whole on every rank
				r.weights[p.Name] = download(m, p.Value)
				continue
			}
			v, err := m.Gather(p, p.Value)
			if err != nil {
				return err
			}
			r.weights[p.Name] = v
		}
		if g == nil || g.Rank() == 0 {
			mu.Lock()
			out = r
			mu.Unlock()
		}
		return nil
	}
	var err error
	if shape == (comm.Grid{}) {
		err = run(nil)
	} else {
		err = launch.Local(shape, parallel.AllOverlap(), run)
	}
	if err != nil {
		t.Fatalf("%v: %v", shape, err)
	}
	return out
}

// TestRecomputeModesAreExact: selective and full recomputation train bit
// for bit as keeping every activation does — each step's loss, every
// gradient, the weights after three AdamW steps — on one rank and on
// grids that split the hidden size (X = 2, whose RMSNorm sums its
// statistics over the ranks: the recomputed norms sum them again), shard
// the weights (Z = 2), do both with Y, or run beside data parallelism
// (whose gradient buckets reduce during the last backward), in float32
// and bf16, with and without adapters (with dropout, and the adapters' z
// kept a layer); and each rank allocates what Memory accounts for the
// mode.
func TestRecomputeModesAreExact(t *testing.T) {
	cfg := gridConfig(false)
	global := reportBatch(cfg)
	global.Keys = []uint64{3, 1, 4, 1, 5, 9, 2, 6}
	base := randomModel(t, newBackend(1), cfg, Options{}, 5)
	w := base.Weights()
	base.Free()
	a := testAdapter(2, false, 0.2, "q_proj", "v_proj", "gate_proj", "down_proj")
	ad := scaledLoRAModel(t, newBackend(1), cfg, Options{LoRA: a}, 5, 0.3, 0.1)
	adapters := ad.AdapterTensors()
	ad.Free()
	for _, shape := range []comm.Grid{{}, {Data: 1, X: 2, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 1, Z: 2}, {Data: 1, X: 2, Y: 2, Z: 2}, {Data: 2, X: 2, Y: 1, Z: 1}} {
		for _, act := range []engine.DType{engine.F32, engine.BF16} {
			for _, lora := range []bool{false, true} {
				opt := Options{Activations: act}
				var adt []checkpoints.Tensor
				if lora {
					opt.LoRA, opt.BaseDType, adt = a, act, adapters
				}
				var ref exactRun
				for _, mode := range recomputeModes {
					o := opt
					o.Recompute = mode
					got := recomputeRun(t, shape, cfg, o, w, adt, global, 3)
					if mode == RecomputeNone {
						ref = got
						continue
					}
					where := "one rank"
					if shape != (comm.Grid{}) {
						where = shape.String()
					}
					name := fmt.Sprintf("%s %v lora=%v recompute=%v", where, act, lora, mode)
					for s := range ref.losses {
						if err := numtest.Equal(got.losses[s], ref.losses[s]); err != nil {
							t.Errorf("%s: step %d's loss: %v", name, s+1, err)
						}
						if err := numtest.Each(got.grads[s], ref.grads[s], numtest.Equal[float32]); err != nil {
							t.Errorf("%s: step %d's gradients: %v", name, s+1, err)
						}
					}
					if err := numtest.Each(got.weights, ref.weights, numtest.Equal[float32]); err != nil {
						t.Errorf("%s: weights after the steps: %v", name, err)
					}
				}
			}
		}
	}
}

// TestSelectiveRecomputeSaves: per layer, selective recomputation keeps
// (2·H + I)·N fewer activation elements than none (and 2·N float32
// fewer statistics), one shared set of them staying: what the workspace
// plan allocates (TestMemoryIsWhatIsAllocated holds the plan to the
// allocation), on one rank and on a grid's shares; for Llama 3.1 8B on
// one rank at 8,192 tokens, 352 MiB a layer in bf16, 10.7 GiB in all.
func TestSelectiveRecomputeSaves(t *testing.T) {
	p, err := checkpoints.LookupPreset("llama3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  *checkpoints.Config
		g    comm.Grid
		B, T int
	}{
		{gridConfig(false), comm.Grid{}, 2, 5},
		{gridConfig(false), comm.Grid{Data: 1, X: 2, Y: 2, Z: 1}, 2, 5},
		{p.Config(), comm.Grid{}, 1, 8192},
	} {
		for _, act := range []engine.DType{engine.F32, engine.BF16} {
			w := Work{Grid: c.g, Train: true, Batch: c.B, SeqLen: c.T, Activations: act}
			none := Itemize(c.cfg, w).Activations
			w.Recompute = RecomputeSelective
			sel := Itemize(c.cfg, w).Activations
			d := fullDims(c.cfg)
			if c.g != (comm.Grid{}) {
				d = gridDims(c.cfg, c.g)
			}
			N := int64(c.B * c.T)
			perLayer := (2*int64(d.H)+int64(d.I))*N*int64(act.Size()) + 2*N*4
			if want := int64(c.cfg.NumHiddenLayers-1) * perLayer; none-sel != want {
				t.Errorf("%d layers, %v %v: selective saves %d bytes, want %d", c.cfg.NumHiddenLayers, c.g, act, none-sel, want)
			}
		}
	}
}
