package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/goldfish"
	"github.com/memtrain/memtrain/internal/atomicfile"
)

// killInSaveEnv names the environment variable that makes `finetune` kill
// itself while saving the checkpoint of the given step (tests of
// crash-safe checkpoints).
const killInSaveEnv = "MEMTRAIN_TEST_KILL_IN_SAVE"

// finetuneFlag binds one command-line flag to one configuration key.
type finetuneFlag struct {
	name, help string
	bind       func(fl *pflag.FlagSet, c *finetune.Config)
}

// finetuneFlags lists every configuration key as a flag; the flag's name
// is the YAML key (nested keys dotted).
func finetuneFlags() []finetuneFlag {
	str := func(name, help string, p func(*finetune.Config) *string) finetuneFlag {
		return finetuneFlag{name, help, func(fl *pflag.FlagSet, c *finetune.Config) { fl.StringVar(p(c), name, *p(c), help) }}
	}
	num := func(name, help string, p func(*finetune.Config) *int) finetuneFlag {
		return finetuneFlag{name, help, func(fl *pflag.FlagSet, c *finetune.Config) { fl.IntVar(p(c), name, *p(c), help) }}
	}
	flt := func(name, help string, p func(*finetune.Config) *float64) finetuneFlag {
		return finetuneFlag{name, help, func(fl *pflag.FlagSet, c *finetune.Config) { fl.Float64Var(p(c), name, *p(c), help) }}
	}
	boo := func(name, help string, p func(*finetune.Config) *bool) finetuneFlag {
		return finetuneFlag{name, help, func(fl *pflag.FlagSet, c *finetune.Config) { fl.BoolVar(p(c), name, *p(c), help) }}
	}
	return []finetuneFlag{
		str("model", "base checkpoint folder", func(c *finetune.Config) *string { return &c.Model }),
		str("data", "dataset folder made by `memtrain data prepare` with the model's tokenizer", func(c *finetune.Config) *string { return &c.Data }),
		str("out", "run folder: config.yaml, metrics.jsonl, checkpoints/", func(c *finetune.Config) *string { return &c.Out }),
		str("loss", "standard or goldfish", func(c *finetune.Config) *string { return &c.Loss }),
		{"goldfish.strategy", "goldfish strategy: static, hash-table or hash-avalanche", func(fl *pflag.FlagSet, c *finetune.Config) {
			fl.Var((*strategyValue)(&c.Goldfish.Strategy), "goldfish.strategy", "goldfish strategy: static, hash-table or hash-avalanche")
		}},
		num("goldfish.k", "goldfish: drop one target in k (k ≥ 2)", func(c *finetune.Config) *int { return &c.Goldfish.K }),
		num("goldfish.h", "goldfish: context width of the hash strategies", func(c *finetune.Config) *int { return &c.Goldfish.H }),
		num("goldfish.start", "goldfish: first dropped position of the static strategy", func(c *finetune.Config) *int { return &c.Goldfish.Start }),
		str("optimizer.name", "adamw or sgd", func(c *finetune.Config) *string { return &c.Optimizer.Name }),
		flt("optimizer.beta1", "AdamW β1", func(c *finetune.Config) *float64 { return &c.Optimizer.Beta1 }),
		flt("optimizer.beta2", "AdamW β2", func(c *finetune.Config) *float64 { return &c.Optimizer.Beta2 }),
		flt("optimizer.eps", "AdamW ε", func(c *finetune.Config) *float64 { return &c.Optimizer.Eps }),
		flt("optimizer.weight_decay", "decoupled weight decay", func(c *finetune.Config) *float64 { return &c.Optimizer.WeightDecay }),
		boo("optimizer.decay_norms", "apply weight decay to RMSNorm weights too", func(c *finetune.Config) *bool { return &c.Optimizer.DecayNorms }),
		str("schedule.kind", "learning-rate schedule: constant, cosine or linear (after warm-up)", func(c *finetune.Config) *string { return &c.Schedule.Kind }),
		flt("schedule.lr", "peak learning rate", func(c *finetune.Config) *float64 { return &c.Schedule.LR }),
		flt("schedule.min_lr", "learning rate at the end of the decay", func(c *finetune.Config) *float64 { return &c.Schedule.MinLR }),
		num("schedule.warmup", "linear warm-up steps", func(c *finetune.Config) *int { return &c.Schedule.Warmup }),
		num("schedule.total", "steps of the decay (default: the run's length)", func(c *finetune.Config) *int { return &c.Schedule.Total }),
		num("batch_size", "sequences per optimizer step (the global batch)", func(c *finetune.Config) *int { return &c.BatchSize }),
		num("micro_batch", "sequences per forward pass (with --parallel, over the whole grid: each data×Z rank takes micro_batch/(data·Z)); gradients accumulate over batch_size/micro_batch passes", func(c *finetune.Config) *int { return &c.MicroBatch }),
		num("epochs", "passes over the training split", func(c *finetune.Config) *int { return &c.Epochs }),
		num("max_steps", "optimizer steps (overrides epochs when > 0)", func(c *finetune.Config) *int { return &c.MaxSteps }),
		flt("clip", "clip the global gradient norm to this (0: off)", func(c *finetune.Config) *float64 { return &c.Clip }),
		num("eval_every", "evaluate on the holdout split every N steps (0: only never)", func(c *finetune.Config) *int { return &c.EvalEvery }),
		num("save_every", "save a checkpoint every N steps (and always at the end)", func(c *finetune.Config) *int { return &c.SaveEvery }),
		num("keep", "checkpoints to keep (0: all)", func(c *finetune.Config) *int { return &c.Keep }),
		finetuneFlag{"seed", "data order seed", func(fl *pflag.FlagSet, c *finetune.Config) { fl.Uint64Var(&c.Seed, "seed", c.Seed, "data order seed") }},
		boo("recompute", "recompute activations in the backward pass (less memory)", func(c *finetune.Config) *bool { return &c.Recompute }),
		str("save_dtype", "checkpoint weights: f32 or bf16", func(c *finetune.Config) *string { return &c.SaveDType }),
	}
}

