// Package launch starts the ranks of a computation and runs a function on
// each: one rank on one backend, or the ranks of a 4D grid — goroutines
// in this process on the CPU, one GPU a rank with NCCL communicators, or
// one rank a process under mpirun or srun (MPI on the CPU, NCCL over an
// MPI bootstrap on GPUs). The model and trainer code is the same on all
// of them: only the backends and the world communicator differ.
//
// Every command that computes (fine-tuning, evaluation, generation, the
// experiment runner) starts through Run, so that a grid or a GPU is one
// Spec away for each of them.
package launch

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/cuda"
	"github.com/memtrain/memtrain/engine/gemm"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/units"
)

// Spec says where the ranks of a computation run.
type Spec struct {
	// Grid is the 4D grid's shape. The zero Grid is one rank: the
	// function run gets the grid of one rank (parallel.One).
	Grid    comm.Grid
	Overlap parallel.Overlap
	// Device is where ranks compute: the CPU, or one GPU a rank from
	// Device.Index on (in process), or the GPU of each process's local
	// rank (under MPI).
	Device engine.Device
	// Threads are this process's compute threads (0: all cores), shared
	// out over its in-process CPU ranks.
	Threads int
	// BLAS chooses the CPU matrix multiply (gemm.Select: go, openblas or
	// auto; "" is auto).
	BLAS string
	// Model, if set, is the configuration the grid must fit
	// (parallel.Check), checked before anything starts.
	Model *checkpoints.Config
}

// A Rank is one rank of a launch: its place in the grid (the grid of one
// rank for one rank alone) and its own backend.
type Rank struct {
	Grid    *parallel.Grid
	Backend engine.Backend
}

// Lead says whether this rank is the one that writes files and reports:
// rank 0 of the grid, or the only rank.
func (r Rank) Lead() bool { return r.Grid.Rank() == 0 }

// Agree returns nil when every rank of the grid passes a nil err, and an
// error on every rank otherwise (parallel.Grid.Agree): so that a rank that
// failed to start stops the others rather than leaving them waiting for
// it in a collective. One rank alone gets its own err back.
func (r Rank) Agree(err error) error { return r.Grid.Agree(r.Backend, err) }

// Fn is the work of one rank. On a grid every rank calls the same
// collectives in the same order; the Lead rank alone should write files
// and report.
type Fn func(r Rank) error

// A Launcher is a checked Spec, ready to run.
type Launcher struct {
	spec    Spec
	mpi     bool // one rank a process: this process runs its own only
	threads int  // a rank's
	// local is, under MPI, the job's processes on this node, which share
	// its memory (localProcs).
	local int
}

