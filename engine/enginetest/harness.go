package enginetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/internal/numtest"
)

// Sentinels fill the margins around every tensor the suite makes. The
// float one is a NaN with a recognisable payload: a kernel that reads past
// a view turns its result into NaN, and one that writes past it changes
// the bits.
var (
	sentinelF32 = math.Float32frombits(0x7fc0dead)
	sentinelI32 = int32(-0x5eed)
	// sentinelBF16 is sentinelF32 as a BF16 tensor holds it: a NaN still.
	sentinelBF16 = roundBF16(sentinelF32)
)

// harness is one subtest's backend, random source and tensors.
type harness struct {
	t   *testing.T
	be  engine.Backend
	rng *rand.Rand
	tol float64 // Config.Tolerance
	// poisoned is Config.Poisoned: Empty tensors hold NaN (I32: −1).
	poisoned bool
	bufs     []*buffer
	base     int64 // MemStats().Allocated before the subtest
}

// buffer is one allocation: the view the test uses, placed pad0 elements
// into whole, with sentinels on both sides.
type buffer struct {
	whole, view *engine.Tensor
	pad0, n     int
}

func newHarness(t *testing.T, cfg Config, seed uint64) *harness {
	be := cfg.New()
	h := &harness{t: t, be: be, rng: rand.New(rand.NewPCG(seed, 0x5eed)), tol: cfg.Tolerance,
		poisoned: cfg.Poisoned, base: be.MemStats().Allocated}
	t.Cleanup(h.finish)
	return h
}

// finish checks every margin's sentinels, frees every tensor and checks
// that the backend's accounting returns to where it started.
func (h *harness) finish() {
	for _, b := range h.bufs {
		h.checkMargins(b)
		h.be.Free(b.whole)
	}
	if got := h.be.MemStats().Allocated; got != h.base {
		h.t.Errorf("MemStats().Allocated = %d after freeing every tensor, want %d", got, h.base)
	}
}

func (h *harness) checkMargins(b *buffer) {
	total := b.whole.Len()
	if b.whole.DType() == engine.I32 {
		all := make([]int32, total)
		h.be.DownloadInt32(all, b.whole)
		for i, v := range all {
			if (i < b.pad0 || i >= b.pad0+b.n) && v != sentinelI32 {
				h.t.Errorf("element %d of an allocation was written outside the view [%d,%d): %d", i, b.pad0, b.pad0+b.n, v)
				return
			}
		}
		return
	}
	sentinel := sentinelF32
	if b.whole.DType() == engine.BF16 {
		sentinel = sentinelBF16
	}
	all := make([]float32, total)
	h.be.Download(all, b.whole)
	for i, v := range all {
		if (i < b.pad0 || i >= b.pad0+b.n) && math.Float32bits(v) != math.Float32bits(sentinel) {
			h.t.Errorf("element %d of an allocation was written outside the view [%d,%d): %g", i, b.pad0, b.pad0+b.n, v)
			return
		}
	}
}

// alloc returns a view of the given shape at a random nonzero offset into a
// larger allocation, its margins holding sentinels and its own elements
// set to data (or zero when data is nil).
func (h *harness) alloc(dtype engine.DType, shape []int) *buffer {
	n := engine.Elements(shape)
	pad0, pad1 := 1+h.rng.IntN(7), 1+h.rng.IntN(5)
	whole := h.be.Alloc(dtype, pad0+n+pad1)
	b := &buffer{whole: whole, view: whole.View(pad0, shape...), pad0: pad0, n: n}
	h.bufs = append(h.bufs, b)
	return b
}

// f32 makes an F32 tensor holding data (zeros if nil).
func (h *harness) f32(data []float32, shape ...int) *engine.Tensor {
	b := h.alloc(engine.F32, shape)
	all := make([]float32, b.whole.Len())
	for i := range all {
		all[i] = sentinelF32
	}
	if data != nil {
		if len(data) != b.n {
			panic(fmt.Sprintf("enginetest: %d values for shape %v", len(data), shape))
		}
		copy(all[b.pad0:], data)
	} else {
		clear(all[b.pad0 : b.pad0+b.n])
	}
	h.be.Upload(b.whole, all)
	return b.view
}

// bf16 makes a BF16 tensor holding data rounded to bf16 (zeros if nil).
func (h *harness) bf16(data []float32, shape ...int) *engine.Tensor {
	b := h.alloc(engine.BF16, shape)
	all := make([]float32, b.whole.Len())
	for i := range all {
		all[i] = sentinelF32
	}
	if data != nil {
		if len(data) != b.n {
			panic(fmt.Sprintf("enginetest: %d values for shape %v", len(data), shape))
		}
		copy(all[b.pad0:], data)
	} else {
		clear(all[b.pad0 : b.pad0+b.n])
	}
	h.be.Upload(b.whole, all)
	return b.view
}

