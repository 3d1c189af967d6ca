//go:build !mpi

package launch

import "github.com/memtrain/memtrain/engine/comm"

// MPIBuilt says that this binary cannot join a multi-process job: it was
// built without the mpi tag (mpi.go).
const MPIBuilt = false

func mpiInit() (comm.Comm, error) { return nil, errNoMPI }
