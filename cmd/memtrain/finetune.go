package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/finetune"
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
		force              bool
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
			if resume != "" && !samePath(cfg.Out, runDir) {
				return fmt.Errorf("finetune: --out %s and --resume %s name different folders: a run continues in its own folder (copy it first to continue it elsewhere)", cfg.Out, resume)
			}
			if force && resume != "" {
				return errors.New("finetune: --force starts over and --resume continues: give one")
			}
			return runFinetune(cmd, cfg, ef, pf, finetune.Hooks{Resume: resume, StopAfter: stopAfter, Replace: force})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&configFile, "config", "", "YAML configuration file")
	fl.StringVar(&resume, "resume", "", "continue the run in this folder (or from this checkpoint)")
	fl.IntVar(&stopAfter, "stop-after", 0, "stop (with a checkpoint) after this step, to continue later with --resume")
	fl.BoolVar(&force, "force", false, "start over in a folder that holds a run, removing its checkpoints, metrics and config.yaml")
	options.Bind(fl, &flagCfg)
	ef.register(fl)
	pf.register(fl)
	return cmd
}

func runFinetune(cmd *cobra.Command, cfg finetune.Config, ef engineFlags, pf parallelFlags, h finetune.Hooks) error {
	if h.StopAfter < 0 {
		return fmt.Errorf("finetune: --stop-after %d: want a step of 1 or more (0: no stop)", h.StopAfter)
	}
	if h.StopAfter > units.MaxCount {
		return fmt.Errorf("finetune: --stop-after %d: want a step of 1 to %d (0: no stop)", h.StopAfter, units.MaxCount)
	}
	// The configuration is checked before anything starts (every rank
	// checks it again when it opens the run).
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := checkRunFolder(cfg.Out); err != nil {
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
	have, err := l.Memory()
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	if err := finetune.Preflight(cfg, l.Spec().Grid, l.Spec().Overlap, have); err != nil {
		return evalBatchMemory(err, cfg, l, have)
	}
	if err := checkRunSteps(cfg); err != nil {
		return err
	}
	kill, err := killHook()
	if err != nil {
		return err
	}
	stops := stopsignal.Start(cmd.ErrOrStderr())
	defer stops.Stop()
	h.Stop = stops.Requested
	// Every rank trains; the lead rank alone writes the run's files and
	// reports.
	var (
		res  finetune.Result
		lead bool // this process runs the lead rank (under mpirun, only one does)
	)
	err = l.Run(func(r launch.Rank) error {
		h := h
		var bar *progressbar.ProgressBar
		steps, heldOut := 0, 0.0
		if r.Lead() {
			h.BeforeCommit = kill
			h.Started = func(run *finetune.Run) {
				steps = run.Steps
				for _, w := range run.Warnings {
					fmt.Fprintln(cmd.ErrOrStderr(), "memtrain: warning: "+oneLine(w))
				}
				if run.Step > 0 && run.Step < run.Steps {
					// Said whether or not a progress bar follows: a log
					// shows where the run picked up.
					fmt.Fprintf(cmd.ErrOrStderr(), "memtrain: resuming %s from step %d of %d\n", cfg.Out, run.Step, run.Steps)
				}
				if isTerminal(cmd.ErrOrStderr()) && run.Step < run.Steps {
					bar = newBar(cmd.ErrOrStderr(), run.Steps, "finetune")
					bar.Set(run.Step)
				}
			}
			h.Progress = func(m finetune.Metrics) {
				if m.EvalLoss > 0 {
					heldOut = m.EvalLoss
				}
				if bar != nil {
					bar.Describe(stepDescription(m, heldOut))
					bar.Set(m.Step)
				}
				var lines []string
				if m.EvalLoss > 0 {
					lines = append(lines, evalLine(m, steps))
				}
				for _, smp := range m.Samples {
					lines = append(lines, fmt.Sprintf("step %d/%d: sample %q → %q", m.Step, steps, smp.Prompt, smp.Text))
				}
				if e := m.Extraction; e != nil {
					lines = append(lines, extractionLine(m.Step, steps, e))
				}
				if len(lines) > 0 {
					line := strings.Join(lines, "\n")
					if bar != nil {
						// Above the bar: clear its line, print, redraw.
						bar.Clear()
						fmt.Fprintln(cmd.ErrOrStderr(), line)
						bar.RenderBlank()
					} else {
						fmt.Fprintln(cmd.ErrOrStderr(), line)
					}
				}
			}
		}
		out, err := finetune.TrainRank(cfg, r.Backend, r.Grid, h)
		if bar != nil {
			bar.Finish()
			fmt.Fprintln(cmd.ErrOrStderr())
		}
		if r.Lead() {
			res, lead = out, true
		}
		return err
	})
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
		fmt.Fprintf(w, "trained %d steps: loss %.4f, dropped %.1f%%, %.0f tokens/s; checkpoint %s\n",
			last.Step, last.Loss, 100*last.DroppedFrac, last.TokensPerS, last.CheckpointDir)
	}
	return nil
}

