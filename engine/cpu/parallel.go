package cpu

import "sync"

// parallelFor splits the items [0, n) into contiguous chunks and calls fn
// once per chunk, concurrently, returning when every call has returned.
//
// There are min(Threads, ⌈n/grain⌉) chunks, chunk c covering
// [c·n/k, (c+1)·n/k). The partition is a function of n, grain and the
// thread count alone, never of timing, so a kernel that reduces within a
// chunk is reproducible; kernels whose items are independent give the same
// bits for any thread count. grain is the least number of items worth a
// goroutine: below it the work is cheaper than the hand-off.
//
// A panic in fn is re-raised on the calling goroutine once all chunks are
// done, so a kernel's argument checks behave the same with one thread or
// many.
func (b *Backend) parallelFor(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	k := min(b.threads, (n+grain-1)/grain)
	if k <= 1 {
		fn(0, n)
		return
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failure any
	)
	run := func(lo, hi int) {
		defer func() {
			if r := recover(); r != nil {
				mu.Lock()
				if failure == nil {
					failure = r
				}
				mu.Unlock()
			}
		}()
		fn(lo, hi)
	}
	// Chunks 1..k−1 get goroutines; chunk 0 runs here.
	for c := 1; c < k; c++ {
		wg.Add(1)
		go func(lo, hi int) {
			defer wg.Done()
			run(lo, hi)
		}(c*n/k, (c+1)*n/k)
	}
	run(0, n/k)
	wg.Wait()
	if failure != nil {
		panic(failure)
	}
}
