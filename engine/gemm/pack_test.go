package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// TestPack checks the packing routines, the portable ones and those this
// CPU runs, against their definitions.
func TestPack(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	type packFunc func(dst []float32, w int, src []float32, ld, kc, n int, alpha float32)
	for _, w := range []int{4, 6, 12, 16, 32} {
		for _, kc := range []int{1, 15, 16, 17, 40, 53} {
			for _, alpha := range []float32{1, -0.5} {
				// Rows: kc source rows of n values, n spanning panels.
				for _, n := range []int{1, w - 1, w, 3*w + 5, 9*w + 2} {
					if n < 1 {
						continue
					}
					ld := n + 3
					src, _ := randMatrix(rng, kc, ld, 0, 1)
					want := make([]float32, ceilDiv(n, w)*w*kc)
					for q := 0; q*w < n; q++ {
						for p := 0; p < kc; p++ {
							for i := 0; i < w && q*w+i < n; i++ {
								want[q*w*kc+p*w+i] = alpha * src[p*ld+q*w+i]
							}
						}
					}
					for name, f := range map[string]packFunc{"packRows": packRows, "packRowsGo": packRowsGo} {
						got := make([]float32, len(want))
						for i := range got {
							got[i] = float32(math.NaN()) // padding must be written
						}
						f(got, w, src, ld, kc, n, alpha)
						if err := numtest.Equal(got, want); err != nil {
							t.Errorf("%s(w=%d, kc=%d, n=%d, alpha=%g): %v", name, w, kc, n, alpha, err)
						}
					}
				}
				// Columns: n ≤ w source rows of kc values.
				for _, n := range []int{1, w - 1, w} {
					if n < 1 {
						continue
					}
					ld := kc + 2
					src, _ := randMatrix(rng, n, ld, 0, 1)
					want := make([]float32, w*kc)
					for p := 0; p < kc; p++ {
						for i := 0; i < n; i++ {
							want[p*w+i] = alpha * src[i*ld+p]
						}
					}
					for name, f := range map[string]packFunc{"packCols": packCols, "packColsGo": packColsGo} {
						got := make([]float32, len(want)) // cleared, as callers do
						f(got, w, src[:(n-1)*ld+kc], ld, kc, n, alpha)
						if err := numtest.Equal(got, want); err != nil {
							t.Errorf("%s(w=%d, kc=%d, n=%d, alpha=%g): %v", name, w, kc, n, alpha, err)
						}
					}
				}
			}
		}
	}
}
