package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestBiasThreadCountIndependence checks that AddBias and BiasGrad give
// the same bits for any thread count, on F32 and BF16 activations: the
// columns BiasGrad's goroutines own change with the threads, each
// column's sum over the rows must not. 4099 rows of 129 make more than
// one goroutine's share of columns at every count tried.
func TestBiasThreadCountIndependence(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const rows, cols = 4099, 129
	y, bias, dy, db0 := randn(rng, rows*cols), randn(rng, cols), randn(rng, rows*cols), randn(rng, cols)
	for _, dt := range []engine.DType{engine.F32, engine.BF16} {
		run := func(threads int) [][]float32 {
			b := New(Options{Threads: threads})
			put := func(x []float32, shape ...int) *engine.Tensor {
				t := b.Alloc(dt, shape...)
				b.Upload(t, x)
				return t
			}
			ty, db := put(y, rows, cols), upload(b, db0, cols)
			b.AddBias(ty, upload(b, bias, cols))
			b.BiasGrad(db, put(dy, rows, cols))
			got := [][]float32{make([]float32, rows*cols), make([]float32, cols)}
			b.Download(got[0], ty)
			b.Download(got[1], db)
			return got
		}
		want := run(1)
		for _, threads := range []int{2, 3, 8} {
			for i, got := range run(threads) {
				if err := numtest.Equal(got, want[i]); err != nil {
					t.Errorf("%v, threads=%d: %s against one thread: %v", dt, threads, []string{"AddBias", "BiasGrad"}[i], err)
				}
			}
		}
	}
}

// TestBiasGradSumsInFloat64 checks that BiasGrad's column sums do not
// lose what a float32 sum would: 2²⁴ + 1 + 1 − 2²⁴ is 2 in float64 and 0
// in float32 summed in order.
func TestBiasGradSumsInFloat64(t *testing.T) {
	b := New(Options{Threads: 2})
	db := b.Alloc(engine.F32, 1)
	b.BiasGrad(db, upload(b, []float32{1 << 24, 1, 1, -(1 << 24)}, 4, 1))
	if got := Float32s(db)[0]; got != 2 {
		t.Errorf("BiasGrad of 2²⁴, 1, 1, −2²⁴ = %v, want 2", got)
	}
}
