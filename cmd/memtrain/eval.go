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
train or both for the others. A dataset must share the model's tokenizer. Each
token after the first is predicted from the ones before it; documents longer
than --seq-len (default: the dataset's seq_len, else the model's
max_position_embeddings capped at 2048) are scored in consecutive windows. The mean is
over all scored tokens; perplexity is its exponential. --json adds each
document's loss. With --parallel the model is split over a grid of in-process
ranks, and the data·Z ranks take turns through the batches.`,
		Example: `  memtrain eval loss --model ./tiny --data held-out.jsonl --json`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return runEvalLoss(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "checkpoint folder, run folder (its latest checkpoint) or RUN/checkpoints/latest")
	fl.StringVar(&f.data, "data", "", "JSONL file of documents ({\"input_ids\":[...]} or {\"text\":...}), or a dataset folder")
	fl.StringVar(&f.split, "split", "", "with a dataset: the split to score, train, holdout or both (default holdout)")
	fl.IntVar(&f.batch, "batch", 8, "sequences per forward pass")
	fl.IntVar(&f.seqLen, "seq-len", 0, "window length in tokens (default the dataset's seq_len, else min(2048, max_position_embeddings))")
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
	}
	l, model, err := launcher(cmd.ErrOrStderr(), f.engine, f.parallel, f.model)
	if err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	f.model = model
	cfg, err := checkpoints.ReadConfig(f.model)
	if err != nil {
		return err
	}
	what := "--seq-len"
	if memorization.IsDataset(f.data) {
		if f.split == "" {
			f.split = string(data.Holdout)
		}
		s, err := data.OpenStore(f.data)
		if err != nil {
			return fmt.Errorf("eval loss: %w", err)
		}
		dsLen := s.Manifest().Settings.SeqLen
		s.Close()
		if f.seqLen == 0 {
			f.seqLen, what = dsLen, f.data+"'s seq_len"
		}
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
		lm, err := loadOn(f.model, r.Backend, llama.Options{Parallel: r.Grid}, f.split != "")
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
	m := lm.model
	cfg := m.Config
	docs, err := evalLossDocuments(f, lm, cfg.VocabSize)
	if err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	if len(docs) == 0 {
		return fmt.Errorf("eval loss: %s: no documents", f.data)
	}
	T := f.seqLen // set and checked by runEvalLoss
	ids := make([][]int32, len(docs))
	for d, doc := range docs {
		ids[d] = doc.IDs
	}
	src := llama.NewWindows(ids, T)
	if src.Len() == 0 {
		return fmt.Errorf("eval loss: %s: no document has two or more tokens", f.data)
	}
	opt := llama.ScoreOptions{Docs: len(docs), Batch: f.batch}
	var bar *progressbar.ProgressBar
	if lead && isTerminal(cmd.ErrOrStderr()) {
		bar = progressbar.Default(int64(src.Len()), "eval loss")
		opt.Progress = func(done, _ int) { bar.Set(done) }
	}
	sc, err := m.Score(src, opt)
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
	rep := evalLossReport{Model: f.model, Data: f.data, Split: f.split, SeqLen: T}
	for d, doc := range docs {
		if sc.Weight[d] == 0 {
			rep.Skipped++
			continue
		}
		rep.Documents++
		rep.Tokens += int64(sc.Weight[d])
		rep.PerDoc = append(rep.PerDoc, docLoss{Index: d, Line: int(doc.Line), Tokens: int(sc.Weight[d]), Loss: sc.DocMean(d)})
	}
	rep.Loss = sc.Mean()
	rep.Perplexity = math.Exp(rep.Loss)
	return printEvalLoss(cmd.OutOrStdout(), rep, f.json)
}

// evalLossDocuments reads the documents to score: a dataset's split
// (memorization.LoadDocuments, which checks the dataset's tokenizer against
// the model's), or a JSONL file's records.
func evalLossDocuments(f evalLossFlags, lm *loadedModel, vocab int) ([]data.Document, error) {
	if f.split == "" {
		docs, _, err := data.ReadTokenized([]string{f.data}, lm.tok, f.bos, data.ReadOptions{IDsOrText: true, Strict: true, VocabSize: vocab})
		return docs, err
	}
	ds, err := memorization.LoadDocuments(memorization.DocumentSource{Data: []string{f.data}, Split: f.split}, lm.tok)
	if err != nil {
		return nil, err
	}
	docs := make([]data.Document, len(ds))
	for i, d := range ds {
		docs[i] = data.Document{Source: d.Source, Line: d.Line, IDs: d.IDs}
	}
	return docs, nil
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