// strategyValue lets a goldfish.Strategy be a flag.
type strategyValue goldfish.Strategy

func (s *strategyValue) String() string { return goldfish.Strategy(*s).String() }
func (s *strategyValue) Type() string   { return "strategy" }
func (s *strategyValue) Set(v string) error {
	st, err := goldfish.ParseStrategy(v)
	if err != nil {
		return err
	}
	*s = strategyValue(st)
	return nil
}

func newFinetuneCmd() *cobra.Command {
	var (
		configFile, resume string
		stopAfter          int
		ef                 engineFlags
		pf                 parallelFlags
		flagCfg            = finetune.DefaultConfig()
	)
	cmd := &cobra.Command{
		Use:   "finetune --config run.yaml | --model DIR --data DATASET --out DIR [flags]",
		Short: "Fine-tune a Llama checkpoint, with the standard or the goldfish loss",
		Long: `finetune trains a checkpoint on a dataset made by ` + "`memtrain data prepare`" + `.
Every key of the YAML configuration is also a flag (nested keys dotted, e.g.
--goldfish.k); flags override the file, and unknown keys are errors. The
effective configuration is saved as OUT/config.yaml; metrics go to
OUT/metrics.jsonl (one JSON line per step, schema 1); checkpoints to
OUT/checkpoints/step-NNNNNNNN with OUT/checkpoints/latest pointing at the
newest complete one. --resume OUT continues a stopped run exactly.

--parallel dp=D,x=X,y=Y,z=Z trains on a 4D grid of D·X·Y·Z ranks — goroutines,
one a GPU with --device cuda, or one a process under mpirun with the mpi build
(AxoNN's data × tensor-parallel layout; ` + "`memtrain plan`" + ` ranks grids): each rank
holds a shard of every weight, the batch's sequences are split over D·Z ranks
(micro_batch counts sequences over the whole grid: each takes
micro_batch/(D·Z)), and the metrics equal one rank's. Checkpoints are full-shape
HF checkpoints, so a run resumes on any grid.`,
		Example: `  memtrain finetune --model base --data ds --out run --loss goldfish --goldfish.k 4 --max_steps 100
  memtrain finetune --config run.yaml --resume run
  memtrain finetune --config run.yaml --parallel dp=2,x=2,y=1,z=2
  mpirun -np 8 memtrain finetune --config run.yaml --parallel dp=2,x=2,y=1,z=2   # go build -tags mpi`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := finetune.DefaultConfig()
			if configFile != "" {
				raw, err := os.ReadFile(configFile)
				if err != nil {
					return fmt.Errorf("finetune: %w", err)
				}
				dec := yaml.NewDecoder(bytes.NewReader(raw))
				dec.KnownFields(true)
				if err := dec.Decode(&cfg); err != nil {
					return fmt.Errorf("finetune: %s: %v", configFile, err)
				}
			}
			// Flags the user set override the file.
			for _, f := range finetuneFlags() {
				if cmd.Flags().Changed(f.name) {
					scratch := pflag.NewFlagSet("", pflag.ContinueOnError)
					f.bind(scratch, &cfg)
					if err := scratch.Set(f.name, cmd.Flags().Lookup(f.name).Value.String()); err != nil {
						return fmt.Errorf("finetune: --%s: %w", f.name, err)
					}
				}
			}
			return runFinetune(cmd, cfg, ef, pf, resume, stopAfter)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configFile, "config", "", "YAML configuration file")
	fl.StringVar(&resume, "resume", "", "continue the run in this folder (or from this checkpoint)")
	fl.IntVar(&stopAfter, "stop-after", 0, "stop (with a checkpoint) after this step, to continue later with --resume")
	for _, f := range finetuneFlags() {
		f.bind(fl, &flagCfg)
	}
	ef.register(fl)
	pf.register(fl)
	return cmd
}

