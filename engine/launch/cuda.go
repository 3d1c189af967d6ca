package launch

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cuda"
	"github.com/memtrain/memtrain/engine/parallel"
)

// A grid on CUDA devices computes on one GPU a rank, with NCCL
// communicators: in this process, rank r on cuda:K+r from Device cuda:K
// (launchCUDA); under mpirun or srun, one rank a process on the GPU of its
// local rank (nccl.go). The engine code is the same as on the
// CPU: only the backends and the world communicator differ.

// checkCUDARanks checks that the in-process ranks of a grid of size ranks
// have a GPU each from cuda:first, before anything is loaded.
func checkCUDARanks(grid comm.Grid, first int) error {
	size := grid.Size()
	count, err := cuda.DeviceCount("")
	if err != nil {
		return err
	}
	if first+size > count {
		return &GridError{grid, fmt.Errorf("%d ranks, one a GPU (cuda:%d to cuda:%d), but %d CUDA device(s) found", size, first, first+size-1, count)}
	}
	return nil
}

// launchCUDA runs every rank of the grid in this process, rank r on GPU
// first+r with a backend of its own, over a NCCL world of those GPUs
// (ncclCommInitAll) that parallel.LaunchWorlds splits into the grid's
// groups (ncclCommSplit). The backends are made one after the other, so
// that the first compiles the kernels and the others load them from the
// cache.
func launchCUDA(shape comm.Grid, ov parallel.Overlap, first int, fn Fn) (err error) {
	backends := make([]*cuda.Backend, 0, shape.Size())
	defer func() {
		// After every rank is done: the ranks' tensors are freed and the
		// communicators destroyed by then.
		for _, b := range backends {
			err = errors.Join(err, b.Close())
		}
	}()
	for r := range shape.Size() {
		b, err := cuda.New(cuda.Options{Device: first + r})
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
		backends = append(backends, b)
	}
	worlds, err := cuda.NewNCCLGroup(backends)
	if err != nil {
		return err
	}
	return parallel.LaunchWorlds(worlds, shape, ov, func(g *parallel.Grid) error {
		return fn(Rank{Grid: g, Backend: backends[g.Rank()]})
	})
}
