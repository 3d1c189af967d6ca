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
// The chunks run on the backend's team of workers (package team), awake
// for a while after each kernel, rather than on goroutines started for
// each call: a short kernel on two threads took twice as long as on one
// when its second chunk waited for the runtime to start a goroutine on an
// idle core (measured on a 2-vCPU VM: 139–222 µs against 73–109 µs for
// rounding 2048×256 values to bf16).
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
		mu      sync.Mutex
		failure any
	)
	// Chunk 0 runs here, the others on the team's workers.
	b.team.Parallel(k, func(c int) {
		defer func() {
			if r := recover(); r != nil {
				mu.Lock()
				if failure == nil {
					failure = r
				}
				mu.Unlock()
			}
		}()
		fn(c*n/k, (c+1)*n/k)
	})
	if failure != nil {
		panic(failure)
	}
}
