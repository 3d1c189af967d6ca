package data

import (
	"bufio"
	"fmt"
	"io"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/units"
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

// WriteText writes the report as `memtrain data inspect` prints it: the
// manifest's tokenizer, settings, sources, counts per split and bad
// records, the histograms, and the samples (text or ids, clipped to about
// 400 bytes).
func (r *Inspection) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w) // keeps the first write error for Flush
	m := r.Manifest
	set, tk := m.Settings, m.Tokenizer
	yes := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintf(bw, "dataset   %s (%s v%d, %s tokens)\n", r.Dataset, m.Format, m.Version, m.DType)
	fmt.Fprintf(bw, "tokenizer sha256 %s, vocab %d, bos %d, eos %d\n", tk.SHA256, tk.VocabSize, tk.BOS, tk.EOS)
	fmt.Fprintf(bw, "settings  %s mode, seq_len %d, bos %s, eos %s, pad %d, holdout %g (seed %d)\n",
		set.Mode, set.SeqLen, yes[set.BOS], yes[set.EOS], set.PadID, set.Holdout, set.Seed)
	var bytes int64
	for _, s := range m.Sources {
		bytes += s.Bytes
	}
	m.writeChat(bw)
	fmt.Fprintf(bw, "sources   %d, %s\n", len(m.Sources), units.FormatBytes(bytes))
	for _, s := range m.Sources {
		fmt.Fprintf(bw, "  %s (%s, %s, sha256 %.12s…): %s documents, %s bad\n",
			s.Path, s.Format, units.FormatBytes(s.Bytes), s.SHA256, units.Commas(s.Documents), units.Commas(s.Problems))
	}
	fmt.Fprintf(bw, "\n%-8s %12s %14s %12s %14s %12s %10s\n", "split", "documents", "tokens", "sequences", "targets", "padding", "truncated")
	for _, row := range []struct {
		name string
		c    Counts
	}{{"train", m.Splits.Train.Counts}, {"holdout", m.Splits.Holdout.Counts}, {"total", m.Counts}} {
		fmt.Fprintf(bw, "%-8s %12s %14s %12s %14s %12s %10s\n", row.name, units.Commas(row.c.Documents), units.Commas(row.c.Tokens),
			units.Commas(row.c.Sequences), units.Commas(row.c.Targets), units.Commas(row.c.Padding), units.Commas(row.c.TruncatedDocuments))
	}
	fmt.Fprintln(bw)
	m.Problems.writeText(bw)
	if len(r.DocumentLengths) > 0 {
		fmt.Fprintln(bw)
		writeHistogram(bw, "document lengths (tokens)", r.DocumentLengths)
	}
	if len(r.SequenceTargets) > 0 {
		fmt.Fprintln(bw)
		writeHistogram(bw, "targets per sequence", r.SequenceTargets)
	}
	for _, s := range r.Samples {
		masked := ""
		if m.Settings.Chat != nil {
			masked = fmt.Sprintf(" (%d prompt targets masked)", s.Masked)
		}
		fmt.Fprintf(bw, "\n%s sequence %d: document %d (%s), %d targets%s\n", s.Split, s.Sequence, s.Document,
			m.Where(s.Source, s.Line), s.Targets, masked)
		if s.Text != nil {
			fmt.Fprintf(bw, "  %s\n", clipText(strconv.Quote(*s.Text), 400))
		} else {
			fmt.Fprintf(bw, "  ids %s\n", clipText(fmt.Sprint(s.IDs), 400))
		}
	}
	return bw.Flush()
}

// WriteSummary writes what a dataset holds, as `memtrain data prepare`
// ends by printing it: its documents, sequences and tokens per split, a
// chat dataset's template and loss mask, and its bad records.
func (m *Manifest) WriteSummary(w io.Writer) error {
	bw := bufio.NewWriter(w)
	c, tr, ho := m.Counts, m.Splits.Train, m.Splits.Holdout
	set := m.Settings
	fmt.Fprintf(bw, "documents %s (train %s, holdout %s), tokens %s\n",
		units.Commas(c.Documents), units.Commas(tr.Documents), units.Commas(ho.Documents), units.Commas(c.Tokens))
	fmt.Fprintf(bw, "sequences %s (train %s, holdout %s) of %d, %s mode; targets %s, padding %s",
		units.Commas(c.Sequences), units.Commas(tr.Sequences), units.Commas(ho.Sequences), set.SeqLen, set.Mode,
		units.Commas(c.Targets), units.Commas(c.Padding))
	if set.Mode == ModeDocument {
		fmt.Fprintf(bw, "; truncated %s documents (%s tokens)", units.Commas(c.TruncatedDocuments), units.Commas(c.TruncatedTokens))
	}
	fmt.Fprintln(bw)
	m.writeChat(bw)
	m.Problems.writeText(bw)
	return bw.Flush()
}

// writeChat says, for a chat dataset, where its template came from and
// how many targets its loss mask leaves out.
func (m *Manifest) writeChat(w io.Writer) {
	ch := m.Settings.Chat
	if ch == nil {
		return
	}
	date := ""
	if ch.Date != "" {
		date = ", date " + ch.Date
	}
	c := m.Counts
	all := c.Targets + c.Masked
	pct := 0.0
	if all > 0 {
		pct = 100 * float64(c.Masked) / float64(all)
	}
	fmt.Fprintf(w, "chat      template %s (sha256 %.12s…%s); loss on assistant tokens only: %s of %s targets masked (%.1f%%), %s trained\n",
		ch.Template, ch.TemplateSHA256, date, units.Commas(c.Masked), units.Commas(all), pct, units.Commas(c.Targets))
}

// writeText writes the counts of bad records and their examples.
func (ps *Problems) writeText(w io.Writer) {
	fmt.Fprintf(w, "bad records: %s\n", ps.String())
	for _, p := range ps.Examples {
		fmt.Fprintf(w, "  %s\n", p)
	}
	if n := ps.Total() - int64(len(ps.Examples)); n > 0 {
		fmt.Fprintf(w, "  … and %d more\n", n)
	}
}

// writeHistogram writes a histogram's buckets as bars of up to 40
// blocks, the largest count the longest.
func writeHistogram(w io.Writer, title string, h []Bucket) {
	fmt.Fprintln(w, title)
	var most int64
	for _, b := range h {
		most = max(most, b.Count)
	}
	width := len(strconv.FormatInt(h[len(h)-1].Hi, 10))
	for _, b := range h {
		bar := 0
		if most > 0 {
			bar = int((b.Count*40 + most - 1) / most)
		}
		fmt.Fprintf(w, "  %*d–%-*d %s %s\n", width, b.Lo, width, b.Hi, strings.Repeat("█", bar), units.Commas(b.Count))
	}
}

// clipText shortens s to about n bytes, on a rune boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
