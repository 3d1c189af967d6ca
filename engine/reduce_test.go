package engine_test

import (
	"math"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
)

// TestSumSquaresEach: each tensor's sum of squares, as SumSquares alone
// gives it, in order; none for no tensors.
func TestSumSquaresEach(t *testing.T) {
	b := cpu.New(cpu.Options{Threads: 2})
	var xs []*engine.Tensor
	var want []float32
	for n := 1; n <= 5; n++ {
		x := b.Alloc(engine.F32, 3*n)
		vals := make([]float32, 3*n)
		for i := range vals {
			vals[i] = float32(math.Sin(float64(n*100 + i)))
		}
		b.Upload(x, vals)
		one := b.Alloc(engine.F32, 1)
		b.SumSquares(one, x)
		got := make([]float32, 1)
		b.Download(got, one)
		b.Free(one)
		xs, want = append(xs, x), append(want, got[0])
	}
	got := engine.SumSquaresEach(b, xs)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Errorf("tensor %d: %v, want %v", i, got[i], want[i])
		}
	}
	if len(engine.SumSquaresEach(b, nil)) != 0 {
		t.Error("sums for no tensors")
	}
}
