package engine

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
)

// Precision says how training stores its numbers.
type Precision int

const (
	// PrecisionF32 keeps weights, gradients, moments and activations in
	// float32, as the CPU backend trains.
	PrecisionF32 Precision = iota
	// PrecisionBF16 is mixed precision as the GPU backend trains: bf16
	// weights and activations for compute, float32 master weights,
	// gradients and moments.
	PrecisionBF16
)

func (p Precision) String() string {
	if p == PrecisionBF16 {
		return "bf16-mixed"
	}
	return "f32"
}

// ParsePrecision accepts "f32" and "bf16" (or "bf16-mixed").
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "f32", "float32":
		return PrecisionF32, nil
	case "bf16", "bf16-mixed", "bfloat16":
		return PrecisionBF16, nil
	}
	return 0, fmt.Errorf("engine: unknown precision %q (want f32 or bf16)", s)
}

// bytesPerParam returns the bytes of weights, gradients and optimizer state
// that one parameter needs under AdamW.
func (p Precision) bytesPerParam() (weights, grads, optim int64) {
	if p == PrecisionBF16 {
		return 2 + 4, 4, 8 // bf16 compute copy + f32 master; f32 grads; two f32 moments
	}
	return 4, 4, 8
}

func (p Precision) activationBytes() int64 {
	if p == PrecisionBF16 {
		return 2
	}
	return 4
}

// TrainingMemory is the memory needed to fully fine-tune a model with AdamW
// on one device, in bytes.
type TrainingMemory struct {
	Precision  Precision
	Batch      int
	SeqLen     int
	Weights    int64
	Gradients  int64
	Optimizer  int64 // AdamW's two moments
	Activation int64 // activations kept for the backward pass
	// ActivationRecompute is Activation with per-layer recomputation: only
	// each layer's input is kept, and one layer's activations at a time.
	ActivationRecompute int64
}

// Total is the sum without activation recomputation.
func (m TrainingMemory) Total() int64 { return m.Weights + m.Gradients + m.Optimizer + m.Activation }

// TotalRecompute is the sum with activation recomputation.
func (m TrainingMemory) TotalRecompute() int64 {
	return m.Weights + m.Gradients + m.Optimizer + m.ActivationRecompute
}

// EstimateTrainingMemory estimates the memory of one AdamW training step on
// batch sequences of seqLen tokens.
//
// Activations follow the layout of an llm.c-style implementation that
// materialises the attention scores. Per token and layer it keeps the
// layer input, the two normalised inputs and the residual after attention
// (3H plus 2 reciprocal RMS values), the queries and the attention output
// (2·Q), the keys and values (2·KV), the gate, up and gated product (3·I),
// and the softmax probabilities (heads·T per token, heads·T² per sequence).
// After the last layer it keeps the final norm's input and output (2H) and
// the logits (V, whose softmax is taken in place):
//
//	A_layer = B·T·(3H + 2Q + 2KV + 3I + 2) + B·heads·T²
//	A_final = B·T·(2H + V)
//	full      = L·A_layer + A_final
//	recompute = L·B·T·H + A_layer + A_final
//
// times the activation element size (4 bytes in f32, 2 in bf16). The engine
// issue replaces this formula with the engine's own accounting.
func EstimateTrainingMemory(cfg *checkpoints.Config, batch, seqLen int, p Precision) TrainingMemory {
	n := cfg.Params().Total
	w, g, o := p.bytesPerParam()
	b, t := int64(batch), int64(seqLen)
	h, q, kv, i := int64(cfg.HiddenSize), int64(cfg.QDim()), int64(cfg.KVDim()), int64(cfg.IntermediateSize)
	heads, v, l := int64(cfg.NumAttentionHeads), int64(cfg.VocabSize), int64(cfg.NumHiddenLayers)
	layer := b*t*(3*h+2*q+2*kv+3*i+2) + b*heads*t*t
	final := b * t * (2*h + v)
	ab := p.activationBytes()
	return TrainingMemory{
		Precision:           p,
		Batch:               batch,
		SeqLen:              seqLen,
		Weights:             n * w,
		Gradients:           n * g,
		Optimizer:           n * o,
		Activation:          (l*layer + final) * ab,
		ActivationRecompute: (l*b*t*h + layer + final) * ab,
	}
}
