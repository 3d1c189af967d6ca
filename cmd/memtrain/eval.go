package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
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
		Use:   "loss --model DIR --data FILE.jsonl",
		Short: "Mean loss and perplexity of a model over JSONL documents",
		Long: `eval loss scores every document of a JSONL file, lines {"input_ids": [...]}
or {"text": "..."} (tokenized with the checkpoint's tokenizer, BOS added unless
--bos=false). Each token after the first is predicted from the ones before it;
documents longer than --seq-len are scored in consecutive windows. The mean is
over all scored tokens; perplexity is its exponential. --json adds each
document's loss. With --parallel the model is split over a grid of in-process
ranks, and the data·Z ranks take turns through the batches.`,
		Example: `  memtrain eval loss --model ./tiny --data held-out.jsonl --json`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, args []string) error { return runEvalLoss(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.model, "model", "", "checkpoint folder")
	fl.StringVar(&f.data, "data", "", "JSONL file of documents ({\"input_ids\":[...]} or {\"text\":...})")
	fl.IntVar(&f.batch, "batch", 8, "sequences per forward pass")
	fl.IntVar(&f.seqLen, "seq-len", 0, "window length in tokens (default min(1024, max_position_embeddings))")
	fl.BoolVar(&f.json, "json", false, "print a JSON report with per-document losses")
	fl.BoolVar(&f.bos, "bos", true, "add BOS when tokenizing text")
	f.engine.register(fl)
	f.parallel.register(fl)
	cmd.MarkFlagRequired("model")
	cmd.MarkFlagRequired("data")
	return cmd
}

