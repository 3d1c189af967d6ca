package data

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data/tokenizer"
)

func TestPrepareTiny(t *testing.T) {
	// The tiny tokenizer: "hello world" is [20 25], "hello!\n" [20 4 3];
	// BOS 1, EOS 2.
	dir := t.TempDir()
	in := writeFile(t, dir, "in.jsonl", `{"text": "hello world"}
{"text": 3}
{"text": "hello!\n"}
`)
	tests := []struct {
		mode     Mode
		bos, eos bool
		docs     [][]int32
		seqs     []seq
	}{
		{ModeDocument, true, true, [][]int32{{1, 20, 25, 2}, {1, 20, 4, 3, 2}}, []seq{
			{[]int32{1, 20, 25, 2}, []int32{20, 25, 2, 2}, []float32{1, 1, 1, 0}, 0},
			{[]int32{1, 20, 4, 3}, []int32{20, 4, 3, 2}, []float32{1, 1, 1, 1}, 1},
		}},
		{ModePack, false, true, [][]int32{{20, 25, 2}, {20, 4, 3, 2}}, []seq{
			{[]int32{20, 25, 2, 20}, []int32{25, 2, 20, 4}, []float32{1, 1, 1, 1}, 0},
			{[]int32{4, 3, 2, 2}, []int32{3, 2, 2, 2}, []float32{1, 1, 0, 0}, 1},
		}},
		{ModePack, false, false, [][]int32{{20, 25}, {20, 4, 3}}, []seq{
			{[]int32{20, 25, 20, 4}, []int32{25, 20, 4, 3}, []float32{1, 1, 1, 1}, 0},
		}},
	}
	for _, tt := range tests {
		out := filepath.Join(t.TempDir(), "ds")
		m, err := Prepare(out, []string{in}, tiny(t), PrepareConfig{Mode: tt.mode, SeqLen: 4, BOS: tt.bos, EOS: tt.eos})
		if err != nil {
			t.Fatal(err)
		}
		if m.Problems.Total() != 1 || m.Problems.Examples[0].Line != 2 || m.Sources[0].Documents != 2 || m.Sources[0].Problems != 1 {
			t.Errorf("problems %+v, sources %+v", m.Problems, m.Sources)
		}
		s, err := OpenStore(out)
		if err != nil {
			t.Fatal(err)
		}
		for id, want := range tt.docs {
			if got, _ := s.DocTokens(id); !slices.Equal(got, want) {
				t.Errorf("%s bos=%v eos=%v: document %d = %v, want %v", tt.mode, tt.bos, tt.eos, id, got, want)
			}
		}
		checkSequences(t, sequences(t, s, Train), tt.seqs)
		if info, _ := s.Doc(1); info.Line != 3 || info.Source != in {
			t.Errorf("document 1 from %s:%d", info.Source, info.Line)
		}
		s.Close()
	}
}

// TestParquetJSONLIdentical: the same texts as JSONL and as Parquet (in
// several row groups) make byte-identical token stores.
func TestParquetJSONLIdentical(t *testing.T) {
	texts := austen(t, 300)
	dir := t.TempDir()
	jsonl := writeJSONL(t, dir, "austen.jsonl", texts)
	rows := make([]textRow, len(texts))
	for i := range texts {
		rows[i] = textRow{Text: &texts[i], N: int64(i)}
	}
	pq := writeParquet(t, dir, "austen.parquet", rows, 37)
	cfg := PrepareConfig{Mode: ModePack, SeqLen: 64, BOS: true, EOS: true, Holdout: 0.1, Seed: 3, Threads: 3, ChunkBytes: 10000}
	outs := map[string]string{}
	for name, in := range map[string]string{"jsonl": jsonl, "parquet": pq} {
		outs[name] = filepath.Join(dir, "ds-"+name)
		m, err := Prepare(outs[name], []string{in}, llama2(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if m.Counts.Documents != 300 || m.Problems.Total() != 0 || m.Splits.Holdout.Documents == 0 {
			t.Errorf("%s: counts %+v, problems %v", name, m.Counts, m.Problems.Counts)
		}
	}
	for _, file := range []string{TokensFile, IndexFile} {
		a, _ := os.ReadFile(filepath.Join(outs["jsonl"], file))
		b, _ := os.ReadFile(filepath.Join(outs["parquet"], file))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s differs between JSONL and Parquet (%d and %d bytes)", file, len(a), len(b))
		}
	}
	// The tokens are the tokenizer's, and the result does not depend on
	// the threads.
	s, err := OpenStore(outs["jsonl"])
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []int{0, 150, 299} {
		got, _ := s.DocTokens(id)
		want := append(append([]int32{1}, llama2(t).Encode(texts[id], tokenizer.EncodeOptions{})...), 2)
		if !slices.Equal(got, want) {
			t.Errorf("document %d differs from Encode", id)
		}
	}
	cfg.Threads, cfg.ChunkBytes = 1, 0
	one := filepath.Join(dir, "ds-one")
	if _, err := Prepare(one, []string{jsonl}, llama2(t), cfg); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(outs["jsonl"], TokensFile))
	b, _ := os.ReadFile(filepath.Join(one, TokensFile))
	if !bytes.Equal(a, b) {
		t.Error("tokens.bin depends on the threads")
	}
}

