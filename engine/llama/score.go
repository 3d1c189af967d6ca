package llama

import (
	"errors"
	"fmt"
	"math"
)

// Score is the one evaluator of held-out loss: every command and library
// that measures a model's loss over documents (fine-tuning's held-out
// evaluation, `eval loss`, the experiment runner's base models,
// memorization's membership scores) calls it, on one rank or on a grid.

// A Source is a list of sequences to score, each belonging to a document.
type Source interface {
	// Len is the number of sequences.
	Len() int
	// Positions is the number of positions of sequence i (at most the
	// model's context).
	Positions(i int) int
	// Doc is the document sequence i belongs to, in [0, ScoreOptions.Docs).
	Doc(i int) int
	// Read writes sequence i into rows of Positions(i) positions (zeroed
	// beforehand): its inputs, targets and 0/1 weights.
	Read(i int, ids, targets []int32, weights []float32) error
}

// ScoreOptions control Score.
type ScoreOptions struct {
	// Docs is the number of documents the sequences belong to (at least 1).
	Docs int
	// Batch is the sequences of one forward pass on each data·Z rank
	// (default 8).
	Batch int
	// PerToken keeps every scored position's loss, −w·log p(target).
	PerToken bool
	// Progress, if set, is called after each round with the sequences
	// scored so far and their total.
	Progress func(done, total int)
}

// Scores are the sums of Score per document.
type Scores struct {
	Sum    []float64 // Σ w·(−log p(target))
	Weight []float64 // Σ w
	// Tokens, with ScoreOptions.PerToken, are each document's position
	// losses, its sequences' in order, padding left out.
	Tokens [][]float32
}

// Mean is the loss over every scored target of every document: NaN when
// nothing was scored.
func (s *Scores) Mean() float64 {
	var sum, weight float64
	for d := range s.Sum {
		sum += s.Sum[d]
		weight += s.Weight[d]
	}
	if weight == 0 {
		return math.NaN()
	}
	return sum / weight
}

// DocMean is document d's mean loss (NaN when none of it was scored).
func (s *Scores) DocMean(d int) float64 {
	if s.Weight[d] == 0 {
		return math.NaN()
	}
	return s.Sum[d] / s.Weight[d]
}

// Score runs the model over every sequence of src and sums the loss per
// document. One rank scores Batch sequences a pass, each pass as wide as
// its longest sequence. On a grid the data·Z ranks take Batch sequences
// each in turn (a rank past the last scores one zero-weight sequence, so
// that every rank runs the same passes) and the sums are added up over
// them, so that every rank returns the same Scores, equal to one rank's.
func (m *Model) Score(src Source, opt ScoreOptions) (*Scores, error) {
	if opt.Docs < 1 {
		return nil, errors.New("llama: Score needs at least one document")
	}
	if opt.Batch <= 0 {
		opt.Batch = 8
	}
	n := src.Len()
	ranks, rank := m.Options.Parallel.BatchRanks(), m.Options.Parallel.BatchRank()
	// Where each sequence's position losses go in one flat vector, so
	// that a grid sums them in one call.
	var offset []int
	positions := 0
	if opt.PerToken {
		offset = make([]int, n+1)
		for i := range n {
			offset[i+1] = offset[i] + src.Positions(i)
		}
		positions = offset[n]
	}
	// Per document Σ w·CE, then Σ w, then the position losses.
	docs := opt.Docs
	sums := make([]float64, 2*docs+positions)
	flat := sums[2*docs:]
	for i := range n {
		if d := src.Doc(i); d < 0 || d >= docs {
			return nil, fmt.Errorf("llama: Score: sequence %d belongs to document %d of %d", i, d, docs)
		}
	}
	B := opt.Batch
	for round := 0; round*B*ranks < n; round++ {
		first := min(n, (round*ranks+rank)*B)
		last := min(first+B, n)
		T := 1
		for i := first; i < last; i++ {
			T = max(T, src.Positions(i))
		}
		if T > m.Config.MaxPositionEmbeddings {
			return nil, fmt.Errorf("llama: Score: a sequence of %d positions exceeds max_position_embeddings %d", T, m.Config.MaxPositionEmbeddings)
		}
		rows := max(last-first, 1) // an empty turn scores one padding sequence
		batch := Batch{B: rows, T: T, IDs: make([]int32, rows*T), Targets: make([]int32, rows*T), Weights: make([]float32, rows*T)}
		for i := first; i < last; i++ {
			s, p := i-first, src.Positions(i)
			lo, hi := s*T, s*T+p
			if err := src.Read(i, batch.IDs[lo:hi], batch.Targets[lo:hi], batch.Weights[lo:hi]); err != nil {
				return nil, err
			}
		}
		losses, err := m.TokenLosses(batch)
		if err != nil {
			return nil, err
		}
		for i := first; i < last; i++ {
			s, p, doc := i-first, src.Positions(i), src.Doc(i)
			for t := range p {
				j := s*T + t
				sums[doc] += float64(losses[j])
				sums[docs+doc] += float64(batch.Weights[j])
				if opt.PerToken {
					flat[offset[i]+t] = float64(losses[j])
				}
			}
		}
		if opt.Progress != nil {
			opt.Progress(min(n, (round+1)*B*ranks), n)
		}
	}
	if err := m.SumBatch(sums); err != nil {
		return nil, err
	}
	sc := &Scores{Sum: sums[:docs:docs], Weight: sums[docs : 2*docs : 2*docs]}
	if opt.PerToken {
		sc.Tokens = make([][]float32, docs)
		for i := range n {
			d := src.Doc(i)
			for t := offset[i]; t < offset[i+1]; t++ {
				sc.Tokens[d] = append(sc.Tokens[d], float32(flat[t]))
			}
		}
	}
	return sc, nil
}

// Windows is the Source of next-token scoring over documents of token
// ids: each document of two or more tokens is cut into consecutive
// windows of at most a given number of targets, inputs ids[s:s+n] predicting
// ids[s+1:s+n+1], each window starting without context. Documents of
// fewer than two tokens have no target and no window.
type Windows struct {
	docs [][]int32
	wins []window
}

type window struct{ doc, start, n int }

// NewWindows cuts docs into windows of at most targets targets.
func NewWindows(docs [][]int32, targets int) *Windows {
	w := &Windows{docs: docs}
	targets = max(targets, 1)
	for d, ids := range docs {
		for s := 0; s < len(ids)-1; s += targets {
			w.wins = append(w.wins, window{doc: d, start: s, n: min(targets, len(ids)-1-s)})
		}
	}
	return w
}

func (w *Windows) Len() int            { return len(w.wins) }
func (w *Windows) Positions(i int) int { return w.wins[i].n }

func (w *Windows) Doc(i int) int { return w.wins[i].doc }

func (w *Windows) Read(i int, ids, targets []int32, weights []float32) error {
	win := w.wins[i]
	src := w.docs[win.doc][win.start:]
	copy(ids, src[:win.n])
	copy(targets, src[1:win.n+1])
	for t := range win.n {
		weights[t] = 1
	}
	return nil
}
