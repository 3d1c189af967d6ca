package local_test

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/commtest"
	"github.com/memtrain/memtrain/engine/comm/local"
	"github.com/memtrain/memtrain/engine/cpu"
)

func newLocal(t *testing.T, n int, opts ...comm.Option) []comm.Comm {
	return local.New(n, opts...)
}

func TestLocalConformance(t *testing.T) {
	commtest.Run(t, newLocal, commtest.Config{RankOrder: true, Watchdog: true})
}

// each runs f as every rank of comms and waits for all.
func each(comms []comm.Comm, f func(c comm.Comm)) {
	var wg sync.WaitGroup
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(c)
		}()
	}
	wg.Wait()
}

func TestLocalMismatchBreaksGroup(t *testing.T) {
	comms := local.New(2, comm.WithTimeout(5*time.Second))
	b := cpu.New(cpu.Options{Threads: 1})
	errs := make([]error, 2)
	each(comms, func(c comm.Comm) {
		if c.Rank() == 0 {
			errs[0] = c.AllReduce(b.Alloc(engine.F32, 4))
		} else {
			errs[1] = c.Broadcast(b.Alloc(engine.F32, 4), 0)
		}
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "out of step") {
			t.Errorf("rank %d: error %v, want one about collectives out of step", r, err)
		}
	}
	// The group is unusable now, and says why at once.
	start := time.Now()
	each(comms, func(c comm.Comm) {
		if err := c.Barrier(); err == nil || !strings.Contains(err.Error(), "earlier failure") {
			t.Errorf("rank %d: barrier after a mismatch: %v", c.Rank(), err)
		}
	})
	if d := time.Since(start); d > time.Second {
		t.Errorf("barrier on a broken group took %v", d)
	}
}

func TestLocalTimeoutBreaksGroup(t *testing.T) {
	comms := local.New(3, comm.WithTimeout(50*time.Millisecond), comm.WithName("y"))
	// Rank 2 never comes; ranks 0 and 1 time out, then rank 2 arrives late.
	each(comms[:2], func(c comm.Comm) {
		if err := c.Barrier(); err == nil {
			t.Errorf("rank %d: no error", c.Rank())
		}
	})
	err := comms[2].Barrier()
	var te *comm.TimeoutError
	if !errors.As(err, &te) || te.Peer != 2 {
		t.Errorf("late rank: %v, want the timeout that broke the group", err)
	}
}

func TestLocalClosed(t *testing.T) {
	c := local.New(1)[0]
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("barrier after Close: %v", err)
	}
}

func TestLocalNotHost(t *testing.T) {
	c := local.New(1)[0]
	err := c.AllReduce(&engine.Tensor{Storage: fakeStorage{}, Shape: []int{2}})
	if err == nil || !strings.Contains(err.Error(), "not a tensor of the CPU backend") {
		t.Errorf("all-reduce of a foreign tensor: %v", err)
	}
}

type fakeStorage struct{}

func (fakeStorage) Device() engine.Device { return engine.Device{Kind: engine.CUDA} }
func (fakeStorage) DType() engine.DType   { return engine.F32 }
func (fakeStorage) Len() int              { return 2 }

func TestEnvTimeout(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
		bad  bool
	}{
		{"", comm.DefaultTimeout, false},
		{"90s", 90 * time.Second, false},
		{"2.5", 2500 * time.Millisecond, false},
		{"soon", 0, true},
		{"-1s", 0, true},
	} {
		t.Setenv(comm.TimeoutEnv, c.env)
		cfg, err := comm.NewConfig()
		if c.bad {
			if err == nil {
				t.Errorf("%s=%q: no error", comm.TimeoutEnv, c.env)
			}
			continue
		}
		if err != nil || cfg.Timeout != c.want || cfg.Name != "world" {
			t.Errorf("%s=%q: %+v, %v; want timeout %v", comm.TimeoutEnv, c.env, cfg, err, c.want)
		}
		// An option wins over the environment.
		if cfg, _ := comm.NewConfig(comm.WithTimeout(time.Second)); cfg.Timeout != time.Second {
			t.Errorf("%s=%q: WithTimeout(1s) gave %v", comm.TimeoutEnv, c.env, cfg.Timeout)
		}
	}
}

