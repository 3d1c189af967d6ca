// Package mpi is the communicator of multi-process runs: Open MPI (or
// another MPI-3 library) through cgo, one process per rank, launched by
// mpirun or srun. It is built only with the build tag mpi, since it needs
// cgo and the MPI headers (Debian: libopenmpi-dev openmpi-bin); without
// the tag the package is empty.
//
//	world, err := mpi.Init()          // after mpirun -np 8 ./memtrain …
//	defer world.Close()               // finalises MPI
//	groups, err := comm.SplitGrid(world, comm.Grid{Data: 2, X: 2, Y: 2, Z: 1})
//
// # One thread for MPI
//
// MPI is bound to OS threads, so every MPI call of the process is made by
// one goroutine locked to its thread (MPI_THREAD_FUNNELED): the progress
// loop. Collectives are posted as MPI's non-blocking ones (MPI_Iallreduce,
// MPI_Ireduce_scatter, MPI_Iallgatherv, MPI_Ibcast, MPI_Ibarrier) and the
// loop tests them (MPI_Testsome) until they complete, spinning briefly and
// then backing off, and picking up newly posted ones in between. The loop
// never blocks inside MPI (except in MPI_Comm_split and MPI_Finalize,
// which have no non-blocking form), so collectives issued by different
// goroutines on different communicators — an all-gather prefetched on
// one group while another group all-reduces — cannot deadlock by being
// queued behind each other in different orders on different ranks. A
// blocking collective is a non-blocking one waited for.
//
// Tensors are host tensors of the CPU backend (F32, or I32), passed to
// MPI where they are, pinned (runtime.Pinner) while MPI holds them. An
// in-place reduce-scatter goes through a temporary buffer, since MPI's
// MPI_IN_PLACE puts the result at the start of the buffer rather than at
// the rank's chunk; an in-place all-gather is MPI's MPI_IN_PLACE exactly.
// Sizes are counted in C int: a tensor of 2³¹ elements or more is refused.
//
// # Watchdog
//
// A collective that has not completed within the timeout (comm.WithTimeout,
// MEMTRAIN_COMM_TIMEOUT, default 60 s) writes
//
//	comm: group "z" (rank 0 of 2): all-gather at step 7: no answer from the group within 60s
//
// to standard error and exits the process with status 3 (comm.ExitTimeout):
// a collective posted to MPI cannot be cancelled, and its buffers stay
// MPI's. mpirun then ends the job's other processes.
//
// # Running
//
// Launch with mpirun or srun (scripts/mpi-test.sh: mpirun --allow-run-as-root
// --oversubscribe -np 4); a binary started alone is a world of one rank.
// The Go runtime's signal handlers are in place before MPI_Init, and Open
// MPI leaves installed handlers alone (see its opal_signal parameter), so
// Go's panics for nil dereferences survive. Large buffers want
// MALLOC_MMAP_THRESHOLD_ raised (to 33554432, the most glibc accepts), or
// Open MPI spends much of its time faulting in fresh pages.
package mpi
