package engine

import (
	"math"
	"testing"
)

func TestParsePrecision(t *testing.T) {
	for in, want := range map[string]Precision{"f32": PrecisionF32, "bf16": PrecisionBF16, "bf16-mixed": PrecisionBF16} {
		if got, err := ParsePrecision(in); err != nil || got != want {
			t.Errorf("%s: %v %v", in, got, err)
		}
	}
	if PrecisionF32.Activations() != F32 || PrecisionBF16.Activations() != BF16 {
		t.Error("activation dtypes")
	}
	if _, err := ParsePrecision("fp8"); err == nil {
		t.Error("fp8 accepted")
	}
}

// TestSaturatingBytes: a count too large for an int64 saturates rather
// than wrapping into a size that would pass a memory check.
func TestSaturatingBytes(t *testing.T) {
	const max = math.MaxInt64
	tests := []struct {
		name      string
		got, want int64
	}{
		{"product", MulBytes(3, 5, 7), 105},
		{"product overflowing", MulBytes(1<<40, 1<<30), max},
		{"product of a saturated", MulBytes(max, 2), max},
		{"zero factor", MulBytes(1<<62, 0, 1<<62), 0},
		{"sum", SumBytes(1, 2, 3), 6},
		{"sum overflowing", SumBytes(max-1, 2), max},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

func TestMemoryErrorIsOneLine(t *testing.T) {
	tests := []struct {
		err  MemoryError
		want string
	}{
		{MemoryError{Device: "host", Ranks: 1, What: "training 8.03B parameters", Need: 130 << 30, Have: 24 << 30, Source: "MEMTRAIN_MEMORY_LIMIT",
			Suggestions: []string{"activation recomputation (100.0 GiB)", "a grid of 8 ranks (20.0 GiB a rank)"}},
			"not enough memory on host: training 8.03B parameters needs 130.0 GiB, but 24.0 GiB is free (MEMTRAIN_MEMORY_LIMIT); would fit: activation recomputation (100.0 GiB); or a grid of 8 ranks (20.0 GiB a rank)"},
		{MemoryError{Device: "cuda:1", Ranks: 1, What: "scoring", Need: math.MaxInt64, Have: 80 << 30, Source: "cuMemGetInfo"},
			"not enough memory on cuda:1: scoring needs more than 8 EiB, but 80.0 GiB is free (cuMemGetInfo); nothing smaller fits"},
		{MemoryError{Device: "host", Ranks: 4, What: "training", Need: 4 << 30, Have: 1 << 30},
			"not enough memory on host: training needs 4.0 GiB for its 4 ranks, but 1.0 GiB is free; nothing smaller fits"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("got  %s\nwant %s", got, tt.want)
		}
	}
}
