// Package commtest is the conformance suite of the communicators in
// package comm: every implementation runs it, as every BLAS runs gonum's
// blas/testblas.
//
// The checks are written once, from the point of view of one rank (a
// Case's Run gets that rank's communicator), so that they run unchanged in
// both settings: Run starts a group of in-process ranks and runs every
// rank's side on a goroutine of its own; RunRank runs inside each process
// of an MPI job, where each process is one rank and checks its own side.
// A rank knows every other rank's inputs (they are generated from the
// rank number), so it can check its results without being told anything.
//
// A rank that sees a wrong value reports it and carries on with the same
// collectives as the other ranks, so that one wrong value does not leave
// the others waiting; only a collective's error ends a rank's case early.
package commtest

import (
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
)

// Factory returns the n communicators (rank 0 first) of a new group of n
// in-process ranks, made with opts, or nil when the implementation cannot
// make a group of that size (the size is then skipped).
type Factory func(t *testing.T, n int, opts ...comm.Option) []comm.Comm

// Config adapts the suite to an implementation.
type Config struct {
	// Backend allocates rank's tensors; nil means one shared CPU backend.
	Backend func(rank int) engine.Backend
	// RankOrder says that sums must equal the float32 sums in rank order,
	// ((x₀ + x₁) + x₂) + …, bit for bit (local.New promises it). Otherwise
	// they must lie within the error bound of a sum in any order of the
	// float64 reference, and be the same on every rank.
	RankOrder bool
	// BF16RankOrder says that BF16 sums are the float32 sums in rank
	// order of the widened values, rounded once to nearest even, bit for
	// bit (local.New and MPI promise it; RankOrder implies it).
	// Otherwise they must lie within the bound of a sum rounded at every
	// addition (checkTypedSums).
	BF16RankOrder bool
	// Sizes are the group sizes to check; nil means 1, 2, 3, 4 and 8.
	// RunRank checks those that fit in its world, on groups split from it.
	Sizes []int
	// Watchdog says that a collective given up by the watchdog returns
	// an error (local.New) rather than ending the process (MPI, NCCL), so
	// that the suite can check it. Only Run checks it.
	Watchdog bool
	// Timeout is the watchdog timeout of the groups Run makes, so that a
	// broken implementation fails rather than hangs; 0 means 30 s.
	Timeout time.Duration
}

func (c Config) sizes() []int {
	if c.Sizes != nil {
		return c.Sizes
	}
	return []int{1, 2, 3, 4, 8}
}

// A Case is one check, run by every rank of a group.
type Case struct {
	Name string
	Run  func(r *R)
}

// Cases are the checks of the suite, in the order Run and RunRank run
// them.
func Cases() []Case { return cases }

// Run checks the implementation behind newGroup with groups of every size
// of cfg.Sizes, one in-process rank per goroutine.
func Run(t *testing.T, newGroup Factory, cfg Config) {
	timeout := cfg.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	backends := backendsOf(cfg)
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			for _, n := range cfg.sizes() {
				t.Run(fmt.Sprintf("p=%d", n), func(t *testing.T) {
					comms := newGroup(t, n, comm.WithTimeout(timeout))
					if comms == nil {
						t.Skipf("no group of %d ranks", n)
					}
					if len(comms) != n {
						t.Fatalf("asked for %d ranks, got %d", n, len(comms))
					}
					runGroup(t, comms, func(r *R) { c.Run(r) }, backends, cfg)
					for _, c := range comms {
						if err := c.Close(); err != nil {
							t.Errorf("Close: %v", err)
						}
					}
				})
			}
		})
	}
	if cfg.Watchdog {
		t.Run("Watchdog", func(t *testing.T) { runWatchdog(t, newGroup, cfg) })
	}
}

// RunRank is Run for a communicator of which this process holds one rank
// (an MPI job): every process of the job calls it with its world. Each
// size of cfg.Sizes that fits is checked on a group split from world.
func RunRank(t *testing.T, world comm.Comm, cfg Config) {
	backends := backendsOf(cfg)
	for _, c := range Cases() {
		t.Run(c.Name, func(t *testing.T) {
			for _, n := range cfg.sizes() {
				if n > world.Size() {
					continue
				}
				t.Run(fmt.Sprintf("p=%d", n), func(t *testing.T) {
					color := comm.Undefined
					if world.Rank() < n {
						color = 0
					}
					sub, err := world.Split(fmt.Sprintf("p%d", n), color, world.Rank())
					if err != nil {
						t.Fatalf("split of the first %d ranks: %v", n, err)
					}
					if sub != nil {
						r := newR(t, sub, backends(sub.Rank()), cfg)
						r.run(func(r *R) { c.Run(r) })
						if err := sub.Close(); err != nil {
							t.Errorf("Close: %v", err)
						}
					}
					// Keep the ranks of the next check together, and
					// those outside this group out of the way.
					if err := world.Barrier(); err != nil {
						t.Fatalf("barrier: %v", err)
					}
				})
			}
		})
	}
}

