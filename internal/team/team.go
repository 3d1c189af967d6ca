// Package team owns a fixed set of worker goroutines that take one
// parallel job at a time, for the compute kernels that are too short to
// start goroutines of their own: the GEMM's rectangles and the CPU
// backend's per-element loops share one team, so that between one kernel
// and the next its workers are still awake.
package team

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

// A Team is a fixed set of worker goroutines that run one job at a time,
// each calling job(w) with its own index w, 1 ≤ w ≤ Workers(); the caller
// takes index 0. Between jobs the workers poll for 200 µs, then block.
// It is safe for concurrent use: a call made while another caller's job
// is in flight runs on fresh goroutines instead (see Parallel).
type Team struct {
	workers int
	busy    sync.Mutex // held by the caller of Run while a job is in flight

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

// New starts a team of workers goroutines (none when workers ≤ 0). They
// run until Close.
func New(workers int) *Team {
	workers = max(workers, 0)
	t := &Team{
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

// Workers is the number of worker goroutines, the caller not counted.
func (t *Team) Workers() int { return t.workers }

// Close stops the workers once they finish the job in flight, if any.
// Parallel still works after Close, on fresh goroutines.
func (t *Team) Close() {
	t.quit.Store(true)
	for w := 1; w <= t.workers; w++ {
		select {
		case t.wake[w] <- struct{}{}:
		default:
		}
	}
}

// Parallel calls f(w) for w = 0, …, n−1, f(0) on the calling goroutine and
// the others on the team's workers — or, if n−1 is more than the team has
// or the team is running another caller's job, on fresh goroutines — and
// returns when all have returned. A nil Team runs them on fresh
// goroutines. A panic in f must be recovered by f: a worker's would end the
// process.
func (t *Team) Parallel(n int, f func(w int)) {
	if n <= 1 {
		f(0)
		return
	}
	if t != nil && n-1 <= t.workers && !t.quit.Load() && t.Run(func(w int) {
		if w < n {
			f(w)
		}
	}) {
		return
	}
	var wg sync.WaitGroup
	for w := 1; w < n; w++ {
		wg.Go(func() { f(w) })
	}
	f(0)
	wg.Wait()
}

// Run calls job(w) for w = 0, …, Workers(), job(0) on the calling
// goroutine and the others on the team, and returns when all have
// returned. It returns false without running anything if the team is
// running another caller's job.
func (t *Team) Run(job func(w int)) bool {
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
func (t *Team) work(w int) {
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