// readDocuments reads token ids from JSONL lines of input_ids or text.
func readDocuments(path string, tok *tokenizer.Tokenizer, bos bool, vocab int) (docs [][]int32, lines []int, err error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer file.Close()
	var texts []string
	var textLines []int
	var textSlots []int
	err = jsonlLines(file, func(line []byte, n int) error {
		var rec struct {
			InputIDs *[]int64 `json:"input_ids"`
			Text     *string  `json:"text"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("%s:%d: invalid JSON or a field of the wrong type: %v", path, n, err)
		}
		switch {
		case rec.InputIDs != nil:
			ids := make([]int32, len(*rec.InputIDs))
			for i, id := range *rec.InputIDs {
				if id < 0 || id >= int64(vocab) {
					return fmt.Errorf("%s:%d: input_ids: token id %d outside the vocabulary [0, %d)", path, n, id, vocab)
				}
				ids[i] = int32(id)
			}
			docs = append(docs, ids)
		case rec.Text != nil:
			if tok == nil {
				return fmt.Errorf("%s:%d: a text line needs the checkpoint's tokenizer.json", path, n)
			}
			texts = append(texts, *rec.Text)
			textLines = append(textLines, n)
			textSlots = append(textSlots, len(docs))
			docs = append(docs, nil)
		default:
			return fmt.Errorf("%s:%d: want a field \"input_ids\" or \"text\"", path, n)
		}
		lines = append(lines, n)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(texts) > 0 {
		enc := tok.EncodeBatch(texts, tokenizer.EncodeOptions{AddSpecial: bos}, 0)
		for i, ids := range enc {
			docs[textSlots[i]] = ids
		}
	}
	return docs, lines, nil
}

// window is one scored slice of a document: inputs ids[s:s+n], targets
// ids[s+1:s+n+1].
type window struct {
	doc, start, n int
}

func runEvalLoss(cmd *cobra.Command, f evalLossFlags) error {
	if f.batch <= 0 || f.seqLen < 0 {
		return errors.New("eval loss: --batch and --seq-len must be positive")
	}
	l, err := launcher(f.engine, f.parallel, f.model)
	if err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	return l.Run(func(r launch.Rank) error {
		lm, err := loadOn(f.model, r.Backend, llama.Options{Parallel: r.Grid}, false)
		if err != nil {
			return err
		}
		defer lm.model.Free()
		return evalLoss(cmd, f, lm)
	})
}

// evalLoss scores the documents on one rank, or on one rank of a grid:
// there the data·Z ranks take batches in turn (a rank past the last one
// scores a padding batch, so that every rank runs the same passes), the
// sums are added up over them, and rank 0 reports.
func evalLoss(cmd *cobra.Command, f evalLossFlags, lm *loadedModel) error {
	m := lm.model
	cfg := m.Config
	docs, lines, err := readDocuments(f.data, lm.tok, f.bos, cfg.VocabSize)
	if err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	if len(docs) == 0 {
		return fmt.Errorf("eval loss: %s: no documents", f.data)
	}
	T := f.seqLen
	if T == 0 {
		T = min(1024, cfg.MaxPositionEmbeddings)
	}
	if T > cfg.MaxPositionEmbeddings {
		return fmt.Errorf("eval loss: --seq-len %d exceeds the model's max_position_embeddings %d", T, cfg.MaxPositionEmbeddings)
	}
	var wins []window
	rep := evalLossReport{Model: f.model, Data: f.data}
	longest := 0
	for d, ids := range docs {
		if len(ids) < 2 {
			rep.Skipped++
			continue
		}
		for s := 0; s < len(ids)-1; s += T {
			n := min(T, len(ids)-1-s)
			wins = append(wins, window{doc: d, start: s, n: n})
			longest = max(longest, n)
		}
	}
	if len(wins) == 0 {
		return fmt.Errorf("eval loss: %s: no document has two or more tokens", f.data)
	}
	T = longest // no wider than the longest window: padding costs compute
	ranks, rank, lead := 1, 0, true
	if g := m.Grid(); g != nil {
		ranks, rank, lead = g.BatchRanks(), g.BatchRank(), g.Rank() == 0
	}
	sums := make([]float64, 2*len(docs)) // per document: loss sums, then target counts
	counts := sums[len(docs):]
	var bar *progressbar.ProgressBar
	if lead && isTerminal(cmd.ErrOrStderr()) {
		bar = progressbar.Default(int64(len(wins)), "eval loss")
	}
	for round := 0; round*f.batch*ranks < len(wins); round++ {
		first := min(len(wins), (round*ranks+rank)*f.batch)
		group := wins[first:min(first+f.batch, len(wins))]
		B := max(len(group), 1) // an empty turn scores one padding sequence
		batch := llama.Batch{B: B, T: T, IDs: make([]int32, B*T), Targets: make([]int32, B*T), Weights: make([]float32, B*T)}
		for s, w := range group {
			ids := docs[w.doc]
			for t := 0; t < w.n; t++ {
				batch.IDs[s*T+t] = ids[w.start+t]
				batch.Targets[s*T+t] = ids[w.start+t+1]
				batch.Weights[s*T+t] = 1
			}
		}
		loss, err := m.Evaluate(batch)
		if err != nil {
			return fmt.Errorf("eval loss: %w", err)
		}
		for s, w := range group {
			sums[w.doc] += loss.PerSeq[s]
			counts[w.doc] += loss.PerSeqWeight[s]
		}
		if bar != nil {
			bar.Add(min(len(wins), (round+1)*f.batch*ranks) - round*f.batch*ranks)
		}
	}
	if bar != nil {
		bar.Finish()
		fmt.Fprintln(cmd.ErrOrStderr())
	}
	if err := m.SumBatch(sums); err != nil {
		return fmt.Errorf("eval loss: %w", err)
	}
	if !lead {
		return nil
	}
	var total, weight float64
	for d := range docs {
		if counts[d] == 0 {
			continue
		}
		rep.Documents++
		total += sums[d]
		weight += counts[d]
		rep.PerDoc = append(rep.PerDoc, docLoss{Index: d, Line: lines[d], Tokens: int(counts[d]), Loss: sums[d] / counts[d]})
	}
	rep.Tokens = int64(weight)
	rep.Loss = total / weight
	rep.Perplexity = math.Exp(rep.Loss)
	return printEvalLoss(cmd.OutOrStdout(), rep, f.json)
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
