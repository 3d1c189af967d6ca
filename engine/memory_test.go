package engine

import (
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
)

func TestEstimateTrainingMemory(t *testing.T) {
	cfg := &checkpoints.Config{
		HiddenSize: 8, IntermediateSize: 16, NumHiddenLayers: 2, NumAttentionHeads: 2, NumKeyValueHeads: 1,
		RMSNormEps: 1e-5, RopeTheta: 1e4, MaxPositionEmbeddings: 16, VocabSize: 10, TieWordEmbeddings: true,
		TorchDType: "float32", HiddenAct: "silu",
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	// Params: embed 80 + 2 × (q 64 + k 32 + v 32 + o 64 + 3 × 128 + 16) + 8 = 1272.
	const n = 1272
	if got := cfg.Params().Total; got != n {
		t.Fatalf("params = %d, want %d", got, n)
	}
	// B=3, T=4, H=8, Q=8, KV=4, I=16, heads=2, V=10, L=2, by the documented formula:
	// layer = 12·(24+16+8+48+2) + 3·2·16 = 1176 + 96 = 1272; final = 12·(16+10) = 312.
	m := EstimateTrainingMemory(cfg, 3, 4, PrecisionF32)
	want := TrainingMemory{Precision: PrecisionF32, Batch: 3, SeqLen: 4,
		Weights: 4 * n, Gradients: 4 * n, Optimizer: 8 * n,
		Activation: 4 * (2*1272 + 312), ActivationRecompute: 4 * (2*12*8 + 1272 + 312)}
	if m != want {
		t.Errorf("f32:\n got %+v\nwant %+v", m, want)
	}
	b := EstimateTrainingMemory(cfg, 3, 4, PrecisionBF16)
	if b.Weights != 6*n || b.Gradients != 4*n || b.Optimizer != 8*n || b.Activation != m.Activation/2 {
		t.Errorf("bf16: %+v", b)
	}
	if m.Total() != m.Weights+m.Gradients+m.Optimizer+m.Activation || m.TotalRecompute() >= m.Total() {
		t.Errorf("totals: %d %d", m.Total(), m.TotalRecompute())
	}
}

func TestParsePrecision(t *testing.T) {
	for in, want := range map[string]Precision{"f32": PrecisionF32, "bf16": PrecisionBF16, "bf16-mixed": PrecisionBF16} {
		if got, err := ParsePrecision(in); err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	if _, err := ParsePrecision("fp8"); err == nil {
		t.Error("fp8 accepted")
	}
}
