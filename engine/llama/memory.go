package llama

import (
	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
)

// EstimateTrainingMemory is the memory of one AdamW training step on
// batch sequences of seqLen tokens, from the engine's own accounting: the
// parameter state at precision p, and exactly the activation workspace the
// model allocates (ActivationBytes), with and without recomputation. The
// CPU backend trains in float32; at bf16 the float activations take half.
func EstimateTrainingMemory(cfg *checkpoints.Config, batch, seqLen int, p engine.Precision) engine.TrainingMemory {
	m := engine.NewTrainingMemory(cfg.Params().Total, batch, seqLen, p)
	m.Activation = p.ActivationScale(ActivationBytes(cfg, batch, seqLen, true, false))
	m.ActivationRecompute = p.ActivationScale(ActivationBytes(cfg, batch, seqLen, true, true))
	return m
}
