package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

func newEvalCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "Evaluate a model: loss and perplexity, memorization",
	}
	cmd.AddCommand(newEvalLossCmd(), newEvalMemorizationCmd())
	return cmd
}

type evalLossFlags struct {
	model, data string
	adapter     string
	split       string
	batch       int
	seqLen      int
	json        bool
	bos         bool
	engine      engineFlags
	parallel    parallelFlags
}

// docLoss is one document's result in `eval loss --json`.
type docLoss struct {
	Index  int     `json:"index"`
	Line   int     `json:"line"`
	Tokens int     `json:"tokens"` // targets scored
	Loss   float64 `json:"loss"`
}

type evalLossReport struct {
	Model      string    `json:"model"`
	Data       string    `json:"data"`
	Split      string    `json:"split,omitempty"` // a dataset's split scored
	SeqLen     int       `json:"seq_len"`         // the window length
	Documents  int       `json:"documents"`
	Skipped    int       `json:"skipped"` // documents with fewer than two tokens
	Tokens     int64     `json:"tokens"`
	Loss       float64   `json:"loss"`
	Perplexity float64   `json:"perplexity"`
	PerDoc     []docLoss `json:"per_document,omitempty"`
}

func newEvalLossCmd() *cobra.Command {
	var f evalLossFlags
	cmd := &cobra.Command{
		Use:   "loss --model DIR --data FILE.jsonl|DATASET",
		Short: "Mean loss and perplexity of a model over JSONL documents or a dataset's split",
		Long: `eval loss scores every document of a JSONL file, lines {"input_ids": [...]}
or {"text": "..."} (tokenized with the checkpoint's tokenizer, BOS added unless
--bos=false), or of a prepared dataset folder (memtrain data prepare): by default
its holdout split, the held-out documents the model was not trained on; --split
train or both for the others. A dataset must share the model's tokenizer, and
is scored in its own sequences exactly as training evaluates it (the same
targets, padding left out, no goldfish mask), so the holdout split's loss of a
checkpoint is the run's eval_loss at that step. In a file, each token after the
first is predicted from the ones before it; documents longer than --seq-len
(default the model's max_position_embeddings capped at 2048) are scored in
consecutive windows. The mean is over all scored tokens; perplexity is its
exponential. --json adds each document's loss (a dataset's: of the sequences
that begin in it). With --parallel the model is split over a grid of in-process
ranks, and the data·Z ranks take turns through the batches.`,
		Example: `  memtrain eval loss --model ./tiny --data held-out.jsonl --json`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return runEvalLoss(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "checkpoint folder, run folder (its latest checkpoint) or RUN/checkpoints/latest")
	fl.StringVar(&f.adapter, "adapter", "", "a LoRA adapter folder (PEFT format, e.g. a LoRA run's RUN/final) to apply to the model")
	fl.StringVar(&f.data, "data", "", "JSONL file of documents ({\"input_ids\":[...]} or {\"text\":...}), or a dataset folder")
	fl.StringVar(&f.split, "split", "", "with a dataset: the split to score, train, holdout or both (default holdout)")
	fl.IntVar(&f.batch, "batch", 8, "sequences per forward pass")
	fl.IntVar(&f.seqLen, "seq-len", 0, "window length in tokens for a file (default min(2048, max_position_embeddings)); a dataset has its own")
	fl.BoolVar(&f.json, "json", false, "print a JSON report with per-document losses")
	fl.BoolVar(&f.bos, "bos", true, "add BOS when tokenizing text")
	f.engine.register(fl)
	f.parallel.register(fl)
	cmd.MarkFlagRequired("model")
	cmd.MarkFlagRequired("data")
	return cmd
}

func runEvalLoss(cmd *cobra.Command, f evalLossFlags) error {
	switch {
	case f.batch <= 0:
		return fmt.Errorf("eval loss: --batch %d: want 1 or more", f.batch)
	case f.seqLen < 0:
		return fmt.Errorf("eval loss: --seq-len %d: want 1 or more (0: the default)", f.seqLen)
	case f.batch > units.MaxCount:
		return fmt.Errorf("eval loss: --batch %d: want 1 to %d", f.batch, units.MaxCount)
	case f.seqLen > checkpoints.MaxPositions:
		return fmt.Errorf("eval loss: --seq-len %d: want 1 to %d (0: the default; no model has more positions)", f.seqLen, checkpoints.MaxPositions)
	}
	l, ref, err := launcher(cmd.ErrOrStderr(), f.engine, f.parallel, f.model, f.adapter)
	if err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	f.model, f.adapter = ref.Dir, ref.Adapter
	cfg, err := checkpoints.ReadConfig(f.model)
	if err != nil {
		return err
	}
	what := "--seq-len"
	if memorization.IsDataset(f.data) {
		if f.split == "" {
			f.split = string(data.Holdout)
		}
		if f.seqLen != 0 {
			return fmt.Errorf("eval loss: --seq-len goes with a file: %s is scored in its own sequences, as training evaluates it", f.data)
		}
		s, err := data.OpenStore(f.data)
		if err != nil {
			return fmt.Errorf("eval loss: %w", err)
		}
		f.seqLen, what = s.SeqLen(), f.data+"'s seq_len"
		s.Close()
	} else if f.split != "" {
		return fmt.Errorf("eval loss: --split %s goes with a dataset folder, and %s is none (no manifest.json)", f.split, f.data)
	}
	switch f.split {
	case "", string(data.Train), string(data.Holdout), "both":
	default:
		return fmt.Errorf("eval loss: --split %q: want train, holdout or both", f.split)
	}
	if f.seqLen == 0 {
		f.seqLen = cfg.DefaultSeqLen()
	}
	if f.seqLen > cfg.MaxPositionEmbeddings {
		return fmt.Errorf("eval loss: %s %d exceeds the model's max_position_embeddings %d", what, f.seqLen, cfg.MaxPositionEmbeddings)
	}
	if err := preflight(l, cfg, llama.Work{Batch: f.batch, SeqLen: f.seqLen}); err != nil {
		return fmt.Errorf("eval loss: %s: %w", f.model, err)
	}
	return l.Run(func(r launch.Rank) error {
		lm, err := loadOn(f.model, f.adapter, r.Backend, llama.Options{Parallel: r.Grid}, f.split != "")
		if err != nil {
			return err
		}
		defer lm.model.Free()
		return evalLoss(cmd, f, lm, r.Lead())
	})
}

// evalLoss scores the documents on one rank, or on one rank of a grid
// (llama.Model.Score: the data·Z ranks take batches in turn); the lead
// rank reports.
func evalLoss(cmd *cobra.Command, f evalLossFlags, lm *loadedModel, lead bool) error {
	src, docs, done, err := evalLossSource(f, lm)
	if err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	defer done()
	if src.Len() == 0 {
		return fmt.Errorf("eval loss: %s: no document has two or more tokens", f.data)
	}
	opt := llama.ScoreOptions{Docs: len(docs), Batch: f.batch}
	var bar *progressbar.ProgressBar
	if lead && isTerminal(cmd.ErrOrStderr()) {
		bar = progressbar.Default(int64(src.Len()), "eval loss")
		opt.Progress = func(done, _ int) { bar.Set(done) }
	}
	sc, err := lm.model.Score(src, opt)
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	if err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	if !lead {
		return nil
	}
	rep := evalLossReport{Model: f.model, Data: f.data, Split: f.split, SeqLen: f.seqLen}
	for d, line := range docs {
		if sc.Weight[d] == 0 {
			rep.Skipped++
			continue
		}
		rep.Documents++
		rep.Tokens += int64(sc.Weight[d])
		rep.PerDoc = append(rep.PerDoc, docLoss{Index: d, Line: line, Tokens: int(sc.Weight[d]), Loss: sc.DocMean(d)})
	}
	rep.Loss = sc.Mean()
	if math.IsNaN(rep.Loss) || math.IsInf(rep.Loss, 0) {
		return fmt.Errorf("eval loss: %s: %w: the loss over %d tokens is %v", f.model, errNotFinite, rep.Tokens, rep.Loss)
	}
	rep.Perplexity = math.Exp(rep.Loss)
	return printEvalLoss(cmd.OutOrStdout(), rep, f.json)
}

// evalLossSource is what eval loss scores, with each document's line in its
// input file: a dataset's split(s) in the dataset's own sequences
// (finetune.Sequences, the trainer's held-out evaluation), or a file's
// documents in windows of --seq-len (set and checked by runEvalLoss). done
// releases the dataset once scored.
func evalLossSource(f evalLossFlags, lm *loadedModel) (src llama.Source, lines []int, done func(), err error) {
	if f.split == "" {
		docs, _, err := data.ReadTokenized([]string{f.data}, lm.tok, f.bos, data.ReadOptions{IDsOrText: true, Strict: true, VocabSize: lm.model.Config.VocabSize})
		if err != nil {
			return nil, nil, nil, err
		}
		if len(docs) == 0 {
			return nil, nil, nil, fmt.Errorf("%s: no documents", f.data)
		}
		ids, lines := make([][]int32, len(docs)), make([]int, len(docs))
		for d, doc := range docs {
			ids[d], lines[d] = doc.IDs, int(doc.Line)
		}
		return llama.NewWindows(ids, f.seqLen), lines, func() {}, nil
	}
	s, err := data.OpenStore(f.data)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (llama.Source, []int, func(), error) {
		s.Close()
		return nil, nil, nil, err
	}
	if lm.tok != nil && s.Manifest().Tokenizer.SHA256 != lm.tok.Hash() {
		return fail(fmt.Errorf("%s was tokenized with another tokenizer than the model's", f.data))
	}
	splits := []data.Split{data.Split(f.split)}
	if f.split == "both" {
		splits = []data.Split{data.Train, data.Holdout}
	}
	seqs, err := finetune.NewSequences(s, splits...)
	if err != nil {
		return fail(err)
	}
	lines = make([]int, seqs.Docs())
	for d := range lines {
		info, err := s.Doc(seqs.DocID(d))
		if err != nil {
			return fail(err)
		}
		lines[d] = int(info.Line)
	}
	return seqs, lines, func() { s.Close() }, nil
}

func printEvalLoss(w io.Writer, rep evalLossReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		return enc.Encode(rep)
	}
	_, err := fmt.Fprintf(w, "loss %.4f  perplexity %.2f  (%d documents, %d tokens scored, %d skipped)\n",
		rep.Loss, rep.Perplexity, rep.Documents, rep.Tokens, rep.Skipped)
	return err
}
