package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/bench"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
)

type benchStepFlags struct {
	preset    string
	batch     int
	seqLen    int
	maxPos    int // 0: the preset's max_position_embeddings
	steps     int
	recompute bool
	precision string
	engine    engineFlags
}

// benchStepResult is the JSON line `bench step` prints.
type benchStepResult struct {
	Preset       string `json:"preset"`
	MaxPositions int    `json:"max_position_embeddings"`
	bench.StepResult
}

func newBenchStepCmd() *cobra.Command {
	var f benchStepFlags
	cmd := &cobra.Command{
		Use:   "step --preset P --batch B --seq-len T",
		Short: "Measure a full training step (forward, backward, AdamW)",
		Long: `bench step times training steps of a randomly initialised preset on random
tokens and prints one JSON line: tokens/s, model FLOPs per token
(6·N + 12·L·heads·D·T), the achieved GFLOP/s, memtrain's own GEMM at
2048³ in the step's precision (float32, or bf16 by bf16 for --precision
bf16) timed once after each step (so that both see the same machine
load), and their ratio (efficiency); with the Go GEMM also that product's
micro-kernel alone on every thread (kernel_peak_gflops, the rate no step
can beat on this CPU) and the achieved rate's share of it (peak_fraction);
and the engine's memory accounting beside the process's peak RSS (which
includes the GEMM's 48 MiB). --max-positions raises (or lowers) the
preset's max_position_embeddings, so that a small preset can be measured
on long sequences.`,
		Example: `  memtrain bench step --preset small --batch 4 --seq-len 256
  memtrain bench step --preset small --batch 1 --seq-len 8192 --max-positions 8192
  memtrain bench step --device cuda --preset small --batch 4 --seq-len 1024 --precision bf16`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runBenchStep(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.preset, "preset", "small", "model shape (see 'memtrain inspect --help')")
	options.IntRange(fl, &f.batch, "batch", 4, 1, units.MaxCount, "", "sequences per step")
	options.IntRange(fl, &f.seqLen, "seq-len", 0, 1, checkpoints.MaxPositions, "the default", "tokens per sequence (default min(2048, max_position_embeddings))")
	options.IntRange(fl, &f.maxPos, "max-positions", 0, 1, checkpoints.MaxPositions, "the preset's", "the model's max_position_embeddings (default the preset's)")
	options.IntRange(fl, &f.steps, "steps", 5, 1, maxBenchRuns, "", "timed steps (after one warm-up step); the median is reported")
	fl.BoolVar(&f.recompute, "recompute", false, "recompute activations in the backward pass")
	fl.StringVar(&f.precision, "precision", "f32", "f32, or bf16: mixed precision (bf16 activations and weight copies, float32 master weights, gradients and moments)")
	f.engine.register(fl)
	return cmd
}

func runBenchStep(cmd *cobra.Command, f benchStepFlags) error {
	p, err := checkpoints.LookupPreset(f.preset)
	if err != nil {
		return fmt.Errorf("bench step: --preset: %w", err)
	}
	cfg := p.Config()
	if f.maxPos != 0 {
		cfg.MaxPositionEmbeddings = f.maxPos
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("bench step: --max-positions %d: %w", f.maxPos, err)
		}
	}
	if f.seqLen, err = cfg.SeqLen(f.seqLen); err != nil {
		return fmt.Errorf("bench step: %s: --seq-len %w (raise it with --max-positions)", f.preset, err)
	}
	if n := cfg.Params().Total; n > maxInitParams {
		return fmt.Errorf("bench step: %s has %s parameters, too many for a CPU step", f.preset, units.FormatCount(n))
	}
	prec, err := engine.ParsePrecision(f.precision)
	if err != nil {
		return fmt.Errorf("bench step: --precision: %w", err)
	}
	act := prec.Activations()
	o := bench.StepOptions{Batch: f.batch, SeqLen: f.seqLen, Steps: f.steps, Recompute: f.recompute, Activations: act}
	if err := f.engine.preflight("bench step: "+f.preset, cfg, llama.Work{Train: true, Recompute: o.RecomputeMode(), Moments: 2, Batch: f.batch, SeqLen: f.seqLen, Micro: 1, Activations: act}); err != nil {
		return err
	}
	b, g, err := f.engine.build()
	if err != nil {
		return err
	}
	if errw := cmd.ErrOrStderr(); isTerminal(errw) {
		bar := newBar(errw, f.steps+1, "bench step", "steps")
		defer bar.Finish()
		o.Progress = func() { bar.Add(1) }
	}
	res, err := bench.Step(b, g, cfg, o)
	if err != nil {
		return fmt.Errorf("bench step: %w", err)
	}
	return json.NewEncoder(cmd.OutOrStdout()).Encode(benchStepResult{f.preset, cfg.MaxPositionEmbeddings, res})
}
