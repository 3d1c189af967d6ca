package launch

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
)

// Launchers tell a process the size of its job through the environment:
// Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE (and _LOCAL_SIZE for the
// processes on this node), srun and other PMI launchers set PMI_SIZE, and
// MPICH's hydra MPI_LOCALNRANKS. Reading them lets a command know, before
// it initialises MPI (and in a build without MPI at all), that it is one
// of several processes.
var (
	worldSizeEnvs = []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}
	localSizeEnvs = []string{"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}
)

// errNoMPI says that this binary cannot join a multi-process job.
var errNoMPI = errors.New("this program was built without MPI: build it with the mpi tag, e.g. `go build -tags mpi ./cmd/memtrain` (cgo and Open MPI's headers; Debian: libopenmpi-dev)")

// launchedProcs is the number of processes of the job this process was
// started in by mpirun or srun, and 0 when it was started on its own.
func launchedProcs() (int, error) {
	return envCount(worldSizeEnvs)
}

// localProcs is the number of processes of the job on this node: the
// launcher's word, or else all of them (which never oversubscribes the
// cores, though it may leave some idle on a multi-node job).
func localProcs(procs int) int {
	if n, err := envCount(localSizeEnvs); err == nil && n > 0 {
		return n
	}
	return procs
}

// envCount reads the first of the variables that is set, as a positive
// count.
func envCount(names []string) (int, error) {
	for _, name := range names {
		s, ok := os.LookupEnv(name)
		if !ok || strings.TrimSpace(s) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return 0, fmt.Errorf("%s=%q is not a positive process count", name, s)
		}
		return n, nil
	}
	return 0, nil
}

// checkLaunch decides how a grid of size ranks runs when procs processes
// were launched (launchedProcs): true for one rank per process over MPI,
// false for in-process ranks. A job of one process is a plain run, which
// may hold a grid of in-process ranks; a job of several needs an MPI
// build and exactly one process per rank (size 0: no grid).
func checkLaunch(procs, size int, grid comm.Grid) (bool, error) {
	if procs <= 1 {
		return false, nil
	}
	launched := fmt.Sprintf("mpirun or srun started %d processes", procs)
	switch {
	case size == 0:
		return false, fmt.Errorf("%s: give a grid of %d ranks, one a process (without one every process would run the whole job)", launched, procs)
	case !MPIBuilt:
		return false, fmt.Errorf("%s, but %w", launched, errNoMPI)
	case size != procs:
		return false, &GridError{grid, fmt.Errorf("%d ranks, but %s: each process runs one rank, so the two must be equal", size, launched)}
	}
	return true, nil
}

// mpiThreads is the compute threads of one rank under MPI: Spec.Threads when
// given (a process runs one rank), else this node's cores shared out over
// its processes.
func mpiThreads(threads, procs int) int {
	if threads > 0 {
		return threads
	}
	return max(1, runtime.NumCPU()/localProcs(procs))
}

// launchMPI runs fn as this process's rank of the grid, on the world of
// the MPI job (mpiInit). Only a successful rank finalises MPI: finalising
// waits for every rank, and the others may be blocked in a collective
// that waits for this one; a failed rank exits non-zero instead, which
// makes mpirun end the job.
func launchMPI(shape comm.Grid, ov parallel.Overlap, fn func(g *parallel.Grid) error) error {
	world, err := mpiInit()
	if err != nil {
		return err
	}
	if world.Size() != shape.Size() {
		// The launcher's environment said otherwise: a mix of launchers.
		return fmt.Errorf("grid %v has %d ranks, but the MPI world has %d", shape, shape.Size(), world.Size())
	}
	if err := parallel.Join(world, shape, ov, fn); err != nil {
		return fmt.Errorf("rank %d of %d: %w", world.Rank(), world.Size(), err)
	}
	if err := world.Close(); err != nil {
		return fmt.Errorf("rank %d of %d: %w", world.Rank(), world.Size(), err)
	}
	return nil
}

// Procs is the number of processes of the job this process was started
// in by mpirun or srun, and 0 when it was started on its own.
func Procs() (int, error) { return launchedProcs() }

// MPIWorld initialises MPI and returns the world communicator of the job
// of procs processes (Procs) this process belongs to, for tools that run
// their own collectives (benchmarks); its owner closes it, which
// finalises MPI.
func MPIWorld(procs int) (comm.Comm, error) {
	if !MPIBuilt {
		return nil, fmt.Errorf("mpirun or srun started %d processes, but %w", procs, errNoMPI)
	}
	return mpiInit()
}

// ParseGrid reads a grid such as dp=2,x=2,y=1,z=2 (comm.ParseGrid).
func ParseGrid(s string) (comm.Grid, error) { return comm.ParseGrid(s) }