// resumeFinetune is the command that continues the run in out on the
// same grid and device.
func resumeFinetune(out string, ef engineFlags, pf parallelFlags) string {
	resume := "memtrain finetune --resume " + shellQuote(out)
	if pf.grid != "" {
		resume += " --parallel " + shellQuote(pf.grid)
	}
	if ef.device != "cpu" {
		resume += " --device " + shellQuote(ef.device)
	}
	return resume
}

// checkRunFolder refuses a run folder that is the filesystem root or the
// user's home folder itself: a run writes and, with --force, removes its
// files there, beside everything else the folder holds.
func checkRunFolder(out string) error {
	abs, err := filepath.Abs(out)
	if err != nil {
		return fmt.Errorf("finetune: out: %w", err)
	}
	what := ""
	if abs == filepath.VolumeName(abs)+string(filepath.Separator) {
		what = "the filesystem root"
	} else if home, err := os.UserHomeDir(); err == nil && home != "" && samePath(abs, home) {
		what = "your home folder"
	}
	if what != "" {
		return fmt.Errorf("finetune: out: %s is %s itself (want a run folder of its own, such as %s)", out, what, filepath.Join(abs, "run"))
	}
	return nil
}

// checkRunSteps refuses epochs whose steps — epochs × the steps of an
// epoch, multiplied without overflow — are more than any run's
// (units.MaxCount), as max_steps is.
func checkRunSteps(cfg finetune.Config) error {
	if cfg.MaxSteps > 0 {
		return nil
	}
	store, err := data.OpenStore(cfg.Data)
	if err != nil {
		return fmt.Errorf("finetune: %w", err)
	}
	n := store.NumSequences(data.Train)
	store.Close()
	perEpoch := (int64(n) + int64(cfg.BatchSize) - 1) / int64(cfg.BatchSize)
	if steps, ok := units.MulInt(int64(cfg.Epochs), perEpoch); !ok || steps > units.MaxCount {
		return fmt.Errorf("finetune: epochs %d of %d steps each is more than %d steps (want at most %d epochs, or max_steps)",
			cfg.Epochs, perEpoch, units.MaxCount, units.MaxCount/max(perEpoch, 1))
	}
	return nil
}

// evalBatchMemory names eval_batch in a preflight's memory error that
// the held-out evaluation's passes alone cause (the run fits with
// eval_batch 0, micro_batch's), instead of the training batch the
// engine's message describes; other errors pass through.
func evalBatchMemory(err error, cfg finetune.Config, l *launch.Launcher, have []engine.DeviceMemory) error {
	var me *engine.MemoryError
	if !errors.As(err, &me) || cfg.EvalEvery <= 0 || cfg.EvalBatch <= cfg.MicroBatch {
		return err
	}
	alt := cfg
	alt.EvalBatch = 0
	if finetune.Preflight(alt, l.Spec().Grid, l.Spec().Overlap, have) != nil {
		return err
	}
	return fmt.Errorf("finetune: eval_batch %d: the held-out evaluation's passes of %d sequences need %s on %s, but %s is free (want a smaller eval_batch; 0 takes micro_batch's %d)",
		cfg.EvalBatch, cfg.EvalBatch, engine.FormatNeed(me.Need), me.Device, units.FormatBytes(me.Have), cfg.MicroBatch)
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
func stepDescription(m finetune.Metrics, heldOut float64) string {
	d := fmt.Sprintf("finetune loss %.4f, %.0f tokens/s", m.Loss, m.TokensPerS)
	if heldOut > 0 {
		d += fmt.Sprintf(", held-out %.4f", heldOut)
	}
	return d
}

// evalLine is the line a held-out evaluation prints: above the bar on a
// terminal, on its own otherwise.
func evalLine(m finetune.Metrics, steps int) string {
	return fmt.Sprintf("step %d/%d: held-out loss %.4f, perplexity %.1f", m.Step, steps, m.EvalLoss, m.EvalPerplex)
}

// extractionLine is a step's extraction measurement, as stderr shows it.
func extractionLine(step, steps int, e *memorization.ExtractionSummary) string {
	line := fmt.Sprintf("step %d/%d: extraction %s: members exact match %.1f%%, token match %.1f%%", step, steps, e.Protocol, 100*e.Members.Exact, 100*e.Members.Token)
	if n := e.NonMembers; n != nil {
		line += fmt.Sprintf("; non-members %.1f%%, %.1f%%", 100*n.Exact, 100*n.Token)
	}
	return line
}

// samePath reports whether two paths name the same folder: equal once
// made absolute and clean, or the same file by os.SameFile.
func samePath(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	if err1 == nil && err2 == nil && aa == ab {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}
