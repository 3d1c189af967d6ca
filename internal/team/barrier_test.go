package team

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// TestBarrier: no goroutine passes a barrier before all have reached it.
func TestBarrier(t *testing.T) {
	// Each of n goroutines adds to its slot of round r only after all
	// have finished round r−1; a goroutine that skipped a barrier would
	// see a slot of the round before still unfinished.
	const n, rounds = 3, 2000
	b := NewBarrier(n)
	var done [n]atomic.Int64
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failure string
	for w := range n {
		wg.Go(func() {
			for r := int64(1); r <= rounds; r++ {
				for v := range n {
					if got := done[v].Load(); got < r-1 {
						mu.Lock()
						failure = fmt.Sprintf("goroutine %d in round %d saw goroutine %d at round %d", w, r, v, got)
						mu.Unlock()
					}
				}
				done[w].Store(r)
				b.Wait()
			}
		})
	}
	wg.Wait()
	if failure != "" {
		t.Fatal(failure)
	}
}
