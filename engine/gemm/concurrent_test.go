package gemm

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/internal/numtest"
)

// TestSgemmConcurrent runs one Go GEMM from several goroutines at once:
// one call gets the team, the others fall back to fresh goroutines, and all
// must give the one-thread result.
func TestSgemmConcurrent(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	p := newProblem(rng, false, true, 97, 131, 75, 1, 0, 1)
	want := p.run(newGo(1, cpuKernels[0]))
	g := newGo(3, cpuKernels[0])
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 20 {
				if err := numtest.Equal(p.run(g), want); err != nil {
					t.Errorf("concurrent call differs from the one-thread result: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}
