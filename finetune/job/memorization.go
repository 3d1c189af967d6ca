package job

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"

	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/memorization"
)

// An Extraction is a memorization evaluation of a model on a launcher's
// ranks: every rank makes the same model calls in the same order (the
// collectives inside them pair up), and the lead rank reports.
type Extraction struct {
	Model     finetune.ModelRef
	Reference finetune.ModelRef // the reference model of the RefScore (Dir "": none)
	Documents memorization.DocumentSource
	// Config is the evaluation's; its Reference, Decode, StopIDs and
	// Progress are set here, from the models and Progress.
	Config memorization.EvalConfig
	// Progress, if set, is called on the lead rank with the passes done
	// and their total (memorization.EvalProgress).
	Progress func(done, total int)
}

// A ReferenceError is a reference model that cannot serve: it does not
// load, fit or share the model's tokenizer.
type ReferenceError struct {
	Dir string
	Err error
}

func (e *ReferenceError) Error() string { return e.Dir + ": " + e.Err.Error() }
func (e *ReferenceError) Unwrap() error { return e.Err }

// EvaluateExtraction runs e and returns the lead rank's summary and
// per-document results (nil on the others) and whether this process holds
// the lead rank. The models' own memory is checked before they load (the
// probes' lengths are known only once the documents are read, on the
// ranks), the reference's weights beside the model's.
func EvaluateExtraction(l *launch.Launcher, e Extraction) (*memorization.Summary, []memorization.DocResult, bool, error) {
	var beside int64
	if e.Reference.Dir != "" {
		refCfg, err := modelPreflight(l, e.Reference.Dir, llama.Work{})
		if err != nil {
			return nil, nil, false, &ReferenceError{Dir: e.Reference.Dir, Err: err}
		}
		beside = llama.Memory(refCfg, llama.Work{Grid: l.Spec().Grid, Overlap: l.Spec().Overlap}).Params
	}
	if _, err := modelPreflight(l, e.Model.Dir, llama.Work{Beside: beside}); err != nil {
		return nil, nil, false, err
	}
	var (
		sum  *memorization.Summary
		res  []memorization.DocResult
		lead bool
	)
	err := l.Run(func(r launch.Rank) error {
		opt := llama.Options{Parallel: r.Grid}
		lm, err := finetune.LoadWithTokenizer(r.Backend, e.Model, opt, false)
		if err != nil {
			return err
		}
		defer lm.Model.Free()
		cfg := e.Config
		if e.Reference.Dir != "" {
			ref, err := finetune.LoadWithTokenizer(r.Backend, e.Reference, opt, false)
			if err != nil {
				return &ReferenceError{Dir: e.Reference.Dir, Err: err}
			}
			defer ref.Model.Free()
			if err := lm.SameTokenizer(ref); err != nil {
				return &ReferenceError{Dir: e.Reference.Dir, Err: err}
			}
			cfg.Reference = ref.Model
		}
		if lm.Tokenizer == nil && !(len(e.Documents.Data) == 1 && memorization.IsDataset(e.Documents.Data[0])) {
			return finetune.NoTokenizerError(e.Model.Dir)
		}
		docs, err := memorization.LoadDocuments(e.Documents, lm.Tokenizer)
		if err != nil {
			return err
		}
		if lm.Tokenizer != nil {
			cfg.Decode = lm.Tokenizer.DecodeSkipSpecial
			cfg.StopIDs = finetune.StopIDs(lm.Tokenizer)
		}
		if e.Progress != nil && r.Lead() {
			cfg.Progress = func(scored, nDocs, decoded, probes int) {
				e.Progress(memorization.EvalProgress(scored, nDocs, decoded, probes))
			}
		}
		s, rs, err := memorization.Evaluate(lm.Model, docs, cfg)
		if r.Lead() {
			sum, res, lead = s, rs, true
		}
		return err
	})
	return sum, res, lead, err
}

// modelPreflight checks that the model in dir, with w's work, fits the
// launcher's devices, and returns its configuration.
func modelPreflight(l *launch.Launcher, dir string, w llama.Work) (*checkpoints.Config, error) {
	cfg, err := checkpoints.ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	if err := PreflightModel(l, cfg, w); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return cfg, nil
}
