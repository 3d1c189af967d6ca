// Package commbench measures collectives as nccl-tests does: it times
// all-reduce, all-gather and reduce-scatter of float32 buffers on groups
// of ranks, fits each group size's latency and bus bandwidth, and turns
// the fits into the device the performance model plans with
// (perfmodel.MeasuredDevice).
//
// The ranks are either goroutines of this process (the in-process
// communicator, engine/comm/local) or, when mpirun or srun started this
// process, the MPI job, one rank a process (engine/launch). The world is
// cut into groups of p consecutive ranks that all communicate at once,
// as the groups of a training step do (Options.OneGroup: only the first,
// the others idle, as nccl-tests does).
//
// Sizes and bandwidths follow nccl-tests: a case's Bytes is the full
// buffer (an all-gather's output, a reduce-scatter's input), AlgBW =
// Bytes ÷ time, BusBW = AlgBW × the ring factor (2(p−1)/p for an
// all-reduce, (p−1)/p for the others): the rate at which each rank sends,
// comparable across operations and group sizes with a link's bandwidth.
package commbench

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/local"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/internal/stats"
)

// The transports, as Result.Transport and Bench.Transport name them.
const (
	Local = "local" // in-process ranks (goroutines)
	MPI   = "mpi"   // one rank a process, under mpirun or srun
)

// ops are the collectives that can be timed, by name.
var ops = map[string]comm.Op{"all-reduce": comm.AllReduce, "all-gather": comm.AllGather, "reduce-scatter": comm.ReduceScatter}

// Ops are the names of the collectives that can be timed.
func Ops() []string { return []string{"all-reduce", "all-gather", "reduce-scatter"} }

// CheckOp fails unless name is one of Ops.
func CheckOp(name string) error {
	if _, ok := ops[name]; !ok {
		return fmt.Errorf("unknown collective %q (want all-reduce, all-gather or reduce-scatter)", name)
	}
	return nil
}

// Result is one case's measurement, a JSON line of `memtrain bench comm`.
type Result struct {
	Transport string  `json:"transport"` // Local or MPI
	Op        string  `json:"op"`
	Ranks     int     `json:"ranks"`  // p, the group's size
	Groups    int     `json:"groups"` // groups of p ranks communicating at once
	Bytes     int64   `json:"bytes"`
	Iters     int     `json:"iters"`
	TimeUS    float64 `json:"time_us"` // per call: the slowest rank's mean
	AlgBW     float64 `json:"algbw_gbs"`
	BusBW     float64 `json:"busbw_gbs"`
}

// Fit is the summary of one group size: time per call ≈ LatencyUS +
// Bytes × ring factor ÷ BusBW, fitted over every operation and size
// (Fits).
type Fit struct {
	Transport string  `json:"transport"`
	Op        string  `json:"op"` // "fit"
	Ranks     int     `json:"ranks"`
	Groups    int     `json:"groups"`
	BusBW     float64 `json:"busbw_gbs"`
	LatencyUS float64 `json:"latency_us"`
	// LargestBusBW is the median bus bandwidth of the operations at the
	// largest size, the number nccl-tests would quote.
	LargestBusBW float64 `json:"largest_busbw_gbs"`
}

// Case is one measurement to make: Iters timed calls of Op on groups of
// Ranks ranks, on buffers of Bytes bytes.
type Case struct {
	Op    string
	Ranks int
	Bytes int64
	Iters int
}

// MaxRanks bounds the group sizes and the in-process world: every
// in-process rank is goroutines, a backend and its slot of every rank's
// time (HostBytes). MaxIters bounds the timed calls of a case.
const (
	MaxRanks = 4096
	MaxIters = 1_000_000
)

// ErrNoGroup is the error of Cases and New when no group size fits in
// the world.
var ErrNoGroup = errors.New("no group fits in the world")

// DefaultIters is the number of timed calls a case of bytes gets when
// none is asked for: enough to move 256 MiB, 5 to 200.
func DefaultIters(bytes int64) int {
	return int(min(200, max(5, (256<<20)/bytes)))
}

