package team

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// barrierSpin is how long a goroutine polls at a barrier before it blocks.
// Longer than a team's spinFor: the others are at work on the same job
// and due soon, while a blocked goroutine, woken on a virtual machine,
// costs the hypervisor's wake-up (measured: up to 2 ms) at every barrier
// that one goroutine reaches a little late.
const barrierSpin = 20 * time.Millisecond

// A Barrier holds each of n goroutines at Wait until all n have arrived.
// It polls, yielding to other goroutines, for barrierSpin, then blocks.
type Barrier struct {
	n       int32
	arrived atomic.Int32
	phase   atomic.Uint32
	mu      sync.Mutex
	cond    sync.Cond
}

// NewBarrier returns a barrier for n goroutines.
func NewBarrier(n int) *Barrier {
	b := &Barrier{n: int32(n)}
	b.cond.L = &b.mu
	return b
}

// Wait returns once all n goroutines have called it in this phase.
func (b *Barrier) Wait() {
	ph := b.phase.Load()
	if b.arrived.Add(1) == b.n {
		// The last to arrive resets the count before it opens the
		// phase, so that none counts itself into the next one early.
		b.arrived.Store(0)
		b.mu.Lock()
		b.phase.Add(1)
		b.mu.Unlock()
		b.cond.Broadcast()
		return
	}
	start := time.Now()
	for i := 0; b.phase.Load() == ph; i++ {
		if i%yieldEvery != yieldEvery-1 {
			continue
		}
		if time.Since(start) > barrierSpin {
			b.mu.Lock()
			for b.phase.Load() == ph {
				b.cond.Wait()
			}
			b.mu.Unlock()
			return
		}
		runtime.Gosched()
	}
}