func runFinetune(cmd *cobra.Command, cfg finetune.Config, ef engineFlags, pf parallelFlags, resume string, stopAfter int) error {
	l, err := launcher(ef, pf, cfg.Model)
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	// Every rank trains; rank 0 alone writes the run's files and reports.
	// A rank that fails to start stops them all (Agree), rather than
	// leaving the others waiting for it.
	return l.Run(func(r launch.Rank) error {
		run, err := finetune.OpenParallel(cfg, r.Backend, r.Grid, resume)
		var mf *os.File
		if err == nil && r.Lead() {
			mf, err = prepareRun(run, cfg, stopAfter)
		}
		if err := r.Agree(err); err != nil {
			if run != nil {
				run.Close()
			}
			if mf != nil {
				mf.Close()
			}
			return err
		}
		defer run.Close()
		run.StopAfter = stopAfter
		if !r.Lead() {
			return run.Train(io.Discard, nil)
		}
		defer mf.Close()
		return trainRun(cmd, run, mf)
	})
}

// prepareRun sets up a run's stop and crash-test hooks, writes its
// effective configuration and opens its metrics file.
func prepareRun(run *finetune.Run, cfg finetune.Config, stopAfter int) (*os.File, error) {
	run.StopAfter = stopAfter
	if s := os.Getenv(killInSaveEnv); s != "" {
		// Crash-safety tests: die by SIGKILL in the middle of saving the
		// checkpoint of this step, its files written but not committed.
		step, err := strconv.Atoi(s)
		if err != nil {
			return nil, fmt.Errorf("finetune: %s=%q: want a step number", killInSaveEnv, s)
		}
		run.BeforeCommit = func(at int, _ string) {
			if at == step {
				killSelf()
			}
		}
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	eff, err := yaml.Marshal(run.Config)
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(cfg.Out, "config.yaml"), eff); err != nil {
		return nil, err
	}
	mf, err := os.OpenFile(filepath.Join(cfg.Out, "metrics.jsonl"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	return mf, nil
}

// trainRun trains, with metrics to mf and a progress bar.
func trainRun(cmd *cobra.Command, run *finetune.Run, mf io.Writer) error {
	var bar *progressbar.ProgressBar
	if isTerminal(cmd.ErrOrStderr()) {
		bar = progressbar.NewOptions(run.Steps,
			progressbar.OptionSetWriter(cmd.ErrOrStderr()),
			progressbar.OptionSetDescription("finetune"),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionShowElapsedTimeOnFinish())
		bar.Set(run.Step)
	}
	var last finetune.Metrics
	err := run.Train(mf, func(m finetune.Metrics) {
		last = m
		if bar != nil {
			bar.Describe(fmt.Sprintf("finetune loss %.4f", m.Loss))
			bar.Set(m.Step)
		}
	})
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "trained %d steps: loss %.4f, dropped %.1f%%, %.0f tokens/s; checkpoint %s\n",
		run.Step, last.Loss, 100*last.DroppedFrac, last.TokensPerS, last.CheckpointDir)
	return nil
}