// Cases are the measurements for every group size of ranks that fits in
// a world of world ranks, every operation of ops and every buffer size
// of sizes, in that order; iters is the timed calls a case, 0 for
// DefaultIters. skipped are the group sizes larger than the world, in
// the order of ranks; when no size is left the error wraps ErrNoGroup.
func Cases(ranks []int, sizes []int64, ops []string, iters, world int) (cases []Case, skipped []int, err error) {
	switch {
	case len(ranks) == 0 || len(sizes) == 0 || len(ops) == 0:
		return nil, nil, fmt.Errorf("want group sizes, buffer sizes and collectives (got %d, %d and %d)", len(ranks), len(sizes), len(ops))
	case iters < 0 || iters > MaxIters:
		return nil, nil, fmt.Errorf("%d timed calls: want 0 (automatic) to %d", iters, MaxIters)
	case world < 1:
		return nil, nil, fmt.Errorf("a world of %d ranks: want at least one", world)
	}
	for _, p := range ranks {
		if p < 1 || p > MaxRanks {
			return nil, nil, fmt.Errorf("groups of %d ranks: want 1 to %d", p, MaxRanks)
		}
	}
	for _, b := range sizes {
		if b < 4 || b%4 != 0 {
			return nil, nil, fmt.Errorf("buffers of %d bytes: want a positive whole number of float32 elements", b)
		}
	}
	for _, op := range ops {
		if err := CheckOp(op); err != nil {
			return nil, nil, err
		}
	}
	for _, p := range ranks {
		if p > world {
			skipped = append(skipped, p)
			continue
		}
		for _, op := range ops {
			for _, b := range sizes {
				it := iters
				if it == 0 {
					it = DefaultIters(b)
				}
				cases = append(cases, Case{Op: op, Ranks: p, Bytes: b, Iters: it})
			}
		}
	}
	if len(cases) == 0 {
		return nil, skipped, fmt.Errorf("%w of %d ranks (groups of %s)", ErrNoGroup, world, joinInts(ranks))
	}
	return cases, skipped, nil
}

// Options are what New measures.
type Options struct {
	Ranks []int    // group sizes
	Sizes []int64  // buffer sizes in bytes, multiples of 4
	Ops   []string // collectives, among Ops
	Iters int      // timed calls a case, after two warm-up calls; 0: DefaultIters
	// OneGroup times one group of each size while the other ranks wait,
	// instead of every group at once.
	OneGroup bool
	// World is the number of in-process ranks, 0 for the largest of
	// Ranks; under mpirun or srun the world is the job and World is not
	// read.
	World int
}

// Bench is a measurement chosen and not yet made: its world and cases.
type Bench struct {
	Transport string // Local or MPI
	World     int    // the world's ranks
	Cases     []Case
	Skipped   []int // group sizes larger than the world (Cases)
	oneGroup  bool
	procs     int // the MPI job's processes, 0 or 1 in process
}

// New chooses the world, the MPI job when mpirun or srun started this
// process (launch.Procs) and in-process ranks otherwise, and the cases
// (Cases) of opts. It starts nothing: Run does.
func New(opts Options) (*Bench, error) {
	procs, err := launch.Procs()
	if err != nil {
		return nil, err
	}
	b := &Bench{Transport: Local, World: opts.World, oneGroup: opts.OneGroup, procs: procs}
	if procs > 1 {
		b.Transport, b.World = MPI, procs
	} else if b.World == 0 && len(opts.Ranks) > 0 {
		b.World = slices.Max(opts.Ranks)
	} else if b.World > MaxRanks {
		return nil, fmt.Errorf("a world of %d in-process ranks: want 1 to %d", b.World, MaxRanks)
	}
	if b.Cases, b.Skipped, err = Cases(opts.Ranks, opts.Sizes, opts.Ops, opts.Iters, b.World); err != nil {
		return nil, err
	}
	return b, nil
}

// HostBytes is about what the ranks of this process allocate at the most,
// for a check against the host's free memory before Run: each rank's
// largest buffer and its chunk, its copy of every rank's time, and a
// MiB of its own (a backend, its goroutines, its communicators' state);
// every rank of the world in process, one under MPI. It saturates at
// math.MaxInt64 (engine.MulBytes) rather than overflow.
func (b *Bench) HostBytes() int64 {
	ranks := int64(b.World)
	if b.Transport == MPI {
		ranks = 1
	}
	var largest int64
	for _, c := range b.Cases {
		largest = max(largest, c.Bytes)
	}
	perRank := engine.SumBytes(engine.MulBytes(2, largest), engine.MulBytes(8, int64(b.World)), 1<<20)
	return engine.MulBytes(ranks, perRank)
}

