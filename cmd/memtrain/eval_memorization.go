package main

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/finetune/job"
	"github.com/memtrain/memtrain/internal/options"
	"github.com/memtrain/memtrain/internal/units"
	"github.com/memtrain/memtrain/memorization"
)

type evalMemFlags struct {
	model            string
	adapter          string
	reference        string
	data, nonMembers []string
	split            string
	protocol         string
	prefixes         []int
	suffix           int
	limit            int
	batch            int
	minK             float64
	resamples        int
	seed             uint64
	samples          int
	temperature      float64
	topK             int
	strict           bool
	out              string
	force            bool
	download         bool
	engine           engineFlags
	parallel         parallelFlags
}

func newEvalMemorizationCmd() *cobra.Command {
	var f evalMemFlags
	cmd := &cobra.Command{
		Use:   "memorization --model DIR --data DATASET|FILE --out DIR",
		Short: "Measure verbatim extraction and membership inference, members against non-members",
		Long: `eval memorization cuts each document into prefix/suffix probes by a protocol,
decodes greedily from the prefix with the KV cache and compares the continuation
with the true suffix: sequence exact match, token match fraction, ROUGE-L on
tokens and on decoded words, and the longest exactly matching prefix. Beside
extraction it scores membership inference: each document's loss, zlib-normalised
loss and min-k% token probability, with the ROC AUC separating members from
non-members and the true-positive rate at 1% and 0.1% false-positive rate (exact,
from the empirical ROC; a threshold never splits tied scores, so with fewer than
1,000 non-members 0.1% allows no false positive). --reference-model adds the
reference-model attack: a document's loss minus its loss under a reference model
with the same tokenizer (the base model, say; lower is member-like).

--samples N adds probabilistic extraction beside greedy: N continuations of every
probe sampled at --temperature from the --top-k most likely tokens, seeded by
--seed (the same for a seed whatever --batch or --parallel), reporting the fraction
of documents extracted by at least one sample and the mean extraction probability
(the fraction of a document's samples that reproduce its suffix exactly).

--data is a dataset folder (memtrain data prepare): its train split are the
members, its holdout split the non-members (--split picks). Or it is input
files (JSONL, Parquet, text), tokenized with the checkpoint's tokenizer and BOS:
members, with --non-members naming files of held-out documents.

Protocols (lengths in tokens): goldfish (the suffix is the last --suffix tokens
of the first 2,048, default 50, the prefix the rest; documents of at most 50
tokens are skipped), pythia (--prefix 32 --suffix 32 by default), carlini
(--prefix 8,16,32,64 --suffix 50 by default: one probe per prefix length), custom
(--prefix P --suffix S) and chat. Documents too short for the protocol are
skipped and counted, or an error with --strict.

chat measures memorization of instruction data: --data is a chat dataset (data
prepare --chat), whose loss mask tells each assistant answer. Every answer of a
conversation is a probe: the prompt is the conversation up to the answer (BOS,
system prompt, earlier turns, the answer's header) plus the answer's first
--prefix tokens (default 0), and the suffix the answer's next --suffix tokens
(default 50; fewer where the answer ends first, its end-of-turn token included).
An answer of --prefix tokens or fewer gives no probe and is counted. A
conversation's loss, zlib and min-k% scores are over its answers' tokens, the
targets it was trained on.

Writes OUT/summary.json (aggregates with bootstrap 95% intervals) and
OUT/docs.jsonl (one line per document), and prints a table.

With --parallel the model is split over a grid of in-process ranks (a model too
large for one device is measured on the grid that holds it); every rank runs the
same probes and rank 0 writes the results, which equal one rank's.`,
		Example: `  memtrain eval memorization --model run/final --data ds --protocol goldfish --out eval
  memtrain eval memorization --model run/final --data chat-ds --protocol chat --prefix 8 --out eval-chat
  memtrain eval memorization --model ckpt --data targets.jsonl --non-members heldout.jsonl \
      --protocol carlini --prefix 16,32,64 --out eval-carlini`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return runEvalMemorization(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "checkpoint folder, run folder (its latest checkpoint) or RUN/checkpoints/latest")
	fl.StringVar(&f.adapter, "adapter", "", "a LoRA adapter folder (PEFT format, e.g. a LoRA run's RUN/final) to apply to the model")
	fl.StringVar(&f.reference, "reference-model", "", "a model with the same tokenizer (the base model, say): the reference-model attack scores loss minus its loss")
	fl.StringSliceVar(&f.data, "data", nil, "dataset folder, or input files or folders of member documents (comma-separated)")
	fl.StringSliceVar(&f.nonMembers, "non-members", nil, "input files of held-out documents (with input files as --data)")
	fl.StringVar(&f.split, "split", "both", "with a dataset: train (members), holdout (non-members) or both")
	fl.StringVar(&f.protocol, "protocol", "goldfish", "goldfish, pythia, carlini, custom or chat")
	fl.Var((*intList)(&f.prefixes), "prefix", "prefix length(s) in tokens, comma-separated (pythia, carlini, custom; chat: the answer's tokens in the prompt, default 0)")
	options.IntRange(fl, &f.suffix, "suffix", 0, 1, memorization.MaxLength, "the protocol's", "suffix length in tokens (default 50, pythia 32; chat: at most the rest of the answer)")
	options.IntRange(fl, &f.limit, "limit", 0, 1, units.MaxCount, "all", "evaluate at most this many members and as many non-members (0: all)")
	options.IntRange(fl, &f.batch, "batch", 8, 1, units.MaxCount, "", "probes decoded together")
	fl.Float64Var(&f.minK, "min-k", 20, "k of the min-k% probability score, in percent")
	options.IntRange(fl, &f.resamples, "resamples", 1000, 1, memorization.MaxResamples, "1,000", "bootstrap resamples of the confidence intervals")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the bootstrap and of the sampled continuations")
	options.IntRange(fl, &f.samples, "samples", 0, 1, memorization.MaxSamples, "greedy only", "sampled continuations a probe, for probabilistic extraction beside greedy (0: greedy only)")
	fl.Float64Var(&f.temperature, "temperature", 1, "temperature of the sampled continuations (above 0)")
	options.IntRange(fl, &f.topK, "top-k", 0, 1, checkpoints.MaxVocabSize, "the whole vocabulary", "sample from the k most likely tokens (0: the whole vocabulary)")
	fl.BoolVar(&f.strict, "strict", false, "fail on documents (chat: answers) too short for the protocol instead of skipping them")
	fl.StringVar(&f.out, "out", "", "folder for summary.json and docs.jsonl")
	fl.BoolVar(&f.force, "force", false, "replace an earlier result in --out")
	downloadFlag(fl, &f.download)
	f.engine.register(fl)
	f.parallel.register(fl)
	cmd.MarkFlagRequired("model")
	cmd.MarkFlagRequired("data")
	cmd.MarkFlagRequired("out")
	return cmd
}

func runEvalMemorization(cmd *cobra.Command, f evalMemFlags) error {
	// An earlier result is not replaced in silence, and the refusal comes
	// before the evaluation, not after it.
	if !f.force {
		for _, name := range []string{memorization.SummaryFileName, memorization.DocsFileName} {
			if _, err := os.Lstat(filepath.Join(f.out, name)); err == nil {
				return fmt.Errorf("eval memorization: %s holds an earlier result (%s): give another --out, or --force to replace it", f.out, name)
			}
		}
	}
	for flag, paths := range map[string][]string{"data": f.data, "non-members": f.nonMembers} {
		if i := slices.Index(paths, ""); i >= 0 {
			return fmt.Errorf("eval memorization: --%s: item %d of %d is empty (want paths, comma-separated)", flag, i+1, len(paths))
		}
	}
	if !(f.temperature > 0) || math.IsInf(f.temperature, 1) {
		return fmt.Errorf("eval memorization: --temperature %v: want a number above 0", f.temperature)
	}
	if err := memorization.CheckMinKPercent(f.minK); err != nil {
		return fmt.Errorf("eval memorization: --min-k %w", err)
	}
	p, err := memorization.ParseProtocol(f.protocol, f.prefixes, f.suffix)
	if err != nil {
		return err
	}
	if err := fetchModel(cmd, f.download, f.model); err != nil {
		return fmt.Errorf("eval memorization: %w", err)
	}
	l, ref, err := launcher(cmd.ErrOrStderr(), f.engine, f.parallel, f.model, f.adapter)
	if err != nil {
		return fmt.Errorf("eval memorization: %w", err)
	}
	e := job.Extraction{Model: ref,
		Documents: memorization.DocumentSource{Data: f.data, NonMembers: f.nonMembers, Split: f.split, Strict: f.strict, Limit: f.limit, Chat: p.Name == "chat"},
		Config: memorization.EvalConfig{Protocol: p, Batch: f.batch, MinKPercent: f.minK, Strict: f.strict,
			Bootstrap: memorization.Bootstrap{Resamples: f.resamples, Seed: f.seed, Level: 0.95}}}
	if f.samples > 0 {
		e.Config.Sampling = memorization.SampleConfig{Samples: f.samples, Temperature: f.temperature, TopK: f.topK, Seed: f.seed}
	}
	if f.reference != "" {
		if e.Reference, err = resolveAdapted(cmd.ErrOrStderr(), "reference model", f.reference, ""); err != nil {
			return fmt.Errorf("eval memorization: --reference-model: %w", err)
		}
	}
	var bar *progressbar.ProgressBar
	if errw := cmd.ErrOrStderr(); isTerminal(errw) {
		e.Progress = func(done, total int) {
			if bar == nil {
				bar = newBar(errw, total, "eval memorization", "passes")
			}
			bar.Set(done)
		}
	}
	sum, res, lead, err := job.EvaluateExtraction(l, e)
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	var ue *memorization.UsageError
	var re *job.ReferenceError
	switch {
	case errors.As(err, &ue):
		return fmt.Errorf("eval memorization: --%s goes with %s", ue.Option, ue.Goes)
	case errors.As(err, &re):
		return fmt.Errorf("eval memorization: --reference-model %w", err)
	case err != nil:
		return fmt.Errorf("eval memorization: %w", err)
	case !lead:
		return nil // under mpirun, the process of rank 0 writes
	}
	if err := memorization.WriteResults(f.out, sum, res); err != nil {
		return err
	}
	w := cmd.OutOrStdout()
	if err := memorization.WriteTable(w, sum); err != nil {
		return err
	}
	fmt.Fprintf(w, "wrote %s and %s\n", filepath.Join(f.out, memorization.SummaryFileName), filepath.Join(f.out, memorization.DocsFileName))
	return nil
}

// intList is a flag of integers, comma-separated (units.ParseInts); a
// repeated flag adds to the list.
type intList []int

func (l *intList) String() string { return fmt.Sprint([]int(*l)) }
func (l *intList) Type() string   { return "ints" }
func (l *intList) Set(s string) error {
	ns, err := units.ParseInts(s, math.MinInt32, math.MaxInt32)
	for _, n := range ns {
		*l = append(*l, int(n))
	}
	return err
}
