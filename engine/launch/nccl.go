package launch

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/cuda"
	"github.com/memtrain/memtrain/engine/parallel"
)

// A grid on GPUs under mpirun or srun: one rank a process, each on the GPU
// of its rank among the processes of its node, with a NCCL world
// bootstrapped over the MPI world (rank 0's unique id handed to every
// rank) and split into the grid's groups. MPI carries nothing else: the
// training's collectives run on NCCL, on device tensors.
//
// Like launchMPI, this needs no cgo of its own (mpiInit is the MPI build's
// part), so it builds, and joinNCCL is tested, without MPI.

// localRankEnvs name the variables in which launchers tell a process its
// rank among the processes on its node: Open MPI's mpirun, MPICH's hydra,
// Slurm's srun.
var localRankEnvs = []string{"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}

// localRank is this process's rank on its node: the launcher's word, or
// worldRank when it gives none (all processes on one node).
func localRank(worldRank int) (int, error) {
	for _, name := range localRankEnvs {
		s, ok := os.LookupEnv(name)
		if !ok || strings.TrimSpace(s) == "" {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%s=%q is not a local rank", name, s)
		}
		return n, nil
	}
	return worldRank, nil
}

// mpiDevice is the GPU of the process of local rank local, for Device
// cuda:first, when the process sees count GPUs: cuda:first+local, one GPU
// a process on each node. A process that sees exactly one GPU with
// first = 0 takes it whatever its local rank: the launcher bound one GPU
// to each process (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES set per
// rank); were two processes given the same one, NCCL would refuse it.
func mpiDevice(first, local, count int) (int, error) {
	if count == 1 && first == 0 {
		return 0, nil
	}
	if dev := first + local; dev < count {
		return dev, nil
	}
	return 0, fmt.Errorf("local rank %d on this node takes cuda:%d, but this process sees %d CUDA device(s): start at most %d process(es) a node, or bind one GPU to each (CUDA_VISIBLE_DEVICES)",
		local, first+local, count, max(count-first, 0))
}

// launchMPINCCL runs fn as this process's rank of the grid on its GPU
// (mpiDevice, from Device cuda:first), on a NCCL world bootstrapped
// over the MPI job's world (joinNCCL). Failures end the process as in
// launchMPI: only a successful rank finalises MPI.
func launchMPINCCL(shape comm.Grid, ov parallel.Overlap, first int, fn Fn) error {
	world, err := mpiInit()
	if err != nil {
		return err
	}
	if world.Size() != shape.Size() {
		return fmt.Errorf("grid %v has %d ranks, but the MPI world has %d", shape, shape.Size(), world.Size())
	}
	if err := joinNCCL(world, shape, ov, first, fn); err != nil {
		return fmt.Errorf("rank %d of %d: %w", world.Rank(), world.Size(), err)
	}
	if err := world.Close(); err != nil {
		return fmt.Errorf("rank %d of %d: %w", world.Rank(), world.Size(), err)
	}
	return nil
}

// joinNCCL runs fn as boot's rank of the grid on a GPU: it opens this
// rank's backend (mpiDevice), makes a NCCL world of boot's ranks from a
// unique id that rank 0 makes and hands out over boot (a host
// communicator: MPI, or in-process ranks in tests), joins the grid on
// that world (parallel.Join), then closes the world and the backend. boot
// is left open for its owner.
func joinNCCL(boot comm.Comm, shape comm.Grid, ov parallel.Overlap, first int, fn Fn) (err error) {
	var b *cuda.Backend
	var id cuda.NCCLUniqueID
	startErr := func() error {
		count, err := cuda.DeviceCount("")
		if err != nil {
			return err
		}
		local, err := localRank(boot.Rank())
		if err != nil {
			return err
		}
		dev, err := mpiDevice(first, local, count)
		if err != nil {
			return err
		}
		if b, err = cuda.New(cuda.Options{Device: dev}); err != nil {
			return err
		}
		if boot.Rank() == 0 {
			id, err = cuda.NewNCCLUniqueID("")
		}
		return err
	}()
	if b != nil {
		defer func() { err = errors.Join(err, b.Close()) }()
	}
	// Every rank learns whether all started before any waits for the
	// others in ncclCommInitRank, which cannot be interrupted.
	if id, err = shareNCCLID(boot, id, startErr); err != nil {
		return err
	}
	world, err := cuda.NewNCCL(b, id, boot.Rank(), boot.Size())
	if err != nil {
		return err
	}
	err = parallel.Join(world, shape, ov, func(g *parallel.Grid) error { return fn(Rank{Grid: g, Backend: b}) })
	if cerr := world.Close(); err == nil {
		err = cerr
	}
	return err
}

// shareNCCLID hands rank 0's id to every rank of boot, and each rank's
// start-up failure to all, in one all-reduce of int32s: the id's bytes,
// four to a word, from rank 0 (the others add zeros), then the number of
// ranks that failed. A rank that failed gets its own error back; the
// others get one counting the failures.
func shareNCCLID(boot comm.Comm, id cuda.NCCLUniqueID, startErr error) (cuda.NCCLUniqueID, error) {
	const words = len(id.Internal) / 4
	host := make([]int32, words+1)
	if boot.Rank() == 0 {
		for i := range words {
			host[i] = int32(binary.LittleEndian.Uint32(id.Internal[4*i:]))
		}
	}
	if startErr != nil {
		host[words] = 1
	}
	h := cpu.New(cpu.Options{Threads: 1})
	t := h.Alloc(engine.I32, len(host))
	defer h.Free(t)
	h.UploadInt32(t, host)
	if err := boot.AllReduce(t); err != nil {
		return id, errors.Join(startErr, fmt.Errorf("handing out the NCCL id: %w", err))
	}
	h.DownloadInt32(host, t)
	if startErr != nil {
		return id, startErr
	}
	if n := host[words]; n > 0 {
		return id, fmt.Errorf("%d other rank(s) failed to start on their GPU", n)
	}
	for i := range words {
		binary.LittleEndian.PutUint32(id.Internal[4*i:], uint32(host[i]))
	}
	return id, nil
}
