package engine

import "fmt"

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

// NewTrainingMemory sizes the parameter state of a params-parameter model
// under AdamW at precision p; activation sizes come from the model's own
// workspace plan (llama.EstimateTrainingMemory fills them in).
func NewTrainingMemory(params int64, batch, seqLen int, p Precision) TrainingMemory {
	w, g, o := p.bytesPerParam()
	return TrainingMemory{Precision: p, Batch: batch, SeqLen: seqLen, Weights: params * w, Gradients: params * g, Optimizer: params * o}
}

// ActivationScale converts float32 activation bytes to this precision's.
func (p Precision) ActivationScale(f32Bytes int64) int64 {
	return f32Bytes * p.activationBytes() / 4
}
