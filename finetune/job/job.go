// Package job runs a fine-tuning run on the ranks of an engine/launch
// Launcher: the checks before any rank starts, then finetune.TrainRank on
// every rank with the lead rank's reports. The CLI's finetune and the
// experiments runner both train through it. It sits apart from finetune
// because engine/launch links the CUDA backend, whose tests import
// finetune.
package job

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/units"
)

// A Job is a fine-tuning run on every rank of a launcher, checked to fit
// before any rank starts. It is the one sequence that the CLI's finetune
// and the experiments runner share: New checks (memory, the preflight,
// the run's length), Train starts the ranks (finetune.TrainRank on each)
// and reports the lead rank's progress.
type Job struct {
	cfg finetune.Config
	l   *launch.Launcher
}

// New checks that cfg can run on l's ranks: what each will allocate
// against what its device has free (finetune.Preflight against
// l.Memory; a memory error that the held-out evaluation's batch alone
// causes names eval_batch), and that an epochs-long run counts at most
// units.MaxCount steps. cfg.Model must be a checkpoint folder
// (finetune.ResolveAdapted's Dir).
func New(cfg finetune.Config, l *launch.Launcher) (*Job, error) {
	have, err := l.Memory()
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	s := l.Spec()
	if err := finetune.Preflight(cfg, s.Grid, s.Overlap, have); err != nil {
		return nil, evalBatchMemory(err, cfg, l, have)
	}
	if err := checkRunSteps(cfg); err != nil {
		return nil, err
	}
	return &Job{cfg: cfg, l: l}, nil
}

// A Progress is a run's place after a step, as the lead rank reports it.
type Progress struct {
	finetune.Metrics         // the step's
	Steps            int     // the run's length
	HeldOut          float64 // the latest held-out loss, this step's or an earlier one's (0: none yet)
}

// EvalLine is the line of the step's held-out evaluation (when
// finetune.Metrics.EvalLoss > 0).
func (p Progress) EvalLine() string {
	// The report's perplexity format (units.FormatPerplexity): the log and
	// the tables say one number the same way.
	return fmt.Sprintf("step %d/%d: held-out loss %.4f, perplexity %s", p.Step, p.Steps, p.EvalLoss, units.FormatPerplexity(p.EvalPerplex))
}

// SampleLines are the lines of the step's sample generations, one each.
func (p Progress) SampleLines() []string {
	lines := make([]string, len(p.Samples))
	for i, smp := range p.Samples {
		lines[i] = fmt.Sprintf("step %d/%d: sample %q → %q", p.Step, p.Steps, smp.Prompt, smp.Text)
	}
	return lines
}

// A Report hears a launched run's events, on the lead rank only; every
// field may be nil.
type Report struct {
	Warn     func(warning string) // each of the run's warnings once it opens (finetune.Run.Warnings)
	Started  func(*finetune.Run)  // once it opens, after the warnings
	Progress func(Progress)       // after every step
}

// Train runs the job: every rank trains (finetune.TrainRank with h, whose
// BeforeCommit runs on the lead rank only and whose Started and Progress
// Train replaces with rep's). It returns the lead rank's Result, and
// whether this process ran the lead rank (under mpirun, only one does).
func (j *Job) Train(h finetune.Hooks, rep Report) (res finetune.Result, lead bool, err error) {
	err = j.l.Run(func(r launch.Rank) error {
		h := h
		if r.Lead() {
			steps, heldOut := 0, 0.0
			h.Started = func(run *finetune.Run) {
				steps = run.Steps
				if rep.Warn != nil {
					for _, w := range run.Warnings {
						rep.Warn(w)
					}
				}
				if rep.Started != nil {
					rep.Started(run)
				}
			}
			h.Progress = func(m finetune.Metrics) {
				if m.EvalLoss > 0 {
					heldOut = m.EvalLoss
				}
				if rep.Progress != nil {
					rep.Progress(Progress{Metrics: m, Steps: steps, HeldOut: heldOut})
				}
			}
		} else {
			h.BeforeCommit, h.Started, h.Progress = nil, nil, nil
		}
		out, err := finetune.TrainRank(j.cfg, r.Backend, r.Grid, h)
		if r.Lead() {
			res, lead = out, true
		}
		return err
	})
	return res, lead, err
}

// PreflightModel checks, before any rank of l starts, that what each
// will allocate for a model of cfg doing w (on l's grid) fits its device
// (llama.Preflight against l.Memory): the check of every launch that
// evaluates or generates with a model, as New's is of training.
func PreflightModel(l *launch.Launcher, cfg *checkpoints.Config, w llama.Work) error {
	have, err := l.Memory()
	if err != nil {
		return err
	}
	s := l.Spec()
	w.Grid, w.Overlap = s.Grid, s.Overlap
	return llama.Preflight(cfg, w, have)
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
