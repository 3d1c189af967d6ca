package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/finetune/job"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/stopsignal"
	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

// killInSaveEnv names the environment variable that makes `finetune` kill
// itself while saving the checkpoint of the given step (tests of
// crash-safe checkpoints).
const killInSaveEnv = "MEMTRAIN_TEST_KILL_IN_SAVE"

func newFinetuneCmd() *cobra.Command {
	var (
		configFile, resume string
		stopAfter          int
		force, download    bool
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
newest complete one; each checkpoint's checkpoint.json records its files'
sizes and SHA-256. --resume OUT continues a stopped run exactly, from the
newest checkpoint that verifies (a damaged one is passed over with a warning),
with OUT/config.yaml unless --config is given; a folder that holds a run is
never overwritten: continue it with --resume, or start over with --force. One
process at a time trains in a folder (a lock). SIGINT, SIGTERM and SIGUSR1
finish the current step, save a checkpoint and print the command that resumes;
a second signal stops at once.

--parallel dp=D,x=X,y=Y,z=Z trains on a 4D grid of D·X·Y·Z ranks — goroutines,
one a GPU with --device cuda, or one a process under mpirun with the mpi build
(AxoNN's data × tensor-parallel layout; 'memtrain plan' ranks grids): each rank
holds a shard of every weight, the batch's sequences are split over D·Z ranks
(micro_batch counts sequences over the whole grid: each takes
micro_batch/(D·Z)), and the metrics equal one rank's. Each grid position writes
its own pieces of a checkpoint and any grid reads them, so a run resumes on any
grid; 'memtrain export' makes an HF checkpoint of one.`,
		Example: `  memtrain finetune --model base --data ds --out run --loss goldfish --goldfish.k 4 --max-steps 100
  memtrain finetune --config run.yaml --resume run
  memtrain finetune --config run.yaml --parallel dp=2,x=2,y=1,z=2
  mpirun -np 8 memtrain finetune --config run.yaml --parallel dp=2,x=2,y=1,z=2   # go build -tags mpi`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := finetune.ReadConfig(configFile, resume)
			if err != nil {
				return err
			}
			// Flags the user set override the file.
			runDir := cfg.Out
			if err := options.Apply(cmd.Flags(), &cfg); err != nil {
				return fmt.Errorf("finetune: %w", err)
			}
			if resume != "" && !finetune.SamePath(cfg.Out, runDir) {
				return fmt.Errorf("finetune: --out %s and --resume %s name different folders: a run continues in its own folder (copy it first to continue it elsewhere)", cfg.Out, resume)
			}
			if force && resume != "" {
				return errors.New("finetune: --force starts over and --resume continues: give one")
			}
			if err := fetchModel(cmd, download, cfg.Model); err != nil {
				return fmt.Errorf("finetune: %w", err)
			}
			return runFinetune(cmd, cfg, ef, pf, finetune.Hooks{Resume: resume, StopAfter: stopAfter, Replace: force})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configFile, "config", "", "YAML configuration file")
	fl.StringVar(&resume, "resume", "", "continue the run in this folder (or from this checkpoint)")
	options.IntRange(fl, &stopAfter, "stop-after", 0, 1, units.MaxCount, "no stop", "stop (with a checkpoint) after this step, to continue later with --resume")
	fl.BoolVar(&force, "force", false, "start over in a folder that holds a run, removing its checkpoints, metrics and config.yaml")
	downloadFlag(fl, &download)
	options.Bind(fl, &flagCfg)
	ef.register(fl)
	pf.register(fl)
	return cmd
}

func runFinetune(cmd *cobra.Command, cfg finetune.Config, ef engineFlags, pf parallelFlags, h finetune.Hooks) error {
	// The configuration is checked before anything starts (every rank
	// checks it again when it opens the run).
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := finetune.CheckRunFolder(cfg.Out); err != nil {
		return err
	}
	l, ref, err := launcher(cmd.ErrOrStderr(), ef, pf, cfg.Model, "")
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	if ref.Adapter != "" {
		return fmt.Errorf("finetune: model %s is a LoRA adapter on %s: fine-tune the base (model: %s) and start from the adapter with lora.init: %s", cfg.Model, ref.Dir, ref.Dir, ref.Adapter)
	}
	cfg.Model = ref.Dir
	j, err := job.New(cfg, l)
	if err != nil {
		return err
	}
	if h.BeforeCommit, err = killHook(); err != nil {
		return err
	}
	stops := stopsignal.Start(cmd.ErrOrStderr())
	defer stops.Stop()
	h.Stop = stops.Requested
	// Every rank trains; the lead rank alone writes the run's files and
	// reports.
	stderr := cmd.ErrOrStderr()
	var bar *progressbar.ProgressBar
	res, lead, err := j.Train(h, job.Report{
		Warn: func(w string) { fmt.Fprintln(stderr, "memtrain: warning: "+oneLine(w)) },
		Started: func(run *finetune.Run) {
			if run.Step > 0 && run.Step < run.Steps {
				// Said whether or not a progress bar follows: a log
				// shows where the run picked up.
				fmt.Fprintf(stderr, "memtrain: resuming %s from step %d of %d\n", cfg.Out, run.Step, run.Steps)
			}
			if isTerminal(stderr) && run.Step < run.Steps {
				bar = newBar(stderr, run.Steps, "finetune", "steps")
				bar.Set(run.Step)
			}
		},
		Progress: func(p job.Progress) {
			if bar != nil {
				bar.Describe(stepDescription(p))
				bar.Set(p.Step)
			}
			var lines []string
			if p.EvalLoss > 0 {
				lines = append(lines, p.EvalLine())
			}
			lines = append(lines, p.SampleLines()...)
			if e := p.Extraction; e != nil {
				lines = append(lines, extractionLine(p.Step, p.Steps, e))
			}
			if len(lines) > 0 {
				line := strings.Join(lines, "\n")
				if bar != nil {
					// Above the bar: clear its line, print, redraw.
					bar.Clear()
					fmt.Fprintln(stderr, line)
					bar.RenderBlank()
				} else {
					fmt.Fprintln(stderr, line)
				}
			}
		},
	})
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(stderr)
	}
	var existing *finetune.ExistingRunError
	if errors.As(err, &existing) {
		return fmt.Errorf("finetune: %s holds a run%s: continue it with --resume %s, or start over in it with --force",
			existing.Dir, existing.Describe(), existing.Dir)
	}
	if err != nil {
		return err
	}
	if !lead {
		return nil // under mpirun, the process of rank 0 reports
	}
	w := cmd.OutOrStdout()
	switch last := res.Last; {
	case res.Done:
		fmt.Fprintf(w, "%s already finished (step %d of %d): nothing to train\n", cfg.Out, res.Step, res.Steps)
	case res.Stopped && stops.Signal() != nil:
		return &exitError{code: stopsignal.Exit(stops.Signal()), msg: fmt.Sprintf("finetune: stopped by %v after step %d of %d; checkpoint %s; resume with: %s",
			stops.Signal(), res.Step, res.Steps, last.CheckpointDir, resumeFinetune(cfg.Out, ef, pf))}
	case res.Step < res.Steps:
		// --stop-after: stopped as asked, and unfinished.
		fmt.Fprintf(w, "stopped after step %d of %d (--stop-after): loss %.4f; checkpoint %s; unfinished: resume with: %s\n",
			res.Step, res.Steps, last.Loss, last.CheckpointDir, resumeFinetune(cfg.Out, ef, pf))
	default:
		dropped := ""
		if cfg.Loss == finetune.Goldfish {
			dropped = fmt.Sprintf(", dropped %.1f%% of targets (goldfish: %s)", 100*last.DroppedFrac, cfg.Goldfish.DropRule())
		}
		fmt.Fprintf(w, "trained %d steps: loss %.4f%s, %.0f tokens/s; checkpoint %s\n",
			last.Step, last.Loss, dropped, last.TokensPerS, last.CheckpointDir)
	}
	return nil
}

