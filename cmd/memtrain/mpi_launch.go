//go:build mpi

package main

/*
#include <malloc.h>
*/
import "C"

import (
	"os"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/mpi"
)

// mpiBuilt says that this binary can run one rank per process under
// mpirun or srun (mpi_launch_env.go).
const mpiBuilt = true

// mmapThreshold is the largest allocation glibc's malloc serves from its
// heap rather than by a fresh mmap: 32 MiB, the most it accepts.
const mmapThreshold = 32 << 20

// mpiInit initialises MPI and returns the job's world communicator.
//
// Open MPI allocates its temporary buffers with malloc; past glibc's
// mmap threshold each one is fresh pages, faulted in on first touch and
// returned on free, which can cost more than the copy itself. Unless the
// user set MALLOC_MMAP_THRESHOLD_ (which glibc reads at start-up), the
// threshold is raised here, and the trim threshold with it, so that
// freed buffers stay in the heap for the next collective.
func mpiInit() (comm.Comm, error) {
	if _, ok := os.LookupEnv("MALLOC_MMAP_THRESHOLD_"); !ok {
		C.mallopt(C.M_MMAP_THRESHOLD, mmapThreshold)
		C.mallopt(C.M_TRIM_THRESHOLD, 2*mmapThreshold)
	}
	return mpi.Init()
}
