package perfmodel

import (
	"errors"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

// TestCheapestTargets: the planner finds issue 31's targets at 8,192
// tokens in mixed precision — Llama 3.1 8B on one H200, 70B on 8, and
// 405B with LoRA (rank 16 on q, k, v, o) on 8 — each a grid and option
// set that the engine's preflight accepts on that many H200s' usable
// memory; and 405B's full fine-tune on 32 H200s is out of reach of the
// options implemented (see the report): Cheapest says by how much.
func TestCheapestTargets(t *testing.T) {
	dev, err := LookupDevice("h200")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		model string
		gpus  int
		lora  int // rank
		fits  bool
	}{
		{"llama3.1-8b", 1, 0, true},
		{"llama3.1-70b", 8, 0, true},
		{"llama3.1-405b", 8, 16, true},
		{"llama3.1-405b", 32, 0, false},
	} {
		cfg := preset(t, c.model)
		o := Options{Precision: engine.PrecisionBF16, LoRA: c.lora}
		ch, err := Cheapest(Job{Config: cfg, Device: dev, GPUs: c.gpus, SeqLen: 8192}, o)
		var nofit *NoFitError
		if !c.fits {
			if !errors.As(err, &nofit) {
				t.Errorf("%s on %d: %v, want no fit", c.model, c.gpus, err)
				continue
			}
			// What the options not implemented would save on the most
			// frugal grid: 8-bit moments 1 byte an element of each
			// (less their block scales), the optimizer step fused into
			// the backward the whole-model gradient buffer, 4 bytes.
			lack := nofit.Smallest.Memory.Total() - nofit.Usable
			n := ShardParams(cfg, nofit.Smallest.Grid)
			t.Logf("%s on %d H200: %v; lacks %d bytes (%.1f GiB) a GPU; of %d parameters a rank, 8-bit moments would save about %.1f GiB, no gradient buffer %.1f GiB",
				c.model, c.gpus, err, lack, float64(lack)/(1<<30), n, float64(2*n)/(1<<30), float64(nofit.Smallest.Memory.Gradients)/(1<<30))
			if nofit.Smallest.Memory.Gradients <= lack {
				t.Errorf("%s on %d: the gradient buffer (%d bytes) would not close the %d bytes lacking", c.model, c.gpus, nofit.Smallest.Memory.Gradients, lack)
			}
			continue
		}
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
