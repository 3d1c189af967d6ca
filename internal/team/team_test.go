package team

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRun runs jobs on a team, some after its workers have blocked, and
// checks every index ran every job and that Close stops the workers.
func TestRun(t *testing.T) {
	before := runtime.NumGoroutine()
	tm := New(3)
	var counts [4]atomic.Int64
	for job := 0; job < 200; job++ {
		if job%50 == 49 {
			// Let the workers stop polling and block.
			time.Sleep(2 * spinFor)
		}
		if !tm.Run(func(w int) { counts[w].Add(1) }) {
			t.Fatal("idle team refused a job")
		}
	}
	for w := range counts {
		if n := counts[w].Load(); n != 200 {
			t.Errorf("worker %d ran %d jobs, want 200", w, n)
		}
	}
	tm.Close()
	waitGoroutines(t, before)
}

func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > want {
		t.Errorf("%d goroutines after Close, %d before the team", n, want)
	}
}

// TestParallel calls Parallel with fewer, as many and more indices than the
// team has, from several goroutines at once (all but one then run on fresh
// goroutines), and after Close: each index must run exactly once a call.
func TestParallel(t *testing.T) {
	tm := New(2)
	check := func(n int) {
		hits := make([]atomic.Int64, n)
		tm.Parallel(n, func(w int) { hits[w].Add(1) })
		for w := range hits {
			if h := hits[w].Load(); h != 1 {
				t.Errorf("Parallel(%d): index %d ran %d times", n, w, h)
			}
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 100 {
				check(i%6 + 1)
			}
		})
	}
	wg.Wait()
	tm.Close()
	for n := range 5 {
		check(n + 1)
	}
}

// TestNoWorkers is a team of none: every index but 0 runs on a fresh
// goroutine.
func TestNoWorkers(t *testing.T) {
	tm := New(0)
	var sum atomic.Int64
	tm.Parallel(3, func(w int) { sum.Add(int64(w + 1)) })
	if s := sum.Load(); s != 6 {
		t.Errorf("sum of indices+1 = %d, want 6", s)
	}
}

// TestNilTeam checks that a nil Team's Parallel runs every index, on fresh
// goroutines, as Batched relies on for an Impl with no team.
func TestNilTeam(t *testing.T) {
	var tm *Team
	for _, n := range []int{1, 2, 5} {
		seen := make([]atomic.Int32, n)
		tm.Parallel(n, func(w int) { seen[w].Add(1) })
		for w := range seen {
			if got := seen[w].Load(); got != 1 {
				t.Errorf("n=%d: f(%d) ran %d times, want 1", n, w, got)
			}
		}
	}
}
