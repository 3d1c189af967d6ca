package commtest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memtrain/memtrain/engine/comm"
)

// runWatchdog checks that a collective that rank 0 never joins fails on
// the other ranks soon after the timeout, with an error naming the group,
// the rank, the collective, the step and the missing rank.
func runWatchdog(t *testing.T, newGroup Factory, cfg Config) {
	const timeout = 200 * time.Millisecond
	backends := backendsOf(cfg)
	for _, n := range []int{2, 3, 4} {
		for _, blocking := range []bool{true, false} {
			t.Run(fmt.Sprintf("p=%d/blocking=%v", n, blocking), func(t *testing.T) {
				comms := newGroup(t, n, comm.WithTimeout(timeout), comm.WithName("z"))
				if comms == nil {
					t.Skipf("no group of %d ranks", n)
				}
				var wg sync.WaitGroup
				for rank := 1; rank < n; rank++ {
					r := newR(t, comms[rank], backends(rank), cfg)
					wg.Add(1)
					go func() {
						defer wg.Done()
						r.run(func(r *R) { watchdogRank(r, blocking, timeout) })
					}()
				}
				wg.Wait()
			})
		}
	}
}

func watchdogRank(r *R, blocking bool, timeout time.Duration) {
	p, rank := r.C.Size(), r.C.Rank()
	r.C.SetStep(7)
	dst := r.F32(make([]float32, 10), "dst")
	off, m := comm.Chunk(10, p, rank)
	start := time.Now()
	var err error
	if blocking {
		err = r.C.AllGather(dst, dst.View(off, m))
	} else {
		err = r.C.IAllGather(dst, dst.View(off, m)).Wait()
	}
	took := time.Since(start)
	if err == nil {
		r.Fatalf("all-gather without rank 0 returned no error")
	}
	// The deadline may start when an earlier rank entered the collective
	// (the ranks start a few milliseconds apart): a tenth of slack below.
	if took < timeout-timeout/10 || took > timeout+5*time.Second {
		r.Errorf("all-gather without rank 0 failed after %v, want about %v", took, timeout)
	}
	var te *comm.TimeoutError
	if !errors.As(err, &te) || te.Peer != 0 || te.Timeout != timeout {
		r.Errorf("error %q: want a *comm.TimeoutError naming rank 0 and %v", err, timeout)
	}
	want := fmt.Sprintf(`comm: group "z" (rank %d of %d): all-gather at step 7: no answer from rank 0 within %v`, rank, p, timeout)
	if !strings.Contains(err.Error(), want) {
		r.Errorf("error %q does not say %q", err, want)
	}
}
