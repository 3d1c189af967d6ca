package data

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A ProblemKind names what was wrong with an input record.
type ProblemKind string

// The kinds of problem that the readers report.
const (
	InvalidJSON  ProblemKind = "invalid-json"  // a JSONL line that is not one JSON object
	MissingField ProblemKind = "missing-field" // the record has no such field
	WrongType    ProblemKind = "wrong-type"    // the field is not a string (or not a list of integers)
	NullValue    ProblemKind = "null"          // the field, or an element of its list, is null
	InvalidUTF8  ProblemKind = "invalid-utf8"  // the text is not valid UTF-8
	EmptyText    ProblemKind = "empty"         // the text is empty or white space, or the list is empty
	BadToken     ProblemKind = "bad-token"     // a pre-tokenized id outside the vocabulary
	LineTooLong  ProblemKind = "too-long"      // a line longer than ReadOptions.MaxLineBytes
	EncodeFailed ProblemKind = "encode-failed" // the tokenizer refused the text (a regular expression over its time budget, a normalizer past its output bound)
	SkippedFile  ProblemKind = "skipped-file"  // a file in a folder whose extension names no format, or not a regular file
)

// A Problem is one input record that did not become a document.
type Problem struct {
	Source string `json:"source"`
	// Line is the record's 1-based line (JSONL and text), or its 1-based
	// row when Row is set (Parquet); 0 for a whole file.
	Line   int64       `json:"line,omitempty"`
	Row    bool        `json:"row,omitempty"`
	Kind   ProblemKind `json:"kind"`
	Detail string      `json:"detail"`
}

// Where returns the problem's place: "FILE:LINE", "FILE: row ROW" or "FILE".
func (p Problem) Where() string {
	switch {
	case p.Line <= 0:
		return p.Source
	case p.Row:
		return fmt.Sprintf("%s: row %d", p.Source, p.Line)
	default:
		return fmt.Sprintf("%s:%d", p.Source, p.Line)
	}
}

// String returns the problem as "WHERE: DETAIL".
func (p Problem) String() string { return p.Where() + ": " + p.Detail }

// A RecordError is the error that a strict reader returns for the first
// problem it meets.
type RecordError struct{ Problem Problem }

func (e *RecordError) Error() string { return "data: " + e.Problem.String() }

// DefaultMaxExamples is how many examples a Problems keeps when its
// MaxExamples is 0.
const DefaultMaxExamples = 10

// Problems counts the records that did not become documents, by kind, and
// keeps the first few as examples. The zero value is ready to use. A
// Problems is not safe for concurrent use.
type Problems struct {
	// Counts holds the number of problems of each kind.
	Counts map[ProblemKind]int64 `json:"counts"`
	// Examples holds the first problems, in input order.
	Examples []Problem `json:"examples"`
	// MaxExamples bounds Examples (0 means DefaultMaxExamples).
	MaxExamples int `json:"-"`
}

// Add records a problem.
func (ps *Problems) Add(p Problem) {
	if ps.Counts == nil {
		ps.Counts = make(map[ProblemKind]int64)
	}
	ps.Counts[p.Kind]++
	limit := ps.MaxExamples
	if limit == 0 {
		limit = DefaultMaxExamples
	}
	if len(ps.Examples) < limit {
		ps.Examples = append(ps.Examples, p)
	}
}

// Total returns the number of problems of all kinds.
func (ps *Problems) Total() int64 {
	var n int64
	for _, c := range ps.Counts {
		n += c
	}
	return n
}

// Kinds returns the kinds seen, sorted.
func (ps *Problems) Kinds() []ProblemKind {
	return slices.Sorted(maps.Keys(ps.Counts))
}

// String summarizes the counts: "3 (invalid-json 2, missing-field 1)", or
// "none".
func (ps *Problems) String() string {
	total := ps.Total()
	if total == 0 {
		return "none"
	}
	parts := make([]string, 0, len(ps.Counts))
	for _, k := range ps.Kinds() {
		parts = append(parts, fmt.Sprintf("%s %d", k, ps.Counts[k]))
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}
