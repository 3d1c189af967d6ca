package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/finetune"
)

// parallelFlags run a command on a 4D grid of ranks (engine/launch):
// in-process ones, a GPU each, or one a process under mpirun.
type parallelFlags struct {
	grid    string
	overlap string
}

func (f *parallelFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&f.grid, "parallel", "", "run on a grid of ranks, e.g. dp=2,x=2,y=1,z=2 (data × X × Y × Z; axes left out are 1; see 'memtrain plan'): in process, or one rank a process under mpirun with an MPI build")
	fl.StringVar(&f.overlap, "overlap", "oar,ors,oag", "with --parallel: communication hidden behind compute, a comma-separated subset of oar, ors, oag, or none")
}

// launchSpec is the launch of the engine flags and --parallel (none: one
// rank).
func launchSpec(ef engineFlags, pf parallelFlags) (launch.Spec, error) {
	s, err := ef.spec()
	if err != nil || pf.grid == "" {
		return s, err
	}
	if s.Grid, err = launch.ParseGrid(pf.grid); err != nil {
		return s, fmt.Errorf("--parallel: %w", err)
	}
	if s.Overlap, err = launch.ParseOverlap(pf.overlap); err != nil {
		return s, fmt.Errorf("--overlap: %w", err)
	}
	return s, nil
}

// launcher checks the grid of --parallel (none: one rank) against the
// model in modelDir, the engine flags and the process's launcher, before
// anything is loaded.
//
// model is resolved (resolveModel: a checkpoint folder, a run folder or its
// checkpoints/latest file) once the flags are checked; modelDir is the
// checkpoint folder it names.
//
// adapter, when not empty, is a LoRA adapter folder (--adapter) for the
// model; the model may also name an adapter itself (finetune.ResolveAdapted),
// whose base is then modelDir. ref.Adapter is the adapter either way.
func launcher(stderr io.Writer, ef engineFlags, pf parallelFlags, model, adapter string) (l *launch.Launcher, ref finetune.ModelRef, err error) {
	s, err := launchSpec(ef, pf)
	if err != nil {
		return nil, ref, err
	}
	ref, err = resolveAdapted(stderr, "model", model, adapter)
	if err != nil {
		return nil, ref, err
	}
	modelDir := ref.Dir
	if pf.grid != "" {
		if s.Model, err = checkpoints.ReadConfig(modelDir); err != nil {
			return nil, ref, err
		}
	}
	l, err = launch.New(s)
	var ge *launch.GridError
	if errors.As(err, &ge) {
		return nil, ref, fmt.Errorf("--parallel %s: %w", pf.grid, ge.Err)
	}
	return l, ref, err
}
