package engine

import (
	"fmt"
	"math"
	"strings"

	"github.com/memtrain/memtrain/internal/units"
)

// Precision says how training stores its numbers.
type Precision int

const (
	// PrecisionF32 keeps weights, gradients, moments and activations in
	// float32.
	PrecisionF32 Precision = iota
	// PrecisionBF16 is mixed precision: bf16 activations and bf16 copies
	// of the weight matrices for compute, float32 master weights,
	// gradients, moments, statistics and loss.
	PrecisionBF16
)

func (p Precision) String() string {
	if p == PrecisionBF16 {
		return "bf16-mixed"
	}
	return "f32"
}

// Activations is the dtype of a model's activations at precision p
// (llama.Options.Activations).
func (p Precision) Activations() DType {
	if p == PrecisionBF16 {
		return BF16
	}
	return F32
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

// Memory accounting multiplies sizes a caller chose (a batch, a sequence
// length) with the model's; rather than wrapping around into a small or
// negative number that would pass a check, a count too large for an
// int64 saturates at math.MaxInt64, which no device has.

// MulBytes is the product of non-negative factors, saturating at
// math.MaxInt64.
func MulBytes(factors ...int64) int64 {
	p := int64(1)
	for _, f := range factors {
		if f <= 0 {
			return 0
		}
		if p > math.MaxInt64/f {
			return math.MaxInt64
		}
		p *= f
	}
	return p
}

// SumBytes is the sum of non-negative terms, saturating at math.MaxInt64.
func SumBytes(terms ...int64) int64 {
	var s int64
	for _, t := range terms {
		if t > math.MaxInt64-s {
			return math.MaxInt64
		}
		s += t
	}
	return s
}

// DeviceMemory is the memory a device has free for the ranks of this
// process that compute on it, as a launch reads it before anything is
// allocated (engine/launch: Launcher.Memory).
type DeviceMemory struct {
	Device string // "host", or the GPU: "cuda:0"
	// Free is the bytes the ranks may allocate there; negative when it
	// cannot be known, which skips the check.
	Free int64
	// Source says where Free comes from: "MemAvailable", "cgroup
	// memory.max", "cuMemGetInfo", or the variable that overrides them.
	Source string
	// Ranks is the number of this process's ranks that compute on the
	// device and share Free: every in-process CPU rank shares the host.
	Ranks int
}

// MemoryError is a computation that does not fit its device: refused
// before anything is allocated, with the changes that would fit.
type MemoryError struct {
	Device string // DeviceMemory.Device
	Ranks  int    // ranks sharing it
	What   string // what needs the memory, e.g. "training 8.03B parameters with AdamW on 4 sequences of 2048 tokens a rank"
	Need   int64  // bytes, for all Ranks
	Have   int64  // bytes free
	Source string // DeviceMemory.Source
	// Suggestions are changes that would fit, each with its own need, in
	// words that name no command's flags ("activation recomputation
	// (61.2 GiB)").
	Suggestions []string
}

func (e *MemoryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "not enough memory on %s: %s needs %s", e.Device, e.What, FormatNeed(e.Need))
	if e.Ranks > 1 {
		fmt.Fprintf(&b, " for its %d ranks", e.Ranks)
	}
	fmt.Fprintf(&b, ", but %s is free", units.FormatBytes(e.Have))
	if e.Source != "" {
		fmt.Fprintf(&b, " (%s)", e.Source)
	}
	if len(e.Suggestions) > 0 {
		fmt.Fprintf(&b, "; would fit: %s", strings.Join(e.Suggestions, "; or "))
	} else {
		b.WriteString("; nothing smaller fits")
	}
	return b.String()
}

// FormatNeed writes bytes of a memory need as MemoryError does: in binary
// units, and "more than 8 EiB" when the count saturated (SumBytes).
func FormatNeed(n int64) string {
	if n == math.MaxInt64 {
		return "more than 8 EiB"
	}
	return units.FormatBytes(n)
}
