package job

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/memorization"
)

// A Scoring is the loss of a model on documents, on a launcher's ranks
// (llama.Model.Score: the data·Z ranks take batches in turn).
type Scoring struct {
	Model finetune.ModelRef
	// Data is a dataset folder, scored in its own sequences, or a JSONL
	// file cut into windows of SeqLen tokens (0: the model's default).
	Data   string
	Split  string // a dataset's split: train, holdout or both ("": holdout)
	SeqLen int
	BOS    bool // start a file's documents with BOS
	Batch  int
	// Progress, if set, is called on the lead rank with the sequences
	// scored and their total.
	Progress func(done, total int)
}

// A ScoringError is a Scoring's setting that its data cannot take.
type ScoringError struct{ Msg string }

func (e *ScoringError) Error() string { return e.Msg }

// Score scores s and returns the lead rank's report (nil on the others)
// and whether this process holds the lead rank. The sequence length and
// the batch are checked against the model and the ranks' devices before
// it loads.
func Score(l *launch.Launcher, s Scoring) (*finetune.LossReport, bool, error) {
	cfg, err := checkpoints.ReadConfig(s.Model.Dir)
	if err != nil {
		return nil, false, err
	}
	what := "sequence length"
	if memorization.IsDataset(s.Data) {
		if s.Split == "" {
			s.Split = string(data.Holdout)
		}
		if s.SeqLen != 0 {
			return nil, false, &ScoringError{fmt.Sprintf("a sequence length goes with a file: %s is scored in its own sequences, as training evaluates it", s.Data)}
		}
		st, err := data.OpenStore(s.Data)
		if err != nil {
			return nil, false, err
		}
		s.SeqLen, what = st.SeqLen(), s.Data+"'s seq_len"
		st.Close()
	} else if s.Split != "" {
		return nil, false, &ScoringError{fmt.Sprintf("split %s goes with a dataset folder, and %s is none (no manifest.json)", s.Split, s.Data)}
	}
	switch s.Split {
	case "", string(data.Train), string(data.Holdout), "both":
	default:
		return nil, false, &ScoringError{fmt.Sprintf("split %q: want train, holdout or both", s.Split)}
	}
	if s.SeqLen, err = cfg.SeqLen(s.SeqLen); err != nil {
		return nil, false, fmt.Errorf("%s %w", what, err)
	}
	if err := PreflightModel(l, cfg, llama.Work{Batch: s.Batch, SeqLen: s.SeqLen}); err != nil {
		return nil, false, fmt.Errorf("%s: %w", s.Model.Dir, err)
	}
	var (
		rep  *finetune.LossReport
		lead bool
	)
	err = l.Run(func(r launch.Rank) error {
		lm, err := finetune.LoadWithTokenizer(r.Backend, s.Model, llama.Options{Parallel: r.Grid}, s.Split != "")
		if err != nil {
			return err
		}
		defer lm.Model.Free()
		d := finetune.LossData{Data: s.Data, Split: s.Split, Tokenizer: lm.Tokenizer, BOS: s.BOS, VocabSize: lm.Model.Config.VocabSize, SeqLen: s.SeqLen}
		src, docs, done, err := d.Open()
		if err != nil {
			return err
		}
		defer done()
		if src.Len() == 0 {
			return fmt.Errorf("%s: no document has two or more tokens", s.Data)
		}
		opt := llama.ScoreOptions{Docs: len(docs), Batch: s.Batch}
		if s.Progress != nil && r.Lead() {
			opt.Progress = func(done, _ int) { s.Progress(done, src.Len()) }
		}
		sc, err := lm.Model.Score(src, opt)
		if err != nil || !r.Lead() {
			return err
		}
		lead = true
		rep, err = d.Report(s.Model.Dir, sc, docs)
		return err
	})
	return rep, lead, err
}
