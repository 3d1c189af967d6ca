//go:build mpi

package main

import (
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/mpi"
)

// mpiBuilt says that this binary can run one rank a process under mpirun
// or srun (mpi_launch_env.go).
const mpiBuilt = true

// mpiInit initialises MPI and returns the job's world communicator.
func mpiInit() (comm.Comm, error) { return mpi.Init() }
