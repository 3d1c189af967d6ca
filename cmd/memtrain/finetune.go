package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/inputfile"
	"github.com/memtrain/memtrain/internal/options"
)

// killInSaveEnv names the environment variable that makes `finetune` kill
// itself while saving the checkpoint of the given step (tests of
// crash-safe checkpoints).
const killInSaveEnv = "MEMTRAIN_TEST_KILL_IN_SAVE"

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
		Long: `finetune trains a checkpoint on a dataset made by 'memtrain data prepare'.
Every key of the YAML configuration is also a flag, in kebab-case with nested
keys dotted (--max-steps, --goldfish.k; the YAML spelling --max_steps works
too); flags override the file, and unknown keys are errors. The
effective configuration is saved as OUT/config.yaml; metrics go to
OUT/metrics.jsonl (one JSON line per step, schema 1); checkpoints to
OUT/checkpoints/step-NNNNNNNN with OUT/checkpoints/latest pointing at the
newest complete one. --resume OUT continues a stopped run exactly.

--parallel dp=D,x=X,y=Y,z=Z trains on a 4D grid of D·X·Y·Z ranks — goroutines,
one a GPU with --device cuda, or one a process under mpirun with the mpi build
(AxoNN's data × tensor-parallel layout; 'memtrain plan' ranks grids): each rank
holds a shard of every weight, the batch's sequences are split over D·Z ranks
(micro_batch counts sequences over the whole grid: each takes
micro_batch/(D·Z)), and the metrics equal one rank's. Checkpoints are full-shape
HF checkpoints, so a run resumes on any grid.`,
		Example: `  memtrain finetune --model base --data ds --out run --loss goldfish --goldfish.k 4 --max-steps 100
  memtrain finetune --config run.yaml --resume run
  memtrain finetune --config run.yaml --parallel dp=2,x=2,y=1,z=2
  mpirun -np 8 memtrain finetune --config run.yaml --parallel dp=2,x=2,y=1,z=2   # go build -tags mpi`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg := finetune.DefaultConfig()
			if configFile != "" {
				raw, err := inputfile.ReadFile(configFile)
				if err != nil {
					return fmt.Errorf("finetune: %w", err)
				}
				if err := options.Decode(configFile, raw, &cfg); err != nil {
					return fmt.Errorf("finetune: %w", err)
				}
			}
			// Flags the user set override the file.
			if err := options.Apply(cmd.Flags(), &cfg); err != nil {
				return fmt.Errorf("finetune: %w", err)
			}
			return runFinetune(cmd, cfg, ef, pf, resume, stopAfter)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configFile, "config", "", "YAML configuration file")
	fl.StringVar(&resume, "resume", "", "continue the run in this folder (or from this checkpoint)")
	fl.IntVar(&stopAfter, "stop-after", 0, "stop (with a checkpoint) after this step, to continue later with --resume")
	options.Bind(fl, &flagCfg)
	ef.register(fl)
	pf.register(fl)
	return cmd
}

func runFinetune(cmd *cobra.Command, cfg finetune.Config, ef engineFlags, pf parallelFlags, resume string, stopAfter int) error {
	if stopAfter < 0 {
		return fmt.Errorf("finetune: --stop-after %d: want a step of 1 or more (0: no stop)", stopAfter)
	}
	// The configuration is checked before anything starts (every rank
	// checks it again when it opens the run).
	if err := cfg.Validate(); err != nil {
		return err
	}
	l, err := launcher(ef, pf, cfg.Model)
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	kill, err := killHook()
	if err != nil {
		return err
	}
	// Every rank trains; the lead rank alone writes the run's files and
	// reports.
	return l.Run(func(r launch.Rank) error {
		h := finetune.Hooks{Resume: resume, StopAfter: stopAfter}
		var bar *progressbar.ProgressBar
		if r.Lead() {
			h.BeforeCommit = kill
			h.Started = func(run *finetune.Run) {
				if isTerminal(cmd.ErrOrStderr()) {
					bar = progressbar.NewOptions(run.Steps,
						progressbar.OptionSetWriter(cmd.ErrOrStderr()),
						progressbar.OptionSetDescription("finetune"),
						progressbar.OptionShowCount(),
						progressbar.OptionSetPredictTime(true),
						progressbar.OptionShowElapsedTimeOnFinish())
					bar.Set(run.Step)
				}
			}
			h.Progress = func(m finetune.Metrics) {
				if bar != nil {
					bar.Describe(fmt.Sprintf("finetune loss %.4f", m.Loss))
					bar.Set(m.Step)
				}
			}
		}
		last, err := finetune.TrainRank(cfg, r.Backend, r.Grid, h)
		if bar != nil {
			bar.Finish()
			fmt.Fprintln(cmd.ErrOrStderr())
		}
		if err != nil || !r.Lead() {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "trained %d steps: loss %.4f, dropped %.1f%%, %.0f tokens/s; checkpoint %s\n",
			last.Step, last.Loss, 100*last.DroppedFrac, last.TokensPerS, last.CheckpointDir)
		return nil
	})
}

// killHook is the crash-safety tests' hook (killInSaveEnv): die by SIGKILL
// in the middle of saving the checkpoint of a step, its files written but
// not committed.
func killHook() (func(int, string), error) {
	s := os.Getenv(killInSaveEnv)
	if s == "" {
		return nil, nil
	}
	step, err := strconv.Atoi(s)
	if err != nil {
		return nil, fmt.Errorf("finetune: %s=%q: want a step number", killInSaveEnv, s)
	}
	return func(at int, _ string) {
		if at == step {
			killSelf()
		}
	}, nil
}