// roundBF16 is v rounded to bf16 as Upload into a BF16 tensor rounds it
// (to nearest, ties to even: checkpoints.Float32ToBF16) and widened back.
func roundBF16(v float32) float32 {
	return checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(v))
}

// nan makes an F32 tensor full of NaN: for outputs that must be
// overwritten, every element.
func (h *harness) nan(shape ...int) *engine.Tensor {
	return h.f32(fill(engine.Elements(shape), float32(math.NaN())), shape...)
}

// i32 makes an I32 tensor holding data.
func (h *harness) i32(data []int32, shape ...int) *engine.Tensor {
	b := h.alloc(engine.I32, shape)
	all := make([]int32, b.whole.Len())
	for i := range all {
		all[i] = sentinelI32
	}
	copy(all[b.pad0:], data)
	h.be.UploadInt32(b.whole, all)
	return b.view
}

// get downloads t as float32.
func (h *harness) get(t *engine.Tensor) []float32 {
	out := make([]float32, t.Len())
	h.be.Download(out, t)
	return out
}

// getInt downloads an I32 tensor.
func (h *harness) getInt(t *engine.Tensor) []int32 {
	out := make([]int32, t.Len())
	h.be.DownloadInt32(out, t)
	return out
}

// randn returns n normal values times scale, rounded to float32.
func (h *harness) randn(n int, scale float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(h.rng.NormFloat64() * scale)
	}
	return x
}

// uniform returns n values uniform in [lo, hi).
func (h *harness) uniform(n int, lo, hi float64) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(lo + (hi-lo)*h.rng.Float64())
	}
	return x
}

// ints returns n integers uniform in [0, hi).
func (h *harness) ints(n, hi int) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(h.rng.IntN(hi))
	}
	return x
}

// close checks got against the float64 reference want with tolerance tol
// (times Config.Tolerance), relative to the largest reference magnitude.
// A NaN anywhere in got fails.
func (h *harness) close(what string, got []float32, want []float64, tol float64) {
	h.t.Helper()
	h.closeFloor(what, got, want, tol, 1e-6)
}

// closeFloor is close with the reference magnitude taken as at least
// floor: for results whose exact value cancels to (nearly) zero, floor is
// the size of the terms whose rounding remains.
func (h *harness) closeFloor(what string, got []float32, want []float64, tol, floor float64) {
	h.t.Helper()
	h.within(what, got, want, 0, tol, floor)
}

// within checks each element of got against the float64 reference within
// (rel·|want_i| + tol·max(max|want|, floor)) × the harness's scale: rel is
// a rounding of each element of its own (a bf16 output's, closeBF16), tol
// the float32 computation's error relative to the largest reference. A
// NaN or infinity on either side fails (numtest.Close).
func (h *harness) within(what string, got []float32, want []float64, rel, tol, floor float64) {
	h.t.Helper()
	if emptyTensors(got, want) {
		return
	}
	if err := numtest.Close(got, want, numtest.Tol{Rel: rel * h.tol, Max: tol * h.tol, Floor: floor}); err != nil {
		h.t.Errorf("%s: %v", what, err)
	}
}

// equal checks got against want bit for bit.
func (h *harness) equal(what string, got, want []float32) {
	h.t.Helper()
	if emptyTensors(got, want) {
		return
	}
	if err := numtest.Equal(got, want); err != nil {
		h.t.Errorf("%s: %v", what, err)
	}
}

// emptyTensors reports whether got and want are both the values of empty
// tensors, which the suite's kernels must handle (AdamWStep's sizes, say)
// and numtest refuses to compare as nothing.
func emptyTensors[W float32 | float64](got []float32, want []W) bool {
	return len(got) == 0 && len(want) == 0
}

// equalInt checks two int32 slices for equality.
func (h *harness) equalInt(what string, got, want []int32) {
	h.t.Helper()
	if len(got) != len(want) {
		h.t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	for i := range got {
		if got[i] != want[i] {
			h.t.Errorf("%s: element %d is %d, want %d", what, i, got[i], want[i])
			return
		}
	}
}

// f64 widens float32 values.
func f64(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

// fill returns n copies of v.
func fill(n int, v float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = v
	}
	return x
}

// addScaled returns a + s·b.
func addScaled(a []float32, s float64, b []float64) []float64 {
	y := make([]float64, len(a))
	for i := range a {
		y[i] = float64(a[i]) + s*b[i]
	}
	return y
}

// sqrtTol is tol·√k, the tolerance of a k-term float32 sum.
func sqrtTol(tol float64, k int) float64 { return tol * math.Sqrt(float64(max(k, 1))) }
