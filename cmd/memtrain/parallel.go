package main

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/spf13/pflag"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/engine/perfmodel"
)

// parallelFlags run a command on a 4D grid of ranks: in-process ones, or
// one a process under mpirun (mpi_launch_env.go).
type parallelFlags struct {
	grid    string
	overlap string
}

func (f *parallelFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.grid, "parallel", "", "run on a grid of ranks, e.g. dp=2,x=2,y=1,z=2 (data × X × Y × Z; axes left out are 1; see `memtrain plan`): in process, or one rank a process under mpirun with an MPI build")
	fl.StringVar(&f.overlap, "overlap", "oar,ors,oag", "with --parallel: communication hidden behind compute, a comma-separated subset of oar, ors, oag, or none")
}

// parseOverlap reads --overlap.
func parseOverlap(s string) (parallel.Overlap, error) {
	var o parallel.Overlap
	for _, part := range strings.Split(s, ",") {
		switch strings.ToLower(strings.TrimSpace(part)) {
		case "oar":
			o.AllReduce = true
		case "ors":
			o.ReduceScatter = true
		case "oag":
			o.AllGather = true
		case "none", "":
		default:
			return o, fmt.Errorf("--overlap %q: unknown %q (want oar, ors, oag or none)", s, part)
		}
	}
	return o, nil
}

// rankGrid is a command's grid, checked against the model: nil without
// --parallel.
type rankGrid struct {
	shape   comm.Grid
	overlap parallel.Overlap
	engine  engineFlags // one rank's: the threads shared out
	// mpi runs this process's one rank of a job launched by mpirun or
	// srun (mpi_launch_env.go) rather than every rank in process.
	mpi bool
	// device is --device: with CUDA, a GPU a rank from its index on
	// (parallel_cuda.go).
	device engine.Device
}

// setup parses the flags and checks the grid against the model in
// modelDir (perfmodel's rules and words) and the engine flags: ranks
// compute on the CPU, or with --device cuda on a GPU each, with NCCL
// communicators (in process, there must be a GPU for every rank). Under
// mpirun or srun with several processes, the grid must have one rank per
// process (checkLaunch).
func (f parallelFlags) setup(modelDir string, ef engineFlags) (*rankGrid, error) {
	procs, err := launchedProcs()
	if err != nil {
		return nil, err
	}
	if f.grid == "" {
		_, err := checkLaunch(procs, 0, "")
		return nil, err
	}
	g, err := perfmodel.ParseGrid(f.grid)
	if err != nil {
		return nil, err
	}
	ov, err := parseOverlap(f.overlap)
	if err != nil {
		return nil, err
	}
	cfg, err := checkpoints.ReadConfig(modelDir)
	if err != nil {
		return nil, err
	}
	if err := g.Validate(cfg); err != nil {
		return nil, fmt.Errorf("--parallel: %w", err)
	}
	dev, err := parseDevice(ef.device)
	if err != nil {
		return nil, err
	}
	useMPI, err := checkLaunch(procs, g.Size(), f.grid)
	if err != nil {
		return nil, err
	}
	if dev.Kind == engine.CUDA && !useMPI {
		if err := checkCUDARanks(f.grid, g.Size(), dev.Index); err != nil {
			return nil, err
		}
	}
	if useMPI {
		ef.threads = mpiThreads(ef.threads, procs)
	} else {
		threads := ef.threads
		if threads <= 0 {
			threads = runtime.NumCPU()
		}
		ef.threads = max(1, threads/g.Size())
	}
	return &rankGrid{shape: comm.Grid{Data: g.Data, X: g.X, Y: g.Y, Z: g.Z}, overlap: ov, engine: ef, mpi: useMPI, device: dev}, nil
}

// launch runs fn on every rank of the grid, each with its own backend: in
// this process, or, under MPI, this process's rank alone. Either way the
// commands let rank 0 alone print and write files.
func (rg *rankGrid) launch(fn func(g *parallel.Grid, b engine.Backend) error) error {
	if rg.device.Kind == engine.CUDA {
		if rg.mpi {
			return launchMPINCCL(rg.shape, rg.overlap, rg.device.Index, fn)
		}
		return launchCUDA(rg.shape, rg.overlap, rg.device.Index, fn)
	}
	run := func(g *parallel.Grid) error {
		b, err := rg.engine.backend()
		if err != nil {
			return err
		}
		return fn(g, b)
	}
	if rg.mpi {
		return launchMPI(rg.shape, rg.overlap, run)
	}
	return parallel.Launch(rg.shape, rg.overlap, run)
}

// loadRank is loadModel for one rank of a grid: its shards of the
// checkpoint in dir, on its backend b.
func loadRank(dir string, g *parallel.Grid, b engine.Backend, needTokenizer bool) (*loadedModel, error) {
	return loadOn(dir, b, llama.Options{Parallel: g}, needTokenizer)
}
