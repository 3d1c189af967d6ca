package engine

import "testing"

func TestNewTrainingMemory(t *testing.T) {
	m := NewTrainingMemory(1000, 2, 8, PrecisionF32)
	if m.Weights != 4000 || m.Gradients != 4000 || m.Optimizer != 8000 {
		t.Errorf("f32: %+v", m)
	}
	m.Activation, m.ActivationRecompute = 500, 100
	if m.Total() != 16500 || m.TotalRecompute() != 16100 {
		t.Errorf("totals %d %d", m.Total(), m.TotalRecompute())
	}
	b := NewTrainingMemory(1000, 2, 8, PrecisionBF16)
	if b.Weights != 6000 || b.Gradients != 4000 || b.Optimizer != 8000 || PrecisionBF16.ActivationScale(400) != 200 {
		t.Errorf("bf16: %+v", b)
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
