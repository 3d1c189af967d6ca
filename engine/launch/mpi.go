//go:build mpi

package launch

import (
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/mpi"
)

// MPIBuilt says that this binary can run one rank a process under mpirun
// or srun (env.go).
const MPIBuilt = true

// mpiInit initialises MPI and returns the job's world communicator.
func mpiInit() (comm.Comm, error) { return mpi.Init() }