// resumeFinetune is the command that continues the run in out on the
// same grid and device.
func resumeFinetune(out string, ef engineFlags, pf parallelFlags) string {
	resume := "memtrain finetune --resume " + options.ShellQuote(out)
	if pf.grid != "" {
		resume += " --parallel " + options.ShellQuote(pf.grid)
	}
	if ef.device != "cpu" {
		resume += " --device " + options.ShellQuote(ef.device)
	}
	return resume
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

// stepDescription is the progress bar's description after a step: its
// loss and throughput, and the last held-out loss (0: none yet).
func stepDescription(p job.Progress) string {
	d := fmt.Sprintf("finetune loss %.4f, %.0f tokens/s", p.Loss, p.TokensPerS)
	if p.HeldOut > 0 {
		d += fmt.Sprintf(", held-out %.4f", p.HeldOut)
	}
	return d
}

// extractionLine is a step's extraction measurement, as stderr shows it.
func extractionLine(step, steps int, e *memorization.ExtractionSummary) string {
	line := fmt.Sprintf("step %d/%d: extraction %s: members exact match %.1f%%, token match %.1f%%", step, steps, e.Protocol, 100*e.Members.Exact, 100*e.Members.Token)
	if n := e.NonMembers; n != nil {
		line += fmt.Sprintf("; non-members %.1f%%, %.1f%%", 100*n.Exact, 100*n.Token)
	}
	return line
}