// Run makes the measurements and returns every case's result and each
// group size's fit (Fits). On an MPI job every process runs it, as one
// rank of the world, which it initialises and finalises; only rank 0
// returns the results, the others nil ones.
func (b *Bench) Run() ([]Result, []Fit, error) {
	var results []Result
	if b.Transport == MPI {
		world, err := launch.MPIWorld(b.procs)
		if err != nil {
			return nil, nil, err
		}
		results, err = runRank(world, b.Cases, b.oneGroup)
		if err != nil {
			return nil, nil, fmt.Errorf("rank %d of %d: %w", world.Rank(), world.Size(), err)
		}
		if err := world.Close(); err != nil {
			return nil, nil, err
		}
		if world.Rank() != 0 {
			return nil, nil, nil
		}
	} else {
		if _, _, err := comm.EnvTimeout(); err != nil {
			return nil, nil, err
		}
		worlds := local.New(b.World)
		errs := make([]error, b.World)
		var wg sync.WaitGroup
		for r, w := range worlds {
			wg.Go(func() {
				res, err := runRank(w, b.Cases, b.oneGroup)
				if r == 0 {
					results = res
				}
				errs[r] = err
				w.Close()
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, nil, err
		}
	}
	for i := range results {
		results[i].Transport = b.Transport
	}
	return results, Fits(results), nil
}

// runRank runs every case as one rank of world and returns, on world
// rank 0, the results (without their Transport). Every rank runs the
// same calls in the same order: the splits, a barrier before each case
// (so that the groups start together), and an all-reduce of every
// rank's time after it.
func runRank(world comm.Comm, cases []Case, oneGroup bool) ([]Result, error) {
	b := cpu.New(cpu.Options{Threads: 1})
	W, rank := world.Size(), world.Rank()
	groups := map[int]comm.Comm{}
	defer func() {
		for _, g := range groups {
			if g != nil {
				g.Close()
			}
		}
	}()
	times := b.Alloc(engine.F32, W)
	defer b.Free(times)
	var out []Result
	for _, c := range cases {
		p := c.Ranks
		g, ok := groups[p]
		nGroups := W / p
		if oneGroup {
			nGroups = 1
		}
		if !ok {
			color := rank / p
			if color >= nGroups {
				color = comm.Undefined
			}
			var err error
			if g, err = world.Split(fmt.Sprintf("bench-%d", p), color, rank); err != nil {
				return nil, err
			}
			groups[p] = g
		}
		var secs float64
		if err := world.Barrier(); err != nil {
			return nil, err
		}
		if g != nil {
			var err error
			if secs, err = timeCollective(b, g, c); err != nil {
				return nil, err
			}
		}
		// The slowest rank's time: every rank adds its own into its slot.
		host := make([]float32, W)
		host[rank] = float32(secs)
		b.Upload(times, host)
		if err := world.AllReduce(times); err != nil {
			return nil, err
		}
		b.Download(host, times)
		if rank != 0 {
			continue
		}
		t := float64(slices.Max(host))
		algbw := float64(c.Bytes) / t / 1e9
		out = append(out, Result{
			Op: c.Op, Ranks: p, Groups: nGroups, Bytes: c.Bytes, Iters: c.Iters,
			TimeUS: stats.RoundSig(t*1e6, 3), AlgBW: stats.RoundSig(algbw, 3),
			BusBW: stats.RoundSig(algbw*comm.SentFactor(ops[c.Op], p), 3),
		})
	}
	return out, nil
}

// timeCollective times c.Iters calls of c's collective on g after two
// warm-up calls (which fault in the buffers' pages), and returns the mean
// seconds a call.
func timeCollective(b *cpu.Backend, g comm.Comm, c Case) (float64, error) {
	n := int(c.Bytes / 4)
	full := b.Alloc(engine.F32, n)
	defer b.Free(full)
	// This rank's chunk, in its own buffer (not in place): what a
	// training step does with gathered weights and scattered gradients.
	_, l := comm.Chunk(n, g.Size(), g.Rank())
	chunk := b.Alloc(engine.F32, max(l, 1))
	defer b.Free(chunk)
	part := chunk.View(0, l)
	call := func() error {
		switch ops[c.Op] {
		case comm.AllReduce:
			return g.AllReduce(full)
		case comm.AllGather:
			return g.AllGather(full, part)
		default:
			return g.ReduceScatter(part, full)
		}
	}
	for range 2 {
		if err := call(); err != nil {
			return 0, err
		}
	}
	start := time.Now()
	for range c.Iters {
		if err := call(); err != nil {
			return 0, err
		}
	}
	return time.Since(start).Seconds() / float64(c.Iters), nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
