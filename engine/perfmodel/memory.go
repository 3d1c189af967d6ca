package perfmodel

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
)

// Memory is what one rank holds during a training step, in bytes, by
// the engine's own accounting (llama.Itemize: the lists of buffers that
// the model allocates, which tests check against the backend's counter).
type Memory struct {
	// Weights is the rank's weight shards and the RoPE table.
	Weights int64 `json:"weights"`
	// Gradients is the shards' gradients.
	Gradients int64 `json:"gradients"`
	// Optimizer is AdamW's two moments (with Options.Zero, the first
	// data rank's chunks of them).
	Optimizer int64 `json:"optimizer"`
	// Activations is the micro-batch's workspace: saved activations,
	// activation gradients, a chunk of logits, the grid's scratch.
	Activations int64 `json:"activations"`
	// Workspace is what Z-sharding adds (zero when Z = 1): the gathered
	// weight blocks of the largest unit — a decoder layer's seven linears
	// or the embedding/head block —, twice when the next unit's gather
	// is prefetched (OAG), and the gradient blocks before their
	// reduce-scatter.
	Workspace int64 `json:"workspace"`
}

// Total is the sum of the parts.
func (m Memory) Total() int64 {
	return engine.SumBytes(m.Weights, m.Gradients, m.Optimizer, m.Activations, m.Workspace)
}

// ShardParams is the number of parameters one rank of grid g stores, by
// each tensor's declared split: a matrix's out·in/(X·Y·Z), a vector's
// slice over its axis (a norm's hidden/X: norms are split over X with the
// residual stream, replicated over Y and Z), a replicated tensor whole.
func ShardParams(cfg *checkpoints.Config, g Grid) int64 {
	var n int64
	for _, s := range declared(cfg) {
		rows, cols := s.Split.Axes()
		e := s.Elements() / int64(g.axisSize(rows)*g.axisSize(cols))
		if s.Split.ChunksZ() {
			e /= int64(g.Z)
		}
		if s.Layer >= 0 {
			e *= int64(cfg.NumHiddenLayers)
		}
		n += e
	}
	return n
}

// EstimateMemory sizes one rank's memory for step s with AdamW, as the
// engine allocates it (llama.Itemize).
func EstimateMemory(cfg *checkpoints.Config, s Step, o Options) (Memory, error) {
	if err := s.validate(cfg); err != nil {
		return Memory{}, err
	}
	if err := s.computes(o); err != nil {
		return Memory{}, err
	}
	return estimateMemory(cfg, s, o), nil
}

// Work is the engine's description of step s on a rank: s.MicroBatches
// micro-batches of s.MicroBatch sequences (each (data, z) coordinate's),
// AdamW's two moments (ZeRO's chunks of them with o.Zero), the overlap
// o asks for.
func (s Step) Work(o Options) llama.Work {
	ov := parallel.AllOverlap()
	if o.NoOverlap {
		ov = parallel.Overlap{}
	}
	g := s.Grid
	w := llama.Work{Grid: comm.Grid{Data: g.Data, X: g.X, Y: g.Y, Z: g.Z}, Overlap: ov, Train: true,
		Recompute: s.Recompute, Moments: 2, Batch: s.MicroBatch, SeqLen: s.SeqLen, Micro: s.MicroBatches,
		Activations: o.Precision.Activations(), Zero: o.Zero, SplitMaster: o.SplitMaster, MomentDType: o.Moments,
		FusedOptimizer: o.Fused, Clip: o.Fused}
	if o.LoRA > 0 {
		w.LoRA, w.BaseDType = o.adapters(), engine.BF16
	}
	return w
}

// computes says whether the engine computes step s at o's precision on
// its grid (llama.CheckActivations): nil, or why not.
func (s Step) computes(o Options) error {
	g := s.Grid
	if err := llama.CheckActivations(o.Precision.Activations(), comm.Grid{Data: g.Data, X: g.X, Y: g.Y, Z: g.Z}); err != nil {
		return fmt.Errorf("perfmodel: %w", err)
	}
	return nil
}

// adapters are the LoRA adapters of o.LoRA: finetune's defaults, alpha
// twice the rank on q, k, v and o_proj.
func (o Options) adapters() *checkpoints.AdapterConfig {
	return &checkpoints.AdapterConfig{PEFTType: "LORA", TaskType: "CAUSAL_LM", R: o.LoRA, LoRAAlpha: 2 * float64(o.LoRA),
		TargetModules: []string{"q_proj", "k_proj", "v_proj", "o_proj"}}
}

func estimateMemory(cfg *checkpoints.Config, s Step, o Options) Memory {
	it := llama.Itemize(cfg, s.Work(o))
	return Memory{Weights: it.Weights, Gradients: it.Gradients, Optimizer: it.Optimizer,
		Activations: it.Activations, Workspace: it.Gathered}
}
