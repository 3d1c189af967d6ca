package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/finetune/job"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
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
	download    bool
	engine      engineFlags
	parallel    parallelFlags
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
	options.IntRange(fl, &f.batch, "batch", 8, 1, units.MaxCount, "", "sequences per forward pass")
	options.IntRange(fl, &f.seqLen, "seq-len", 0, 1, checkpoints.MaxPositions, "the default", "window length in tokens for a file (default min(2048, max_position_embeddings)); a dataset has its own")
	fl.BoolVar(&f.json, "json", false, "print a JSON report with per-document losses")
	fl.BoolVar(&f.bos, "bos", true, "add BOS when tokenizing text")
	downloadFlag(fl, &f.download)
	f.engine.register(fl)
	f.parallel.register(fl)
	cmd.MarkFlagRequired("model")
	cmd.MarkFlagRequired("data")
	return cmd
}

func runEvalLoss(cmd *cobra.Command, f evalLossFlags) error {
	if err := fetchModel(cmd, f.download, f.model); err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	l, ref, err := launcher(cmd.ErrOrStderr(), f.engine, f.parallel, f.model, f.adapter)
	if err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	s := job.Scoring{Model: ref, Data: f.data, Split: f.split, SeqLen: f.seqLen, BOS: f.bos, Batch: f.batch}
	var bar *progressbar.ProgressBar
	if isTerminal(cmd.ErrOrStderr()) {
		s.Progress = func(done, total int) {
			if bar == nil {
				bar = newBar(cmd.ErrOrStderr(), total, "eval loss", "sequences")
			}
			bar.Set(done)
		}
	}
	rep, lead, err := job.Score(l, s)
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	if err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	if !lead {
		return nil // under mpirun, the process of rank 0 prints
	}
	return printEvalLoss(cmd.OutOrStdout(), rep, f.json)
}

func printEvalLoss(w io.Writer, rep *finetune.LossReport, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		return enc.Encode(rep)
	}
	_, err := fmt.Fprintf(w, "loss %.4f  perplexity %s  (%d documents, %d tokens scored, %d skipped)\n",
		rep.Loss, units.FormatPerplexity(rep.Perplexity), rep.Documents, rep.Tokens, rep.Skipped)
	return err
}
