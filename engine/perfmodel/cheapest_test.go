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
