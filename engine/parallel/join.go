package parallel

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/engine/comm"
)

// Join runs fn as this rank's part of a grid on world, a communicator of
// shape.Size() ranks of which every one calls Join: it splits world into
// the grid's groups (comm.SplitGrid), runs fn, and closes the groups, not
// world. Launch joins every in-process rank; a multi-process launcher
// (one rank per process under mpirun) joins its MPI world, whose owner
// closes it after.
func Join(world comm.Comm, shape comm.Grid, ov Overlap, fn func(g *Grid) error) error {
	groups, err := comm.SplitGrid(world, shape)
	if err != nil {
		return err
	}
	err = fn(New(groups, ov))
	if cerr := groups.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// firstErrors joins the distinct errors of the ranks, root causes first,
// each naming its rank; an error every rank had alike is returned as it
// is.
func firstErrors(errs []error) error {
	if errs[0] != nil && all(errs, func(e error) bool { return e != nil && e.Error() == errs[0].Error() }) {
		return errs[0]
	}
	var causes, comms []error
	seen := map[string]bool{}
	for r, err := range errs {
		if err == nil || seen[err.Error()] {
			continue
		}
		seen[err.Error()] = true
		err = fmt.Errorf("rank %d: %w", r, err)
		var ce *comm.Error
		if errors.As(err, &ce) {
			comms = append(comms, err)
		} else {
			causes = append(causes, err)
		}
	}
	return errors.Join(append(causes, comms...)...)
}

func all(errs []error, ok func(error) bool) bool {
	for _, e := range errs {
		if !ok(e) {
			return false
		}
	}
	return true
}
