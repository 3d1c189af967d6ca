package gemm

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestTeam(t *testing.T) {
	before := runtime.NumGoroutine()
	tm := newTeam(3)
	var counts [4]atomic.Int64
	for job := 0; job < 200; job++ {
		if job%50 == 49 {
			// Let the workers stop polling and block.
			time.Sleep(2 * spinFor)
		}
		if !tm.run(func(w int) { counts[w].Add(1) }) {
			t.Fatal("idle team refused a job")
		}
	}
	for w := range counts {
		if n := counts[w].Load(); n != 200 {
			t.Errorf("worker %d ran %d jobs, want 200", w, n)
		}
	}
	tm.close()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after close, %d before the team", n, before)
	}
}

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
				if got := p.run(g); !bitsEqual(got, want) {
					t.Error("concurrent call differs from the one-thread result")
					return
				}
			}
		})
	}
	wg.Wait()
}
