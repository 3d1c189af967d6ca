package perfmodel

import (
	"errors"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

func TestShardParams(t *testing.T) {
	small := smallConfig(t)
	for _, c := range []struct {
		cfg  *checkpoints.Config
		g    Grid
		want int64
	}{
		// Per layer q 4096 + k, v 2048 each + o 4096 + gate, up, down 8192
		// each = 36864; two layers 73728; embedding and head 16384 each;
		// norms 5 × 64.
		{small, Grid{1, 1, 1, 1}, 73728 + 2*16384 + 5*64},
		{small, Grid{7, 1, 1, 1}, 73728 + 2*16384 + 5*64},
		// X·Y·Z = 4 shards every matrix; norms split over X only.
		{small, Grid{2, 2, 1, 2}, (73728+2*16384)/4 + 5*32},
		{small, Grid{1, 1, 2, 2}, (73728+2*16384)/4 + 5*64},
	} {
		if got := ShardParams(c.cfg, c.g); got != c.want {
			t.Errorf("%v: %d parameters, want %d", c.g, got, c.want)
		}
	}
	// One rank holds the whole model, tied or not.
	for _, name := range []string{"tiny", "llama3.2-1b", "llama3.1-8b", "llama3.1-405b"} {
		cfg := preset(t, name)
		if got, want := ShardParams(cfg, Grid{1, 1, 1, 1}), cfg.Params().Total; got != want {
			t.Errorf("%s: %d parameters on one rank, want %d", name, got, want)
		}
	}
}

// TestMemoryIsTheEngines ties the planner's memory to the engine's
// accounting: every part is llama.Itemize's for the rank's Work, on one
// rank and on grids of every axis, with and without recomputation and
// overlap (llama's tests tie Itemize to what the backend allocates).
func TestMemoryIsTheEngines(t *testing.T) {
	cfg := smallConfig(t)
	for _, g := range []Grid{{1, 1, 1, 1}, {4, 1, 1, 1}, {2, 2, 1, 2}, {1, 1, 2, 2}, {1, 2, 2, 1}, {1, 1, 1, 4}} {
		for _, rec := range []llama.Recompute{llama.RecomputeNone, llama.RecomputeSelective, llama.RecomputeFull} {
			for _, o := range []Options{{}, {NoOverlap: true}} {
				s := Step{Grid: g, SeqLen: 8, MicroBatch: 2, MicroBatches: 3, Recompute: rec}
				m, err := EstimateMemory(cfg, s, o)
				if err != nil {
					t.Fatal(err)
				}
				w := s.Work(o)
				it := llama.Itemize(cfg, w)
				if m.Weights != it.Weights || m.Gradients != it.Gradients || m.Optimizer != it.Optimizer ||
					m.Activations != it.Activations || m.Workspace != it.Gathered {
					t.Errorf("%v recompute=%v %+v: %+v, engine %+v", g, rec, o, m, it)
				}
				if got, want := m.Total(), llama.Memory(cfg, w).Total(); got != want {
					t.Errorf("%v recompute=%v %+v: total %d, engine %d", g, rec, o, got, want)
				}
				if w.Batch != 2 || w.SeqLen != 8 || w.Micro != 3 || w.Moments != 2 || !w.Train || w.Recompute != rec || w.Overlap.AllGather == o.NoOverlap {
					t.Errorf("%v: work %+v", g, w)
				}
				if g.Z == 1 && m.Workspace != 0 {
					t.Errorf("%v: %d bytes gathered without Z", g, m.Workspace)
				}
				if g.Z > 1 && m.Workspace == 0 {
					t.Errorf("%v: nothing gathered with Z", g)
				}
			}
		}
	}
	// Prefetching the next unit holds a second gathered unit.
	s := Step{Grid: Grid{1, 1, 1, 4}, SeqLen: 8, MicroBatch: 1, MicroBatches: 1}
	on, _ := EstimateMemory(cfg, s, Options{})
	off, _ := EstimateMemory(cfg, s, Options{NoOverlap: true})
	if on.Workspace <= off.Workspace {
		t.Errorf("OAG %d bytes gathered, serial %d", on.Workspace, off.Workspace)
	}
	if _, err := EstimateMemory(cfg, Step{Grid: Grid{1, 1, 1, 5}, SeqLen: 8, MicroBatch: 1, MicroBatches: 1}, Options{}); err == nil {
		t.Error("Z=5 accepted")
	}
}

// TestEightBOnH200 is the planner's answer for a full fine-tune of Llama
// 3.1 8B on 8,192-token sequences on this engine: no grid of one H200
// fits, and the grid it ranks first on two fits the engine's own preflight
// on two H200s' usable memory, as `finetune` checks it before loading.
func TestEightBOnH200(t *testing.T) {
	cfg := preset(t, "llama3.1-8b")
	dev, err := LookupDevice("h200")
	if err != nil {
		t.Fatal(err)
	}
	job := Job{Config: cfg, Device: dev, GPUs: 1, SeqLen: 8192, GlobalBatchTokens: 8192}
	var nofit *NoFitError
	if _, err := Search(job, Options{}); !errors.As(err, &nofit) {
		t.Fatalf("one H200: %v, want no fit", err)
	}
	job.GPUs, job.GlobalBatchTokens = 2, 2*8192
	plans, err := Search(job, Options{})
	if err != nil {
		t.Fatal(err)
	}
	best := plans[0]
	usable := Options{}.UsableMemory(dev, 2)
	have := []engine.DeviceMemory{{Device: "cuda:0", Free: usable, Ranks: 1}, {Device: "cuda:1", Free: usable, Ranks: 1}}
	if err := llama.Preflight(cfg, best.Step.Work(Options{}), have); err != nil {
		t.Errorf("the planner's %v does not pass the engine's preflight: %v", best.Grid, err)
	}
	t.Logf("8B at 8192 tokens: %v, micro-batch %d, recompute %v, %.1f GiB a GPU of %.1f usable (modelled step %.2f s)",
		best.Grid, best.MicroBatch, best.Recompute, float64(best.Memory.Total())/(1<<30), float64(usable)/(1<<30), best.StepSeconds)
}

// TestEstimateMemoryZeRO: with ZeRO the moments are 8 bytes an element of
// the first data rank's chunks: ⌈n/Data⌉ of each of the rank's tensors
// (here every one divides, so exactly 1/Data of them); nothing else
// changes.
func TestEstimateMemoryZeRO(t *testing.T) {
	cfg := smallConfig(t)
	for _, g := range []Grid{{2, 1, 1, 1}, {4, 2, 1, 2}, {8, 1, 2, 1}} {
		s := Step{Grid: g, SeqLen: 16, MicroBatch: 2, MicroBatches: 2}
		for _, prec := range []engine.Precision{engine.PrecisionF32, engine.PrecisionBF16} {
			whole, err := EstimateMemory(cfg, s, Options{Precision: prec})
			if err != nil {
				t.Fatal(err)
			}
			zero, err := EstimateMemory(cfg, s, Options{Precision: prec, Zero: 1})
			if err != nil {
				t.Fatal(err)
			}
			if want := 8 * ShardParams(cfg, g) / int64(g.Data); zero.Optimizer != want || whole.Optimizer != 8*ShardParams(cfg, g) {
				t.Errorf("%v %v: moments %d bytes with ZeRO, %d without; want %d and %d", g, prec, zero.Optimizer, whole.Optimizer, want, 8*ShardParams(cfg, g))
			}
			zero.Optimizer = whole.Optimizer
			if zero != whole {
				t.Errorf("%v %v: ZeRO changed more than the moments: %+v, without %+v", g, prec, zero, whole)
			}
		}
	}
}