func TestChunk(t *testing.T) {
	for _, c := range []struct {
		n, p int
		want []int
	}{
		{7, 4, []int{2, 2, 2, 1}},
		{5, 4, []int{2, 2, 1, 0}},
		{1, 4, []int{1, 0, 0, 0}},
		{0, 3, []int{0, 0, 0}},
		{8, 4, []int{2, 2, 2, 2}},
		{10, 1, []int{10}},
	} {
		next := 0
		for r := 0; r < c.p; r++ {
			off, m := comm.Chunk(c.n, c.p, r)
			if m != c.want[r] || (m > 0 && off != next) || off > c.n {
				t.Errorf("Chunk(%d, %d, %d) = %d, %d; want length %d at %d", c.n, c.p, r, off, m, c.want[r], next)
			}
			next = off + m
		}
		if next != c.n {
			t.Errorf("chunks of %d over %d cover %d", c.n, c.p, next)
		}
	}
}

func TestSentFactor(t *testing.T) {
	for _, c := range []struct {
		op   comm.Op
		p    int
		want float64
	}{
		{comm.AllReduce, 4, 1.5}, {comm.AllGather, 4, 0.75}, {comm.ReduceScatter, 2, 0.5},
		{comm.Broadcast, 2, 0.5}, {comm.Barrier, 4, 0}, {comm.AllReduce, 1, 0},
	} {
		if got := comm.SentFactor(c.op, c.p); got != c.want {
			t.Errorf("SentFactor(%v, %d) = %v, want %v", c.op, c.p, got, c.want)
		}
	}
}

func TestGridCoords(t *testing.T) {
	g := comm.Grid{Data: 2, X: 2, Y: 3, Z: 2}
	for r := range g.Size() {
		d, x, y, z := g.Coords(r)
		if g.Rank(d, x, y, z) != r {
			t.Errorf("Rank(Coords(%d)) = %d", r, g.Rank(d, x, y, z))
		}
	}
	// X fastest, then Y, Z, data.
	if d, x, y, z := g.Coords(1); d != 0 || x != 1 || y != 0 || z != 0 {
		t.Errorf("Coords(1) = %d %d %d %d, want x = 1", d, x, y, z)
	}
	if d, x, y, z := g.Coords(12); d != 1 || x != 0 || y != 0 || z != 0 {
		t.Errorf("Coords(12) = %d %d %d %d, want data = 1", d, x, y, z)
	}
	if _, err := comm.SplitGrid(local.New(1)[0], g); err == nil {
		t.Errorf("SplitGrid of a world of 1 into %v: no error", g)
	}
}

func TestWatchdogHelper(t *testing.T) {
	fired := make(chan error, 1)
	w := comm.Watchdog{Timeout: 20 * time.Millisecond, Fire: func(err error) { fired <- err }}
	stop := w.Watch(comm.Error{Group: "data", Rank: 3, Size: 4, Op: comm.AllReduce, Step: 12})
	select {
	case err := <-fired:
		want := `comm: group "data" (rank 3 of 4): all-reduce at step 12: no answer from the group within 20ms`
		if err.Error() != want {
			t.Errorf("got %q, want %q", err, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watchdog did not fire")
	}
	stop()
	stop = w.Watch(comm.Error{Group: "x"})
	stop()
	select {
	case err := <-fired:
		t.Errorf("stopped watchdog fired: %v", err)
	case <-time.After(60 * time.Millisecond):
	}
}

func TestErrorMessage(t *testing.T) {
	err := &comm.Error{Group: "z", Rank: 1, Size: 2, Op: comm.AllGather, Step: 7, Err: &comm.TimeoutError{Peer: 0, Timeout: 60 * time.Second}}
	want := `comm: group "z" (rank 1 of 2): all-gather at step 7: no answer from rank 0 within 60s`
	if err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
}

// BenchmarkLocalAllReduce measures an all-reduce of 4 in-process ranks;
// the bytes are one rank's tensor.
func BenchmarkLocalAllReduce(b *testing.B) {
	for _, n := range []int{1 << 10, 1 << 20, 16 << 20} {
		b.Run(fmtSize(n), func(b *testing.B) {
			be := cpu.New(cpu.Options{Threads: 1})
			comms := local.New(4)
			ts := make([]*engine.Tensor, len(comms))
			for r := range ts {
				ts[r] = be.Alloc(engine.F32, n)
			}
			b.SetBytes(int64(4 * n))
			b.ResetTimer()
			var wg sync.WaitGroup
			for r, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range b.N {
						if err := c.AllReduce(ts[r]); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

func fmtSize(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + "Mi"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + "Ki"
	}
	return strconv.Itoa(n)
}
