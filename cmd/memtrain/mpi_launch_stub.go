//go:build !mpi

package main

import "github.com/memtrain/memtrain/engine/comm"

// mpiBuilt says that this binary cannot join a multi-process job: it was
// built without the mpi tag (mpi_launch.go).
const mpiBuilt = false

func mpiInit() (comm.Comm, error) { return nil, errNoMPI }