// New checks a spec against the model, the machine and the process's
// launcher before anything is loaded: the grid's divisibility rules, a
// GPU for every in-process rank, and, when mpirun or srun started several
// processes, an MPI build and exactly one process a rank.
func New(s Spec) (*Launcher, error) {
	if err := CheckThreads(s.Threads); err != nil {
		return nil, fmt.Errorf("launch: threads %w", err)
	}
	procs, err := launchedProcs()
	if err != nil {
		return nil, err
	}
	size := 0
	if s.Grid != (comm.Grid{}) {
		if s.Grid.Data < 1 || s.Grid.X < 1 || s.Grid.Y < 1 || s.Grid.Z < 1 {
			return nil, fmt.Errorf("launch: grid %v: every axis needs at least one rank", s.Grid)
		}
		size = s.Grid.Size()
		if s.Model != nil {
			if err := parallel.Check(s.Model, s.Grid); err != nil {
				return nil, &GridError{s.Grid, err}
			}
		}
	}
	useMPI, err := checkLaunch(procs, size, s.Grid)
	if err != nil {
		return nil, err
	}
	l := &Launcher{spec: s, mpi: useMPI}
	if useMPI {
		l.local = localProcs(procs)
	}
	switch {
	case useMPI:
		l.threads = mpiThreads(s.Threads, procs)
	case size == 0:
		l.threads = s.Threads
	default:
		threads := s.Threads
		if threads <= 0 {
			threads = runtime.NumCPU()
		}
		l.threads = max(1, threads/size)
		if s.Device.Kind == engine.CUDA {
			if err := checkCUDARanks(s.Grid, s.Device.Index); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// A GridError is a grid that cannot run: on this model, on these
// devices, or in this job. Err says why without naming the grid.
type GridError struct {
	Grid comm.Grid
	Err  error
}

func (e *GridError) Error() string { return fmt.Sprintf("grid %v: %v", e.Grid, e.Err) }
func (e *GridError) Unwrap() error { return e.Err }

// Run is New(s), then Run(fn).
func Run(s Spec, fn Fn) error {
	l, err := New(s)
	if err != nil {
		return err
	}
	return l.Run(fn)
}

// Ranks is the number of ranks (1 without a grid).
func (l *Launcher) Ranks() int {
	if l.spec.Grid == (comm.Grid{}) {
		return 1
	}
	return l.spec.Grid.Size()
}

// MPI says whether this process runs one rank of a multi-process job
// (and so must not expect the other ranks in its memory).
func (l *Launcher) MPI() bool { return l.mpi }

// Run runs fn on every rank, each with its own backend: in this process,
// or, under MPI, this process's rank alone. It returns when every rank is
// done, with the failing ranks' errors.
func (l *Launcher) Run(fn Fn) error {
	s := l.spec
	if s.Grid == (comm.Grid{}) {
		b, err := l.backend(s.Device)
		if err != nil {
			return err
		}
		defer closeBackend(b)
		return fn(Rank{Grid: parallel.One(b), Backend: b})
	}
	if s.Device.Kind == engine.CUDA {
		if l.mpi {
			return launchMPINCCL(s.Grid, s.Overlap, s.Device.Index, fn)
		}
		return launchCUDA(s.Grid, s.Overlap, s.Device.Index, fn)
	}
	run := func(g *parallel.Grid) error {
		b, err := l.backend(s.Device)
		if err != nil {
			return err
		}
		return fn(Rank{Grid: g, Backend: b})
	}
	if l.mpi {
		return launchMPI(s.Grid, s.Overlap, run)
	}
	return Local(s.Grid, s.Overlap, run)
}

func (l *Launcher) backend(dev engine.Device) (engine.Backend, error) {
	b, _, err := NewBackend(dev, l.threads, l.spec.BLAS)
	return b, err
}

// closeBackend releases a backend that holds a device.
func closeBackend(b engine.Backend) {
	if c, ok := b.(interface{ Close() error }); ok {
		c.Close()
	}
}

// NewBackend returns a backend on dev and the matrix multiply it computes
// with, so that benchmarks measure the very GEMM the backend uses. On a
// GPU that GEMM multiplies host matrices through the device, transfers
// included. threads (0: all cores) and blas (gemm.Select) set the CPU's.
func NewBackend(dev engine.Device, threads int, blas string) (engine.Backend, gemm.Impl, error) {
	if err := CheckThreads(threads); err != nil {
		return nil, nil, fmt.Errorf("launch: threads %w", err)
	}
	if dev.Kind == engine.CUDA {
		b, err := cuda.New(cuda.Options{Device: dev.Index})
		if err != nil {
			return nil, nil, err
		}
		return b, b.HostGEMM(), nil
	}
	g, err := gemm.Select(blas, threads)
	if err != nil {
		return nil, nil, err
	}
	return cpu.New(cpu.Options{Threads: threads, GEMM: g}), g, nil
}

// CheckThreads refuses a thread count below 0 (0 is all cores), which
// would otherwise quietly mean all cores. Its error begins with the
// value, for the caller to put its setting's name before: "-1: want …".
func CheckThreads(n int) error {
	if n < 0 {
		return fmt.Errorf("%d: want 0 (all cores) or more", n)
	}
	return nil
}

// ParseDevice reads a device: "cpu", "cuda" or "cuda:N".
func ParseDevice(s string) (engine.Device, error) {
	switch {
	case s == "cpu":
		return engine.Device{Kind: engine.CPU}, nil
	case s == "cuda":
		return engine.Device{Kind: engine.CUDA}, nil
	case strings.HasPrefix(s, "cuda:"):
		n, err := strconv.Atoi(strings.TrimPrefix(s, "cuda:"))
		if err == nil && n >= 0 {
			return engine.Device{Kind: engine.CUDA, Index: n}, nil
		}
	}
	return engine.Device{}, fmt.Errorf("device %q: want cpu, cuda or cuda:N", s)
}

// ParseOverlap reads which communication is hidden behind compute: a
// comma-separated subset of oar, ors and oag (AxoNN's overlapped
// all-reduce, reduce-scatter and all-gather), or none.
func ParseOverlap(s string) (parallel.Overlap, error) {
	var o parallel.Overlap
	parts, err := units.SplitList(s)
	if err != nil {
		return o, err
	}
	for _, part := range parts {
		switch strings.ToLower(part) {
		case "oar":
			o.AllReduce = true
		case "ors":
			o.ReduceScatter = true
		case "oag":
			o.AllGather = true
		case "none":
		default:
			return o, fmt.Errorf("overlap %q: unknown %q (want oar, ors, oag or none)", s, part)
		}
	}
	return o, nil
}
