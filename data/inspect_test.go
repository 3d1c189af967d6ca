package data

import (
	"encoding/json"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestHistogram(t *testing.T) {
	for _, c := range []struct {
		values []int64
		want   []Bucket
	}{
		{nil, []Bucket{}},
		{[]int64{0}, []Bucket{{0, 0, 1}}},
		{[]int64{-3, 0}, []Bucket{{0, 0, 2}}}, // negatives count as 0
		{[]int64{1}, []Bucket{{1, 1, 1}}},
		{[]int64{5, 7, 4}, []Bucket{{4, 7, 3}}},
		// From the smallest value's bucket to the largest's, empty buckets
		// between them kept.
		{[]int64{3, 16, 31, 2}, []Bucket{{2, 3, 2}, {4, 7, 0}, {8, 15, 0}, {16, 31, 2}}},
		{[]int64{0, 1, 2, 3, 4}, []Bucket{{0, 0, 1}, {1, 1, 1}, {2, 3, 2}, {4, 7, 1}}},
		{[]int64{math.MaxInt64, 1 << 62}, []Bucket{{1 << 62, math.MaxInt64, 2}}},
	} {
		got := histogram(c.values)
		if got == nil || !slices.Equal(got, c.want) {
			t.Errorf("histogram(%v) = %v, want %v", c.values, got, c.want)
		}
		var n int64
		for _, b := range got {
			n += b.Count
		}
		if n != int64(len(c.values)) {
			t.Errorf("histogram(%v) counts %d values", c.values, n)
		}
	}
}

func TestInspectDocumentMode(t *testing.T) {
	// Lengths 5, 3 and 4 with BOS and EOS; at seq_len 4 the first is
	// truncated to 4 targets, the others have 2 and 3.
	s := buildStore(t, Settings{Mode: ModeDocument, SeqLen: 4, BOS: true, EOS: true},
		[]int32{10, 11, 12}, []int32{20}, []int32{30, 31})
	in, err := Inspect(s, InspectOptions{Samples: 2})
	if err != nil {
		t.Fatal(err)
	}
	if in.Dataset != s.Dir() || in.Manifest != s.Manifest() {
		t.Errorf("dataset %q, manifest %p", in.Dataset, in.Manifest)
	}
	if want := []Bucket{{2, 3, 1}, {4, 7, 2}}; !slices.Equal(in.DocumentLengths, want) {
		t.Errorf("document lengths %v, want %v", in.DocumentLengths, want)
	}
	if want := []Bucket{{2, 3, 2}, {4, 7, 1}}; !slices.Equal(in.SequenceTargets, want) {
		t.Errorf("sequence targets %v, want %v", in.SequenceTargets, want)
	}
	want := []Sample{
		{Split: Train, Sequence: 0, Document: 0, Source: "hand", Line: 1, Targets: 4, IDs: []int32{1, 10, 11, 12, 2}},
		{Split: Train, Sequence: 1, Document: 1, Source: "hand", Line: 2, Targets: 2, IDs: []int32{1, 20, 2}},
	}
	if len(in.Samples) != len(want) {
		t.Fatalf("%d samples, want %d", len(in.Samples), len(want))
	}
	for i, sm := range in.Samples {
		w := want[i]
		if sm.Text != nil || !slices.Equal(sm.IDs, w.IDs) || sm.Split != w.Split || sm.Sequence != w.Sequence ||
			sm.Document != w.Document || sm.Source != w.Source || sm.Line != w.Line || sm.Targets != w.Targets {
			t.Errorf("sample %d: %+v, want %+v", i, sm, w)
		}
	}
	// More samples than sequences: all of them.
	if in, _ := Inspect(s, InspectOptions{Samples: 10}); len(in.Samples) != 3 {
		t.Errorf("%d samples of 3 sequences", len(in.Samples))
	}
}

func TestInspectPackMode(t *testing.T) {
	// 7 tokens make 6 targets: sequences of 4 and 2 targets.
	s := buildStore(t, Settings{Mode: ModePack, SeqLen: 4, EOS: true},
		[]int32{10, 11, 12}, []int32{20}, []int32{30})
	in, err := Inspect(s, InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := []Bucket{{2, 3, 2}, {4, 7, 1}}; !slices.Equal(in.DocumentLengths, want) {
		t.Errorf("document lengths %v, want %v", in.DocumentLengths, want)
	}
	if want := []Bucket{{2, 3, 1}, {4, 7, 1}}; !slices.Equal(in.SequenceTargets, want) {
		t.Errorf("sequence targets %v, want %v", in.SequenceTargets, want)
	}
	// No samples asked for: an empty list, not null.
	b, _ := json.Marshal(in)
	if in.Samples == nil || !strings.Contains(string(b), `"samples":[]`) {
		t.Errorf("samples %v in %s", in.Samples, b)
	}
}

func TestInspectHoldoutSamples(t *testing.T) {
	// Everything held out: the samples come from the holdout split.
	s := buildStore(t, Settings{Mode: ModeDocument, SeqLen: 4, EOS: true, Holdout: 1}, []int32{10, 11}, []int32{20})
	in, err := Inspect(s, InspectOptions{Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Samples) != 1 || in.Samples[0].Split != Holdout || !slices.Equal(in.Samples[0].IDs, []int32{10, 11, 2}) {
		t.Errorf("samples %+v", in.Samples)
	}
}

func TestInspectEmpty(t *testing.T) {
	s := buildStore(t, Settings{Mode: ModePack, SeqLen: 4})
	in, err := Inspect(s, InspectOptions{Samples: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.DocumentLengths) != 0 || len(in.SequenceTargets) != 0 || len(in.Samples) != 0 {
		t.Errorf("empty dataset: %+v", in)
	}
	b, _ := json.Marshal(in)
	for _, want := range []string{`"document_lengths":[]`, `"sequence_targets":[]`, `"samples":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON lacks %s: %s", want, b)
		}
	}
}

func TestInspectDecodes(t *testing.T) {
	// The tiny tokenizer: "hello world" is [20 25], BOS 1, EOS 2.
	in := writeFile(t, t.TempDir(), "in.jsonl", `{"text": "hello world"}`+"\n")
	out := filepath.Join(t.TempDir(), "ds")
	if _, err := Prepare(out, []string{in}, tiny(t), PrepareConfig{Mode: ModeDocument, SeqLen: 8, BOS: true, EOS: true}); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(out)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rep, err := Inspect(s, InspectOptions{Samples: 1, Tokenizer: tiny(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Samples) != 1 || rep.Samples[0].Text == nil || !strings.Contains(*rep.Samples[0].Text, "hello world") ||
		rep.Samples[0].Source != in || rep.Samples[0].Line != 1 {
		t.Fatalf("samples %+v", rep.Samples)
	}
	// Another tokenizer is refused, as are negative samples.
	if _, err := Inspect(s, InspectOptions{Tokenizer: llama2(t)}); err == nil || !strings.Contains(err.Error(), "is not the dataset's") {
		t.Errorf("another tokenizer: %v", err)
	}
	if _, err := Inspect(s, InspectOptions{Samples: -1}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("negative samples: %v", err)
	}
}

func TestManifestWhere(t *testing.T) {
	m := &Manifest{Sources: []Source{{Path: "a.jsonl", Format: JSONL}, {Path: "b.parquet", Format: Parquet}}}
	for _, c := range []struct {
		source string
		line   int64
		want   string
	}{
		{"a.jsonl", 3, "a.jsonl:3"},
		{"b.parquet", 3, "b.parquet: row 3"},
		{"c.txt", 1, "c.txt:1"}, // not a source: lines
		{"a.jsonl", 0, "a.jsonl"},
	} {
		if got := m.Where(c.source, c.line); got != c.want {
			t.Errorf("Where(%q, %d) = %q, want %q", c.source, c.line, got, c.want)
		}
	}
}

// TestInspectionWriteText: the text report carries the manifest's
// counts, each histogram as bars scaled to the largest bucket (40
// blocks), and each sample, clipped.
func TestInspectionWriteText(t *testing.T) {
	s := buildStore(t, Settings{Mode: ModeDocument, SeqLen: 4, BOS: true, EOS: true},
		[]int32{10, 11, 12}, []int32{20}, []int32{30, 31})
	in, err := Inspect(s, InspectOptions{Samples: 1})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := in.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	full, half := strings.Repeat("█", 40), strings.Repeat("█", 20)
	for _, want := range []string{
		"settings  document mode, seq_len 4, bos yes, eos yes, pad 2, holdout 0 (seed 0)\n",
		"total               3             12            3              9            3          0\n",
		"bad records: none\n",
		"document lengths (tokens)\n  2–3 " + half + " 1\n  4–7 " + full + " 2\n",
		"targets per sequence\n  2–3 " + full + " 2\n  4–7 " + half + " 1\n",
		"train sequence 0: document 0 (hand:1), 4 targets\n",
		"  ids [1 10 11 12 2]\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	// A short writer's error is the report's.
	if err := in.WriteText(failingWriter{}); err == nil {
		t.Error("WriteText to a failing writer: no error")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestClipText(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"hello", 5, "hello"},
		{"hello", 3, "hel…"},
		{"héllo", 2, "h…"}, // not inside é's two bytes
		{"", 0, ""},
	} {
		if got := clipText(c.s, c.n); got != c.want {
			t.Errorf("clipText(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
