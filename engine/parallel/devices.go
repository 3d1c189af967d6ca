package parallel

import (
	"fmt"
	"sync"

	"github.com/memtrain/memtrain/engine/comm"
)

// LaunchWorlds runs a grid over world communicators the caller made: one
// per in-process rank, worlds[r] being rank r's. It is how a grid runs on
// devices of its own, one GPU a rank with a NCCL world over them, whose
// communicators can only be made once the devices' backends exist. It
// runs fn on every rank, each on its own goroutine, splits and closes the
// groups as Join does, closes every world, and reports errors as
// launch.Local does (the failing ranks' first distinct errors, root causes
// ahead of communication failures).
func LaunchWorlds(worlds []comm.Comm, shape comm.Grid, ov Overlap, fn func(g *Grid) error) error {
	if shape.Data < 1 || shape.X < 1 || shape.Y < 1 || shape.Z < 1 {
		return fmt.Errorf("parallel: grid %v: every axis needs at least one rank", shape)
	}
	if len(worlds) != shape.Size() {
		return fmt.Errorf("parallel: grid %v has %d ranks, but %d world communicators were given", shape, shape.Size(), len(worlds))
	}
	for r, w := range worlds {
		// Join would catch a wrong size, but a world in the wrong slot
		// would silently swap two ranks' devices.
		if w.Rank() != r || w.Size() != len(worlds) {
			return fmt.Errorf("parallel: world communicator %d is rank %d of %d, want rank %d of %d", r, w.Rank(), w.Size(), r, len(worlds))
		}
	}
	errs := make([]error, len(worlds))
	var wg sync.WaitGroup
	for r, world := range worlds {
		wg.Go(func() {
			errs[r] = Join(world, shape, ov, fn)
			if err := world.Close(); errs[r] == nil {
				errs[r] = err
			}
		})
	}
	wg.Wait()
	return firstErrors(errs)
}
