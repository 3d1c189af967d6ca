package launch

import (
	"fmt"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/local"
	"github.com/memtrain/memtrain/engine/parallel"
)

// Local runs fn on every rank of a grid of in-process ranks (local.New),
// each on its own goroutine with its own communicators, and waits for all
// of them. Each rank builds its own backend and model inside fn: ranks
// share nothing but the communicators.
//
// It returns nil when every rank succeeded; otherwise the errors of the
// failing ranks, the first of each distinct message, lowest rank first,
// and a rank's failure other than a communication one (*comm.Error) ahead
// of the others, which are usually its consequence (the group broke or
// timed out waiting for it).
func Local(shape comm.Grid, ov parallel.Overlap, fn func(g *parallel.Grid) error, opts ...comm.Option) error {
	if shape.Data < 1 || shape.X < 1 || shape.Y < 1 || shape.Z < 1 {
		return fmt.Errorf("launch: grid %v: every axis needs at least one rank", shape)
	}
	if _, _, err := comm.EnvTimeout(); err != nil {
		return err
	}
	return parallel.LaunchWorlds(local.New(shape.Size(), opts...), shape, ov, fn)
}
