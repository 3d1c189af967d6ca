package finetune

import (
	"fmt"

	"github.com/memtrain/memtrain/data"
)

// Sequences is one or more splits of a dataset as a llama.Source: the
// sequences exactly as the trainer reads them (their targets, and weight 0
// on padding; no goldfish mask), each attributed to the document of its
// first token. The trainer's held-out evaluation and `eval loss` of a
// dataset both score it, so the two report one number for one checkpoint.
type Sequences struct {
	s      *data.Store
	splits []data.Split
	start  []int // start[j]: the first sequence of splits[j]; start[len] the total
	seqDoc []int // the document index (into Docs) of each sequence
	docs   []int // the store's id of each document, in order of first use
}

// NewSequences reads which document each sequence of the splits belongs to.
func NewSequences(s *data.Store, splits ...data.Split) (*Sequences, error) {
	q := &Sequences{s: s, splits: splits, start: []int{0}}
	T := s.SeqLen()
	ids, targets, weights := make([]int32, T), make([]int32, T), make([]float32, T)
	index := map[int]int{}
	for _, split := range splits {
		n := s.NumSequences(split)
		for i := range n {
			id, err := s.Sequence(split, i, ids, targets, weights)
			if err != nil {
				return nil, fmt.Errorf("finetune: %s: %w", s.Dir(), err)
			}
			d, ok := index[id]
			if !ok {
				d = len(q.docs)
				index[id] = d
				q.docs = append(q.docs, id)
			}
			q.seqDoc = append(q.seqDoc, d)
		}
		q.start = append(q.start, q.start[len(q.start)-1]+n)
	}
	return q, nil
}

// Len is the number of sequences.
func (q *Sequences) Len() int { return len(q.seqDoc) }

// Positions is the dataset's sequence length.
func (q *Sequences) Positions(int) int { return q.s.SeqLen() }

// Doc is the index of sequence i's document, in [0, Docs()).
func (q *Sequences) Doc(i int) int { return q.seqDoc[i] }

// Docs is the number of documents the sequences begin in.
func (q *Sequences) Docs() int { return len(q.docs) }

// DocID is the store's id of document d (see data.Store.Doc).
func (q *Sequences) DocID(d int) int { return q.docs[d] }

// Read writes sequence i.
func (q *Sequences) Read(i int, ids, targets []int32, weights []float32) error {
	j := 0
	for i >= q.start[j+1] {
		j++
	}
	_, err := q.s.Sequence(q.splits[j], i-q.start[j], ids, targets, weights)
	return err
}
