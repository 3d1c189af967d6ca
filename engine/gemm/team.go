package gemm

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// spinFor is how long a team's goroutines poll for the next job (or, for
// the caller, for the last worker to finish) before they block. Waking a
// blocked goroutine takes the runtime, and on a virtual machine the
// hypervisor, tens of microseconds, as long as a whole 256³ product on one
// core; a polling goroutine starts within a microsecond. Polling yields to
// any other runnable goroutine about every microsecond, so it takes little
// CPU time that something else wants.
const spinFor = 200 * time.Microsecond

// yieldEvery is how many times a polling goroutine checks its condition
// between yields to the scheduler (about a microsecond): yielding on every
// check would let the runtime move the pollers around and put them to
// sleep, which is what polling is meant to avoid.
const yieldEvery = 256

// team is a fixed set of worker goroutines that run one job at a time,
// each calling job(w) with its own index w, 1 ≤ w ≤ workers; the caller
// takes index 0. Between jobs the workers poll for spinFor, then block.
type team struct {
	workers int
	busy    sync.Mutex // held by the caller of run while a job is in flight

	job     func(w int)
	seq     atomic.Uint64 // incremented for each job; workers wait for a change
	pending atomic.Int64  // workers that have not finished the current job
	quit    atomic.Bool

	// A worker that stops polling sets parked[w] and waits on wake[w];
	// the caller likewise with callerParked and done.
	parked       []atomic.Bool
	wake         []chan struct{}
	callerParked atomic.Bool
	done         chan struct{}
}

// newTeam starts workers goroutines.
func newTeam(workers int) *team {
	t := &team{
		workers: workers,
		parked:  make([]atomic.Bool, workers+1),
		wake:    make([]chan struct{}, workers+1),
		done:    make(chan struct{}, 1),
	}
	for w := 1; w <= workers; w++ {
		t.wake[w] = make(chan struct{}, 1)
		go t.work(w)
	}
	return t
}

// close stops the workers once they finish the job in flight, if any.
func (t *team) close() {
	t.quit.Store(true)
	for w := 1; w <= t.workers; w++ {
		select {
		case t.wake[w] <- struct{}{}:
		default:
		}
	}
}

// run calls job(w) for w = 0, …, workers, job(0) on the calling goroutine
// and the others on the team, and returns when all have returned. It
// returns false without running anything if the team is running another
// caller's job.
func (t *team) run(job func(w int)) bool {
	if !t.busy.TryLock() {
		return false
	}
	defer t.busy.Unlock()
	t.job = job
	t.pending.Store(int64(t.workers))
	t.seq.Add(1)
	for w := 1; w <= t.workers; w++ {
		if t.parked[w].Load() {
			select {
			case t.wake[w] <- struct{}{}:
			default:
			}
		}
	}
	job(0)
	// Wait for the workers: poll, then block.
	start := time.Now()
	for i := 0; t.pending.Load() != 0; i++ {
		if i%yieldEvery != yieldEvery-1 {
			continue
		}
		if time.Since(start) > spinFor {
			t.callerParked.Store(true)
			if t.pending.Load() != 0 {
				<-t.done
			}
			t.callerParked.Store(false)
			// A worker may have signalled after the check above
			// without the wait consuming it: drain that token.
			select {
			case <-t.done:
			default:
			}
			continue
		}
		runtime.Gosched()
	}
	t.job = nil
	return true
}

// work is worker w's loop.
func (t *team) work(w int) {
	var last uint64 // the team starts at job 0, perhaps before w runs
	for {
		start := time.Now()
		for i := 0; t.seq.Load() == last; i++ {
			if i%yieldEvery != yieldEvery-1 {
				continue
			}
			if t.quit.Load() {
				return
			}
			if time.Since(start) > spinFor {
				t.parked[w].Store(true)
				if t.seq.Load() == last && !t.quit.Load() {
					<-t.wake[w]
				}
				t.parked[w].Store(false)
				start = time.Now()
				continue
			}
			runtime.Gosched()
		}
		last = t.seq.Load()
		t.job(w)
		if t.pending.Add(-1) == 0 && t.callerParked.Load() {
			select {
			case t.done <- struct{}{}:
			default:
			}
		}
	}
}
