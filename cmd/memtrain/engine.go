package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/gemm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/finetune/job"
	"github.com/memtrain/memtrain/internal/options"
)

// engineFlags choose the backend a command computes on.
type engineFlags struct {
	threads int
	blas    string
	device  string
}

func (f *engineFlags) register(fl *pflag.FlagSet) {
	threadsFlag(fl, &f.threads, "compute threads (default all cores)")
	def := os.Getenv("MEMTRAIN_BLAS")
	if def == "" {
		def = "auto"
	}
	fl.StringVar(&f.blas, "blas", def, "matrix multiply: go (memtrain's kernels), openblas (loaded at run time) or auto; default $MEMTRAIN_BLAS or auto")
	fl.StringVar(&f.device, "device", "cpu", "compute on cpu, or on GPU N with cuda:N (cuda means cuda:0; CUDA is loaded at run time, and $MEMTRAIN_CUDA_GEMM sets its matrix-multiply precision: bf16, tf32 or f32)")
}

// maxThreads bounds every --threads: each thread is a worker made up
// front, and no machine has more cores.
const maxThreads = 4096

// threadsFlag defines a command's --threads: 0 (all cores) to maxThreads.
func threadsFlag(fl *pflag.FlagSet, p *int, usage string) {
	options.IntRange(fl, p, "threads", 0, 1, maxThreads, "all cores", usage)
}

// spec is the launch spec of one rank on the chosen backend.
func (f engineFlags) spec() (launch.Spec, error) {
	dev, err := launch.ParseDevice(f.device)
	if err != nil {
		return launch.Spec{}, fmt.Errorf("--%w", err)
	}
	return launch.Spec{Device: dev, Threads: f.threads, BLAS: f.blas}, nil
}

func (f engineFlags) backend() (engine.Backend, error) {
	b, _, err := f.build()
	return b, err
}

// build returns the backend and the matrix multiply it computes with
// (launch.NewBackend).
func (f engineFlags) build() (engine.Backend, gemm.Impl, error) {
	s, err := f.spec()
	if err != nil {
		return nil, nil, err
	}
	return launch.NewBackend(s.Device, s.Threads, s.BLAS)
}

// preflight is preflight for the single backend the flags build (the
// benchmarks); a memory error is prefixed with what, the flags' own errors
// stand alone.
func (f engineFlags) preflight(what string, cfg *checkpoints.Config, w llama.Work) error {
	s, err := f.spec()
	if err != nil {
		return err
	}
	l, err := launch.New(s)
	if err != nil {
		return err
	}
	if err := job.PreflightModel(l, cfg, w); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// hostFree is what the host has free for this process, as every memory
// check reads it (launch.Launcher.Memory: MEMTRAIN_MEMORY_LIMIT, else
// internal/sysmem), for the checks of what a command allocates on the
// host from a user's number; -1 when it cannot be known (the check is
// then skipped).
func hostFree() int64 {
	l, err := launch.New(launch.Spec{})
	if err != nil {
		return -1
	}
	devs, err := l.Memory()
	if err != nil || len(devs) == 0 {
		return -1
	}
	return devs[0].Free
}

// resolveModel turns a --model value (a checkpoint folder, a run folder or
// its checkpoints/latest file) into a checkpoint folder through
// finetune.ResolveModel, and says on stderr which checkpoint a run folder or
// latest file named.
func resolveModel(stderr io.Writer, path string) (string, error) {
	dir, resolved, err := finetune.ResolveModel(path)
	if err != nil {
		return "", hubHint(err)
	}
	if resolved {
		fmt.Fprintf(stderr, "memtrain: model: %s → %s\n", path, dir)
	}
	return dir, nil
}

// resolveAdapted is finetune.ResolveAdapted for a model flag, saying on
// stderr what the path resolved to (label names it: "model", "reference
// model").
func resolveAdapted(stderr io.Writer, label, model, adapter string) (finetune.ModelRef, error) {
	ref, note, err := finetune.ResolveAdapted(model, adapter)
	if err == nil && note != "" {
		fmt.Fprintf(stderr, "memtrain: %s: %s\n", label, note)
	}
	return ref, hubHint(err)
}
