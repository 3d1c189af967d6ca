package finetune

import (
	"errors"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
)

// TestPreflight: a run is checked before any rank starts: its batch
// against the train split, and what each rank allocates against what its
// device has free.
func TestPreflight(t *testing.T) {
	model, dataset := sweepFolders(t)
	base := DefaultConfig()
	base.Model, base.Data, base.Out = model, dataset, t.TempDir()
	base.BatchSize, base.MicroBatch, base.MaxSteps = 8, 4, 1
	mcfg, err := checkpoints.ReadConfig(model)
	if err != nil {
		t.Fatal(err)
	}
	oneRank := llama.Memory(mcfg, llama.Work{Train: true, Micro: 2, Moments: 2, Batch: 4, SeqLen: sweepT}).Total()
	bf16Rank := llama.Memory(mcfg, llama.Work{Train: true, Micro: 2, Moments: 2, Batch: 4, SeqLen: sweepT, Activations: engine.BF16}).Total()
	tests := []struct {
		name  string
		edit  func(c *Config)
		grid  comm.Grid
		limit int64  // bytes free; 0: unknown
		want  string // "": fits
	}{
		{"fits", func(c *Config) {}, comm.Grid{}, 1 << 30, ""},
		{"the memory is unknown", func(c *Config) {}, comm.Grid{}, 0, ""},
		{"exactly", func(c *Config) {}, comm.Grid{}, oneRank, ""},
		{"a byte short", func(c *Config) {}, comm.Grid{}, oneRank - 1, "finetune: " + model + ": not enough memory on host: training "},
		{"a batch beyond the split", func(c *Config) { c.BatchSize, c.MicroBatch = 64, 8 },
			comm.Grid{}, 1 << 30, "finetune: batch_size 64 is more than the 60 sequences of " + dataset + "'s train split (want at most 60)"},
		{"in-process ranks share the host", func(c *Config) {}, comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}, oneRank, " for its 2 ranks, but "},
		{"invalid", func(c *Config) { c.MicroBatch = 3 }, comm.Grid{}, 1 << 30, "micro_batch 3 does not divide batch_size 8: set micro_batch to a divisor of it, such as 2"},
		// Mixed precision: sized by the engine's accounting (half the
		// activations, the weights' bf16 copies), on every grid.
		{"bf16 fits", func(c *Config) { c.Precision = "bf16" }, comm.Grid{}, bf16Rank, ""},
		{"bf16 a byte short", func(c *Config) { c.Precision = "bf16" }, comm.Grid{}, bf16Rank - 1, "not enough memory on host: training "},
		{"bf16 data-parallel", func(c *Config) { c.Precision = "bf16" }, comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}, 1 << 30, ""},
		{"bf16 on x = 2", func(c *Config) { c.Precision = "bf16" }, comm.Grid{Data: 1, X: 2, Y: 1, Z: 1}, 1 << 30, ""},
		{"bf16 on z = 2", func(c *Config) { c.Precision = "bf16" }, comm.Grid{Data: 1, X: 1, Y: 1, Z: 2}, 1 << 30, ""},
		{"bf16 with adapters", func(c *Config) { c.Precision, c.LoRA.Rank = "bf16", 2 }, comm.Grid{}, 1 << 30, ""},
		{"bf16 with adapters on a float32 base", func(c *Config) { c.Precision, c.LoRA.Rank, c.LoRA.BaseDType = "bf16", 2, "f32" }, comm.Grid{}, 1 << 30,
			"finetune: lora.base_dtype f32 with precision bf16: bf16 activations multiply the frozen base in bf16 (want auto or bf16)"},
		{"an unknown precision", func(c *Config) { c.Precision = "fp8" }, comm.Grid{}, 1 << 30, `finetune: precision: engine: unknown precision "fp8" (want f32 or bf16)`},
	}
	for _, tt := range tests {
		cfg := base
		tt.edit(&cfg)
		ranks := max(tt.grid.Size(), 1)
		have := []engine.DeviceMemory{{Device: "host", Free: -1, Ranks: ranks}}
		if tt.limit != 0 {
			have[0].Free, have[0].Source = tt.limit, "test"
		}
		err = Preflight(cfg, tt.grid, parallel.AllOverlap(), have)
		if tt.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line with %q", tt.name, err, tt.want)
		}
		var me *engine.MemoryError
		if strings.Contains(tt.want, "memory") && !errors.As(err, &me) {
			t.Errorf("%s: %T is no MemoryError", tt.name, err)
		}
	}
}

