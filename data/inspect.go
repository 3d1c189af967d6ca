package data

import (
	"fmt"
	"math/bits"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// InspectOptions says what Inspect samples.
type InspectOptions struct {
	// Samples is how many sequences to sample: the first of the training
	// split, or of the holdout split when training has none.
	Samples int
	// Tokenizer, when set, decodes the samples' text. It must be the
	// dataset's.
	Tokenizer *tokenizer.Tokenizer
}

// An Inspection is a dataset's report: its manifest, histograms of its
// document lengths and of the targets per sequence, and sample sequences.
// It is the JSON of `memtrain data inspect --json`.
type Inspection struct {
	Dataset         string    `json:"dataset"` // the folder, as the Store was opened
	Manifest        *Manifest `json:"manifest"`
	DocumentLengths []Bucket  `json:"document_lengths"` // in tokens, BOS and EOS included
	SequenceTargets []Bucket  `json:"sequence_targets"` // of every sequence, both splits; positions that are not padding (a chat dataset's masked prompt tokens included)
	Samples         []Sample  `json:"samples"`
}

// A Bucket of a histogram counts the values in [Lo, Hi].
type Bucket struct {
	Lo    int64 `json:"lo"`
	Hi    int64 `json:"hi"`
	Count int64 `json:"count"`
}

// A Sample is one sequence of a dataset.
type Sample struct {
	Split    Split  `json:"split"`
	Sequence int    `json:"sequence"`
	Document int    `json:"document"` // the document it starts in
	Source   string `json:"source"`   // the document's input file
	Line     int64  `json:"line"`     // and line (or Parquet row)
	Targets  int    `json:"targets"`  // with loss, padding excluded
	// Masked counts the targets that a chat dataset's loss mask excludes
	// (prompt tokens), not among Targets.
	Masked int     `json:"masked,omitempty"`
	IDs    []int32 `json:"ids"` // the window: inputs and the last target, no padding
	Text   *string `json:"text,omitempty"`
}

// Inspect reports on the dataset of s: the histograms, from every document
// and sequence, and opt.Samples sample sequences, decoded when
// opt.Tokenizer is set.
func Inspect(s *Store, opt InspectOptions) (*Inspection, error) {
	m := s.Manifest()
	if tok := opt.Tokenizer; tok != nil && tok.Hash() != m.Tokenizer.SHA256 {
		return nil, fmt.Errorf("data: %s: tokenizer sha256 %s is not the dataset's (sha256 %s)", s.Dir(), tok.Hash(), m.Tokenizer.SHA256)
	}
	if opt.Samples < 0 {
		return nil, fmt.Errorf("data: %d samples is negative", opt.Samples)
	}
	in := &Inspection{Dataset: s.Dir(), Manifest: m, Samples: []Sample{}}
	var docLens, seqTargets []int64
	T := int64(s.SeqLen())
	for id := range s.NumDocuments() {
		info, err := s.Doc(id)
		if err != nil {
			return nil, err
		}
		L := int64(info.Tokens)
		docLens = append(docLens, L)
		if m.Settings.Mode == ModeDocument {
			seqTargets = append(seqTargets, min(L, T+1)-1)
		}
	}
	if m.Settings.Mode == ModePack {
		for _, si := range []SplitInfo{m.Splits.Train, m.Splits.Holdout} {
			for i := range si.Sequences {
				n := T
				if i == si.Sequences-1 {
					n = si.Targets + si.Masked - T*(si.Sequences-1)
				}
				seqTargets = append(seqTargets, n)
			}
		}
	}
	in.DocumentLengths = histogram(docLens)
	in.SequenceTargets = histogram(seqTargets)

	split := Train
	if s.NumSequences(split) == 0 {
		split = Holdout
	}
	ids, targets, weights := make([]int32, T), make([]int32, T), make([]float32, T)
	for i := range min(opt.Samples, s.NumSequences(split)) {
		doc, n, err := s.sequence(split, i, ids, targets, weights)
		if err != nil {
			return nil, err
		}
		info, _ := s.Doc(doc)
		kept := 0
		for _, w := range weights {
			if w != 0 {
				kept++
			}
		}
		window := append([]int32(nil), ids[:n]...)
		if n > 0 {
			window = append(window, targets[n-1])
		}
		sm := Sample{Split: split, Sequence: i, Document: doc, Source: info.Source, Line: info.Line, Targets: kept, Masked: n - kept, IDs: window}
		if opt.Tokenizer != nil {
			text, err := opt.Tokenizer.DecodeChecked(window, false)
			if err != nil {
				return nil, fmt.Errorf("data: sequence %d: %w", i, err)
			}
			sm.Text = &text
		}
		in.Samples = append(in.Samples, sm)
	}
	return in, nil
}

// histogram counts values in power-of-two buckets [2^k, 2^(k+1)-1], from
// the smallest value's bucket to the largest's (0, and any negative value,
// has a bucket of its own, [0, 0]).
func histogram(values []int64) []Bucket {
	if len(values) == 0 {
		return []Bucket{}
	}
	bucket := func(v int64) int {
		if v <= 0 {
			return 0
		}
		return bits.Len64(uint64(v))
	}
	lo, hi := bucket(values[0]), bucket(values[0])
	for _, v := range values {
		lo, hi = min(lo, bucket(v)), max(hi, bucket(v))
	}
	out := make([]Bucket, hi-lo+1)
	for i := range out {
		if k := lo + i; k > 0 {
			out[i] = Bucket{Lo: 1 << (k - 1), Hi: 1<<k - 1}
		}
	}
	for _, v := range values {
		out[bucket(v)-lo].Count++
	}
	return out
}

// Where returns where a record of one of m's sources is, as a Problem
// names it: "FILE:LINE", or "FILE: row ROW" for a Parquet source.
func (m *Manifest) Where(source string, line int64) string {
	row := false
	for _, s := range m.Sources {
		if s.Path == source {
			row = s.Format == Parquet
			break
		}
	}
	return Problem{Source: source, Line: line, Row: row}.Where()
}
