package perfmodel

import (
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

// TestCheapestTargets: the planner finds issue 31's targets at 8,192
// tokens in mixed precision — Llama 3.1 8B on one H200, 70B on 8, 405B
// on 32, and 405B with LoRA (rank 16 on q, k, v, o) on 8 — each a grid
// and option set that the engine's preflight accepts on that many H200s'
// usable memory (90% of 143,771 MiB).
func TestCheapestTargets(t *testing.T) {
	dev, err := LookupDevice("h200")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model string
		gpus  int
		lora  int // rank
	}{
		{"llama3.1-8b", 1, 0},
		{"llama3.1-70b", 8, 0},
		{"llama3.1-405b", 8, 16},
		{"llama3.1-405b", 32, 0},
	} {
		cfg := preset(t, c.model)
		o := Options{Precision: engine.PrecisionBF16, LoRA: c.lora}
		ch, err := Cheapest(Job{Config: cfg, Device: dev, GPUs: c.gpus, SeqLen: 8192}, o)
		if err != nil {
			t.Errorf("%s on %d: %v", c.model, c.gpus, err)
			continue
		}
		best := ch.Plans[0]
		usable := ch.Options.UsableMemory(dev, ch.Job.GPUs)
		have := make([]engine.DeviceMemory, ch.Job.GPUs)
		for i := range have {
			have[i] = engine.DeviceMemory{Device: "cuda", Free: usable, Ranks: 1}
		}
		if err := llama.Preflight(cfg, best.Step.Work(ch.Options), have); err != nil {
			t.Errorf("%s: the planner's %v with %s does not pass the preflight: %v", c.model, best.Grid, ch.Options.State(), err)
		}
		if ch.Job.GPUs > c.gpus {
			t.Errorf("%s: %d GPUs, want at most %d", c.model, ch.Job.GPUs, c.gpus)
		}
		t.Logf("%s: %d H200, %v, %s, micro-batch %d, recompute %v: %.1f GiB a GPU of %.1f usable (modelled step %.2f s)",
			c.model, ch.Job.GPUs, best.Grid, ch.Options.State(), best.MicroBatch, best.Recompute, float64(best.Memory.Total())/(1<<30), float64(usable)/(1<<30), best.StepSeconds)
	}
}

// TestCheapestFused: the optimizer fused into the backward is one of the
// state options Cheapest searches: Llama 3.1 70B at 8,192 tokens in
// mixed precision, which without it needs 8 H200s, fits on 4 with it
// (split master, 8-bit moments: 4 bytes a parameter of gradients gone),
// one micro-batch a step, and the engine's preflight accepts the plan.
// Search plans it with one micro-batch alone, and its gradients are the
// engine's count of the units in flight.
func TestCheapestFused(t *testing.T) {
	dev, err := LookupDevice("h200")
	if err != nil {
		t.Fatal(err)
	}
	cfg := preset(t, "llama3.1-70b")
	ch, err := Cheapest(Job{Config: cfg, Device: dev, GPUs: 8, SeqLen: 8192}, Options{Precision: engine.PrecisionBF16})
	if err != nil {
		t.Fatal(err)
	}
	best := ch.Plans[0]
	if ch.Job.GPUs != 4 || !ch.Options.Fused || best.MicroBatches != 1 {
		t.Fatalf("%d H200, %s, %d micro-batches; want 4, the optimizer fused, 1", ch.Job.GPUs, ch.Options.State(), best.MicroBatches)
	}
	have := make([]engine.DeviceMemory, ch.Job.GPUs)
	for i := range have {
		have[i] = engine.DeviceMemory{Device: "cuda", Free: ch.Options.UsableMemory(dev, ch.Job.GPUs), Ranks: 1}
	}
	w := best.Step.Work(ch.Options)
	if !w.FusedOptimizer {
		t.Error("the plan's work is not fused")
	}
	if err := llama.Preflight(cfg, w, have); err != nil {
		t.Errorf("the planner's %v with %s does not pass the preflight: %v", best.Grid, ch.Options.State(), err)
	}
	unfused := w
	unfused.FusedOptimizer = false
	if g, u := best.Memory.Gradients, llama.Itemize(cfg, unfused).Gradients; g != llama.Itemize(cfg, w).Gradients || g*10 > u {
		t.Errorf("fused gradients %d bytes, unfused %d: want the engine's count, under a tenth", g, u)
	}
	plans, err := Search(Job{Config: cfg, Device: dev, GPUs: 16, SeqLen: 8192, GlobalBatchTokens: 64 * 8192}, Options{Precision: engine.PrecisionBF16, Fused: true, SplitMaster: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range plans {
		if p.MicroBatches != 1 {
			t.Errorf("%v: %d micro-batches with a fused optimizer", p.Grid, p.MicroBatches)
		}
	}
	for _, o := range []Options{{Fused: true, Zero: 1}, {Fused: true, LoRA: 8}} {
		if _, err := Search(Job{Config: cfg, Device: dev, GPUs: 8, SeqLen: 8192}, o); err == nil {
			t.Errorf("%+v: planned", o)
		}
	}
}