func TestPrepareErrors(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "good.jsonl", "{\"text\": \"hello\"}\n")
	bad := writeFile(t, dir, "bad.jsonl", "{\"text\": \"hello\"}\n{\"text\": \"\\ud800\"}\n")
	allBad := writeFile(t, dir, "all-bad.jsonl", "{oops\n{\"body\": \"hello\"}\n{\"text\": 3}\n")
	bad2 := writeFile(t, dir, "bad2.jsonl", "[1]\n")
	noTokens := writeFile(t, dir, "no-tokens.jsonl", "{\"text\": \"\"}\n")
	empty := writeFile(t, dir, "empty.jsonl", "")
	badDir := filepath.Join(dir, "bad-folder")
	writeFile(t, badDir, "a.jsonl", "{oops\n")
	writeFile(t, badDir, "b.jsonl", "{\"text\": null}\n")
	tests := []struct {
		name   string
		inputs []string
		cfg    PrepareConfig
		want   string
	}{
		{"strict", []string{bad}, PrepareConfig{SeqLen: 4, Read: ReadOptions{Strict: true}}, "bad.jsonl:2: field \"text\" is not valid UTF-8"},
		{"seq len", []string{good}, PrepareConfig{}, "seq_len 0"},
		{"no input", []string{filepath.Join(dir, "none.jsonl")}, PrepareConfig{SeqLen: 4}, "none.jsonl"},
		{"holdout", []string{good}, PrepareConfig{SeqLen: 4, Holdout: -1}, "holdout -1 out of range"},
		{"holdout NaN", []string{good}, PrepareConfig{SeqLen: 4, Holdout: math.NaN()}, "holdout NaN out of range"},
		{"threads", []string{good}, PrepareConfig{SeqLen: 4, Threads: -1}, "data: threads -1: want 0 (all cores) or more"},
		{"every record bad", []string{allBad}, PrepareConfig{SeqLen: 4},
			"data: no document kept from " + allBad + ": bad records 3 (invalid-json 1, missing-field 1, wrong-type 1), the first " + allBad + ":1: invalid JSON"},
		{"every record bad, two inputs", []string{allBad, bad2}, PrepareConfig{SeqLen: 4},
			"data: no document kept from " + allBad + ", " + bad2 + ": bad records 4"},
		{"no tokens", []string{noTokens}, PrepareConfig{SeqLen: 4}, "data: no document kept from " + noTokens + ": bad records 1 (empty 1), the first " + noTokens + ":1: field \"text\" is empty; no dataset written"},
		{"no records", []string{empty}, PrepareConfig{SeqLen: 4}, "data: no document kept from " + empty + ": no records; no dataset written"},
		{"a folder of bad records", []string{badDir}, PrepareConfig{SeqLen: 4}, "data: no document kept from " + badDir + ": bad records 2"},
		{"many inputs", []string{empty, empty, empty, empty, empty}, PrepareConfig{SeqLen: 4},
			"data: no document kept from " + empty + ", " + empty + ", " + empty + ", 2 more: no records"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "ds")
			_, err := Prepare(out, tt.inputs, tiny(t), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("failed prepare left %s: %v", out, err)
			}
			if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 0 {
				t.Errorf("failed prepare left %v", entries)
			}
		})
	}
}

