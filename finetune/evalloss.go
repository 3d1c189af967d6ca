package finetune

import (
	"errors"
	"fmt"
	"math"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/engine/llama"
)

// ErrNotFinite is the error of a model whose outputs are not finite.
var ErrNotFinite = errors.New("the model's outputs are not finite (its weights hold NaN or infinite values, or make them)")

// A DocLoss is one document's mean loss in a LossReport.
type DocLoss struct {
	Index  int     `json:"index"`
	Line   int     `json:"line"`
	Tokens int     `json:"tokens"` // targets scored
	Loss   float64 `json:"loss"`
}

// A LossReport is a model's mean loss on documents, over every scored
// token, and each document's: `memtrain eval loss`'s report, its JSON.
type LossReport struct {
	Model      string    `json:"model"`
	Data       string    `json:"data"`
	Split      string    `json:"split,omitempty"` // a dataset's split scored
	SeqLen     int       `json:"seq_len"`         // the window length
	Documents  int       `json:"documents"`
	Skipped    int       `json:"skipped"` // documents with fewer than two tokens
	Tokens     int64     `json:"tokens"`
	Loss       float64   `json:"loss"`
	Perplexity float64   `json:"perplexity"`
	PerDoc     []DocLoss `json:"per_document,omitempty"`
}

// A LossData is what a loss evaluation scores: a dataset folder's Split
// ("train", "holdout" or "both") in the dataset's own sequences, the
// trainer's held-out evaluation's (Sequences); or, with Split "", the
// documents of the input file Data (token ids, or text encoded with
// Tokenizer, BOS when asked) in windows of SeqLen tokens.
type LossData struct {
	Data      string
	Split     string
	Tokenizer *tokenizer.Tokenizer // the model's (nil: none); a dataset's must be it
	BOS       bool
	VocabSize int // the model's: larger ids in a file are refused
	SeqLen    int
}

// Open returns the source to score and each document's line in its input
// file; done releases the dataset once scored.
func (d LossData) Open() (src llama.Source, lines []int, done func(), err error) {
	if d.Split == "" {
		docs, _, err := data.ReadTokenized([]string{d.Data}, d.Tokenizer, d.BOS, data.ReadOptions{IDsOrText: true, Strict: true, VocabSize: d.VocabSize})
		if err != nil {
			return nil, nil, nil, err
		}
		if len(docs) == 0 {
			return nil, nil, nil, fmt.Errorf("%s: no documents", d.Data)
		}
		ids, lines := make([][]int32, len(docs)), make([]int, len(docs))
		for i, doc := range docs {
			ids[i], lines[i] = doc.IDs, int(doc.Line)
		}
		return llama.NewWindows(ids, d.SeqLen), lines, func() {}, nil
	}
	s, err := data.OpenStore(d.Data)
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (llama.Source, []int, func(), error) {
		s.Close()
		return nil, nil, nil, err
	}
	if d.Tokenizer != nil && s.Manifest().Tokenizer.SHA256 != d.Tokenizer.Hash() {
		return fail(fmt.Errorf("%s was tokenized with another tokenizer than the model's", d.Data))
	}
	splits := []data.Split{data.Split(d.Split)}
	if d.Split == "both" {
		splits = []data.Split{data.Train, data.Holdout}
	}
	seqs, err := NewSequences(s, splits...)
	if err != nil {
		return fail(err)
	}
	lines = make([]int, seqs.Docs())
	for i := range lines {
		info, err := s.Doc(seqs.DocID(i))
		if err != nil {
			return fail(err)
		}
		lines[i] = int(info.Line)
	}
	return seqs, lines, func() { s.Close() }, nil
}

// Report sums the scores sc of d's documents, whose lines Open gave, into
// the report of model: documents without a scored token are skipped. A
// loss that is not finite is ErrNotFinite.
func (d LossData) Report(model string, sc *llama.Scores, lines []int) (*LossReport, error) {
	rep := &LossReport{Model: model, Data: d.Data, Split: d.Split, SeqLen: d.SeqLen}
	for i, line := range lines {
		if sc.Weight[i] == 0 {
			rep.Skipped++
			continue
		}
		rep.Documents++
		rep.Tokens += int64(sc.Weight[i])
		rep.PerDoc = append(rep.PerDoc, DocLoss{Index: i, Line: line, Tokens: int(sc.Weight[i]), Loss: sc.DocMean(i)})
	}
	rep.Loss = sc.Mean()
	if math.IsNaN(rep.Loss) || math.IsInf(rep.Loss, 0) {
		return nil, fmt.Errorf("%s: %w: the loss over %d tokens is %v", model, ErrNotFinite, rep.Tokens, rep.Loss)
	}
	rep.Perplexity = math.Exp(rep.Loss)
	return rep, nil
}

// CheckFinite scores ids, a prompt and its continuation, with m (on every
// rank of a grid alike): a greedy continuation of logits that are NaN is
// the lowest id, <unk>, again and again, so a generation whose loss is
// not finite came from such a model and is refused (ErrNotFinite) rather
// than shown.
func CheckFinite(m *llama.Model, ids []int32) error {
	if len(ids) < 2 {
		return nil // nothing to score
	}
	sc, err := m.Score(llama.NewWindows([][]int32{ids}, m.Config.MaxPositionEmbeddings), llama.ScoreOptions{Docs: 1})
	if err != nil {
		return err
	}
	if l := sc.Mean(); math.IsNaN(l) || math.IsInf(l, 0) {
		return fmt.Errorf("%w: the loss of the first prompt and its continuation is %v", ErrNotFinite, l)
	}
	return nil
}