// TestOpenRefusesABatchBeyondTheSplit: before the model loads.
func TestOpenRefusesABatchBeyondTheSplit(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data, cfg.Out = model, dataset, t.TempDir()
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 64, 8, 1
	b := cpu.New(cpu.Options{Threads: 1})
	_, err := Open(cfg, b, "")
	if err == nil || err.Error() != "finetune: batch_size 64 is more than the 60 sequences of "+dataset+"'s train split (want at most 60)" {
		t.Errorf("error %v", err)
	}
	if got := b.MemStats().Peak; got != 0 {
		t.Errorf("the model was loaded: %d bytes allocated", got)
	}
}

// TestWork: what a run's rank allocates, as Preflight sizes it.
func TestWork(t *testing.T) {
	_, dataset := sweepFolders(t)
	store, err := data.OpenStore(dataset)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	grid := comm.Grid{Data: 2, X: 1, Y: 2, Z: 2}
	tests := []struct {
		name string
		edit func(c *Config)
		grid comm.Grid
		want llama.Work
	}{
		{"one rank", func(c *Config) {}, comm.Grid{}, llama.Work{Train: true, Micro: 2, Moments: 2, Batch: 4, SeqLen: sweepT}},
		{"sgd, recomputation, evaluation", func(c *Config) { c.Optimizer.Name, c.Recompute, c.EvalEvery = "sgd", RecomputeFull, 1 },
			comm.Grid{}, llama.Work{Train: true, Recompute: llama.RecomputeFull, Micro: 2, Batch: 4, SeqLen: sweepT, EvalBatch: 4}},
		{"a grid splits the batches over data·Z", func(c *Config) { c.MicroBatch, c.EvalEvery, c.EvalBatch = 8, 1, 16 },
			grid, llama.Work{Grid: grid, Train: true, Micro: 1, Moments: 2, Batch: 2, SeqLen: sweepT, EvalBatch: 4}},
		{"lora keeps a bf16 base as bf16", func(c *Config) { c.LoRA.Rank = 8 }, comm.Grid{},
			llama.Work{Train: true, Micro: 2, Moments: 2, Batch: 4, SeqLen: sweepT, BaseDType: engine.BF16}},
		{"a fused optimizer holds the units' gradients in flight", func(c *Config) { c.Optimizer.Fused, c.BatchSize = true, 4 }, comm.Grid{},
			llama.Work{Train: true, Micro: 1, Moments: 2, Batch: 4, SeqLen: sweepT, FusedOptimizer: true}},
		{"lora on a base held in f32", func(c *Config) { c.LoRA.Rank, c.LoRA.BaseDType = 8, "f32" }, comm.Grid{},
			llama.Work{Train: true, Micro: 2, Moments: 2, Batch: 4, SeqLen: sweepT, BaseDType: engine.F32}},
	}
	model := &checkpoints.Config{TorchDType: "bfloat16"}
	for _, tt := range tests {
		cfg := DefaultConfig()
		cfg.MicroBatch = 4
		tt.edit(&cfg)
		tt.want.Overlap = parallel.AllOverlap()
		got, err := work(cfg, model, store, tt.grid, parallel.AllOverlap())
		if err != nil {
			t.Fatal(err)
		}
		if (got.LoRA != nil) != (cfg.LoRA.Rank > 0) || got.LoRA != nil && (got.LoRA.R != cfg.LoRA.Rank || got.LoRA.LoRAAlpha != 16) {
			t.Errorf("%s: adapter %+v for lora %+v", tt.name, got.LoRA, cfg.LoRA)
		}
		got.LoRA = nil
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