func TestPreparePretokenized(t *testing.T) {
	dir := t.TempDir()
	in := writeFile(t, dir, "ids.jsonl", "{\"input_ids\": [20, 25]}\n{\"input_ids\": [20, 26]}\n")
	out := filepath.Join(dir, "ds")
	m, err := Prepare(out, []string{in}, tiny(t), PrepareConfig{SeqLen: 4, EOS: true, Read: ReadOptions{Pretokenized: true}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Counts.Documents != 1 || m.Problems.Counts[BadToken] != 1 || m.Counts.Tokens != 3 || !m.Settings.Pretokenized || m.Settings.Field != "input_ids" {
		t.Errorf("manifest %+v", m)
	}
}

// TestPrepareReportsEncodeFailures: a document the tokenizer refuses (a
// normalizer past its output bound) is an encode-failed problem naming
// the tokenizer's field, not "encodes to no tokens", and the others are
// kept; in strict mode it stops the preparation.
func TestPrepareReportsEncodeFailures(t *testing.T) {
	rs := `{"type": "Replace", "pattern": {"String": "a"}, "content": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}`
	tj := `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "normalizer": {"type": "Sequence", "normalizers": [` +
		rs + `, ` + rs + `, ` + rs + `]}}`
	tok, err := tokenizer.Parse("bomb.json", []byte(tj), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in := writeFile(t, dir, "in.jsonl", `{"text": "bbb"}`+"\n"+`{"text": "aaaa"}`+"\n"+`{"text": "bb"}`+"\n")
	m, err := Prepare(filepath.Join(dir, "out"), []string{in}, tok, PrepareConfig{SeqLen: 4})
	if err != nil {
		t.Fatal(err)
	}
	if m.Counts.Documents != 2 {
		t.Errorf("%d documents kept, want 2", m.Counts.Documents)
	}
	ex := m.Problems.Examples
	if len(ex) != 1 || ex[0].Kind != EncodeFailed || ex[0].Line != 2 || !strings.Contains(ex[0].Detail, "bomb.json: normalizer.normalizers[") {
		t.Errorf("problems %+v, want one encode-failed on line 2 naming the normalizer", m.Problems)
	}
	_, err = Prepare(filepath.Join(dir, "strict"), []string{in}, tok, PrepareConfig{SeqLen: 4, Read: ReadOptions{Strict: true}})
	var re *RecordError
	if !errors.As(err, &re) || re.Problem.Kind != EncodeFailed {
		t.Errorf("strict: %v, want a RecordError of kind %s", err, EncodeFailed)
	}
}

// A pretokenized record that already starts with BOS gets a second one
// only when BOS is asked for, and then Prepare says so through Warn.
func TestPreparePretokenizedBOS(t *testing.T) {
	tok := tiny(t)
	bos, ok := tok.BOS()
	if !ok {
		t.Fatal("the test tokenizer has no BOS")
	}
	dir := t.TempDir()
	in := writeFile(t, dir, "ids.jsonl", fmt.Sprintf("{\"input_ids\": [%d, 20, 21]}\n{\"input_ids\": [20, 22]}\n", bos))
	for _, c := range []struct {
		bos    bool
		tokens int64
		warn   string
	}{
		{false, 5, ""},
		{true, 7, "1 of 2 pretokenized documents already start with BOS"},
	} {
		var warnings []string
		out := filepath.Join(dir, fmt.Sprintf("ds-%v", c.bos))
		m, err := Prepare(out, []string{in}, tok, PrepareConfig{SeqLen: 8, BOS: c.bos, Read: ReadOptions{Pretokenized: true},
			Warn: func(msg string) { warnings = append(warnings, msg) }})
		if err != nil {
			t.Fatal(err)
		}
		if m.Counts.Tokens != c.tokens {
			t.Errorf("bos %v: %d tokens, want %d", c.bos, m.Counts.Tokens, c.tokens)
		}
		// A dataset is read like every other output: 0755, not
		// os.MkdirTemp's 0700.
		if st, err := os.Stat(out); err != nil {
			t.Error(err)
		} else if st.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v, want a 0755 folder", out, st.Mode())
		}
		switch {
		case c.warn == "" && len(warnings) != 0:
			t.Errorf("bos %v: warnings %q, want none", c.bos, warnings)
		case c.warn != "" && (len(warnings) != 1 || !strings.Contains(warnings[0], c.warn)):
			t.Errorf("bos %v: warnings %q, want one containing %q", c.bos, warnings, c.warn)
		}
	}
}

// A dataset carries the tokenizer it was made with when given its files:
// Store.Tokenizer decodes its tokens, refuses a replaced file, and is nil
// for a dataset made without one.
func TestStoreTokenizer(t *testing.T) {
	tok, files, err := OpenTokenizer("testdata/tiny")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in := writeFile(t, dir, "in.jsonl", "{\"text\": \"ab ba\"}\n")
	with, without := filepath.Join(dir, "with"), filepath.Join(dir, "without")
	if _, err := Prepare(with, []string{in}, tok, PrepareConfig{SeqLen: 8, TokenizerFiles: files}); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(without, []string{in}, tok, PrepareConfig{SeqLen: 8}); err != nil {
		t.Fatal(err)
	}
	open := func(ds string) (*tokenizer.Tokenizer, error) {
		t.Helper()
		s, err := OpenStore(ds)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return s.Tokenizer()
	}
	got, err := open(with)
	if err != nil || got == nil || got.Hash() != tok.Hash() {
		t.Fatalf("Tokenizer of %s: %v, %v; want the preparing tokenizer", with, got, err)
	}
	if got, err := open(without); got != nil || err != nil {
		t.Errorf("Tokenizer of a dataset without one: %v, %v; want nil, nil", got, err)
	}
	// Another tokenizer's file in its place is refused by its checksum.
	other := filepath.Join(with, tokenizer.FileName)
	b, _ := os.ReadFile(other)
	if err := os.WriteFile(other, append(b, ' '), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := open(with); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("a replaced tokenizer.json: %v, want an error naming it", err)
	}
	// Files that are not the tokens' tokenizer are not stored.
	bad := map[string][]byte{tokenizer.FileName: append(files[tokenizer.FileName], '\n')}
	if _, err := Prepare(filepath.Join(dir, "bad"), []string{in}, tok, PrepareConfig{SeqLen: 8, TokenizerFiles: bad}); err == nil {
		t.Error("Prepare stored another tokenizer's file")
	}
}