func backendsOf(cfg Config) func(rank int) engine.Backend {
	if cfg.Backend != nil {
		return cfg.Backend
	}
	b := cpu.New(cpu.Options{Threads: 1})
	return func(int) engine.Backend { return b }
}

// runGroup runs f as every rank of comms, each on its own goroutine.
func runGroup(t *testing.T, comms []comm.Comm, f func(r *R), backends func(int) engine.Backend, cfg Config) {
	var wg sync.WaitGroup
	for rank, c := range comms {
		r := newR(t, c, backends(rank), cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.run(f)
		}()
	}
	wg.Wait()
}

// R is one rank's view of a check: its communicator, its backend, and
// error reporting that names the rank.
type R struct {
	t   *testing.T
	C   comm.Comm
	B   engine.Backend
	cfg Config

	guarded []guarded
}

func newR(t *testing.T, c comm.Comm, b engine.Backend, cfg Config) *R {
	return &R{t: t, C: c, B: b, cfg: cfg}
}

// fatal is the panic with which Fatalf ends a rank's check: t.FailNow may
// not be called from the goroutines that Run starts.
type fatal struct{}

func (r *R) run(f func(r *R)) {
	defer func() {
		r.free()
		if e := recover(); e != nil {
			if _, ok := e.(fatal); !ok {
				r.t.Errorf("rank %d of %d: panic: %v\n%s", r.C.Rank(), r.C.Size(), e, debug.Stack())
			}
		}
	}()
	f(r)
	r.checkGuards()
}

// Errorf reports a failure of this rank and lets the check go on.
func (r *R) Errorf(format string, args ...any) {
	r.t.Helper()
	r.t.Errorf("rank %d of %d: %s", r.C.Rank(), r.C.Size(), fmt.Sprintf(format, args...))
}

// Fatalf reports a failure of this rank and ends its check.
func (r *R) Fatalf(format string, args ...any) {
	r.t.Helper()
	r.Errorf(format, args...)
	panic(fatal{})
}

// Must ends the check if err is not nil: a collective failed, and this
// rank can no longer keep in step with the others.
func (r *R) Must(err error, what string) {
	r.t.Helper()
	if err != nil {
		r.Fatalf("%s: %v", what, err)
	}
}

// guard is the value around every tensor a check makes: a collective
// writing outside its tensor changes it.
const guard = 1234567

const pad = 3

type guarded struct {
	whole  *engine.Tensor
	dtype  engine.DType
	n      int
	guard  float32 // guard as dtype holds it (a BF16 tensor rounds it)
	origin string
}

// Tensor returns a tensor of dtype holding vals, made as a view into a
// larger one, so that offsets are exercised and writes outside it are
// caught when the check ends.
func (r *R) Tensor(dtype engine.DType, vals []float32, origin string) *engine.Tensor {
	n := len(vals)
	whole := r.B.Alloc(dtype, n+2*pad)
	init := make([]float32, n+2*pad)
	for i := range init {
		init[i] = guard
	}
	copy(init[pad:], vals)
	r.B.Upload(whole, init)
	g := Round(dtype, []float32{guard})[0]
	r.guarded = append(r.guarded, guarded{whole: whole, dtype: dtype, n: n, guard: g, origin: origin})
	return whole.View(pad, n)
}

// Round returns vals as a tensor of dtype holds them: rounded to nearest
// even for BF16 (as every backend's Upload rounds), unchanged otherwise.
func Round(dtype engine.DType, vals []float32) []float32 {
	if dtype != engine.BF16 {
		return vals
	}
	out := make([]float32, len(vals))
	for i, v := range vals {
		out[i] = checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(v))
	}
	return out
}

// F32 is Tensor for float32 values.
func (r *R) F32(vals []float32, origin string) *engine.Tensor {
	return r.Tensor(engine.F32, vals, origin)
}

// Values downloads t.
func (r *R) Values(t *engine.Tensor) []float32 {
	out := make([]float32, t.Len())
	r.B.Download(out, t)
	return out
}

func (r *R) checkGuards() {
	for _, g := range r.guarded {
		all := r.Values(g.whole)
		for i, v := range all {
			if (i < pad || i >= pad+g.n) && v != g.guard {
				r.Errorf("%s: element %d outside the tensor of %d changed to %v", g.origin, i-pad, g.n, v)
				break
			}
		}
	}
}

func (r *R) free() {
	for _, g := range r.guarded {
		r.B.Free(g.whole)
	}
	r.guarded = nil
}
