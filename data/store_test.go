package data

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// handTok describes a made-up tokenizer: vocabulary 100, BOS 1, EOS 2.
var handTok = TokenizerInfo{SHA256: "hand", VocabSize: 100, BOS: 1, EOS: 2}

// buildStore writes a store of pre-tokenized documents and opens it.
func buildStore(t *testing.T, set Settings, docs ...[]int32) *Store {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ds")
	w, err := CreateStore(dir, handTok, set)
	if err != nil {
		t.Fatal(err)
	}
	for i, ids := range docs {
		if _, err := w.Add(Document{Source: "hand", Line: int64(i + 1), IDs: ids}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(nil, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// seq is one sequence as Store.Sequence fills it.
type seq struct {
	ids, targets []int32
	weights      []float32
	doc          int
}

func sequences(t *testing.T, s *Store, split Split) []seq {
	t.Helper()
	T := s.SeqLen()
	var out []seq
	for i := range s.NumSequences(split) {
		q := seq{ids: make([]int32, T), targets: make([]int32, T), weights: make([]float32, T)}
		doc, err := s.Sequence(split, i, q.ids, q.targets, q.weights)
		if err != nil {
			t.Fatal(err)
		}
		q.doc = doc
		out = append(out, q)
	}
	return out
}

func TestStoreRoundTrip(t *testing.T) {
	s := buildStore(t, Settings{Mode: ModeDocument, SeqLen: 8, BOS: true, EOS: true},
		[]int32{10, 11, 12}, []int32{20}, []int32{30, 31})
	if s.NumDocuments() != 3 {
		t.Fatalf("%d documents", s.NumDocuments())
	}
	want := [][]int32{{1, 10, 11, 12, 2}, {1, 20, 2}, {1, 30, 31, 2}}
	var off int64
	for id, w := range want {
		got, err := s.DocTokens(id)
		if err != nil || !slices.Equal(got, w) {
			t.Errorf("document %d = %v, %v; want %v", id, got, err, w)
		}
		info, _ := s.Doc(id)
		if info != (DocInfo{ID: id, Source: "hand", Line: int64(id + 1), Split: Train, Offset: off, Tokens: len(w)}) {
			t.Errorf("Doc(%d) = %+v", id, info)
		}
		off += int64(len(w))
	}
	m := s.Manifest()
	if m.Counts.Documents != 3 || m.Counts.Tokens != 12 || m.Counts.Sequences != 3 || m.Settings.PadID != 2 {
		t.Errorf("manifest counts %+v, pad %d", m.Counts, m.Settings.PadID)
	}
	if got := m.Splits.Train.DocIDs; len(got) != 1 || got[0] != [2]int64{0, 3} {
		t.Errorf("train doc ids %v", got)
	}
	if _, err := s.Doc(3); err == nil {
		t.Error("Doc(3) of 3: no error")
	}
	if _, err := s.Sequence(Train, 3, make([]int32, 8), make([]int32, 8), make([]float32, 8)); err == nil {
		t.Error("sequence 3 of 3: no error")
	}
	if _, err := s.Sequence(Train, 0, make([]int32, 7), make([]int32, 8), make([]float32, 8)); err == nil {
		t.Error("short buffer: no error")
	}
}

func TestPackMode(t *testing.T) {
	// Documents with EOS: [10 11 12 2] [20 21 2] [30 2]: a stream of 9
	// tokens. Windows of T+1 = 4 start every 3 tokens: 0, 3, 6; the last
	// one has 3 tokens, so 2 targets and one padded position.
	s := buildStore(t, Settings{Mode: ModePack, SeqLen: 3, EOS: true},
		[]int32{10, 11, 12}, []int32{20, 21}, []int32{30})
	want := []seq{
		{[]int32{10, 11, 12}, []int32{11, 12, 2}, []float32{1, 1, 1}, 0},
		{[]int32{2, 20, 21}, []int32{20, 21, 2}, []float32{1, 1, 1}, 0},
		{[]int32{2, 30, 2}, []int32{30, 2, 2}, []float32{1, 1, 0}, 1},
	}
	checkSequences(t, sequences(t, s, Train), want)
	c := s.Manifest().Counts
	if c.Sequences != 3 || c.Targets != 8 || c.Padding != 1 || c.Tokens != 9 {
		t.Errorf("counts %+v", c)
	}
	// Every token but the first is a target exactly once.
	var targets []int32
	for _, q := range sequences(t, s, Train) {
		for i, w := range q.weights {
			if w == 1 {
				targets = append(targets, q.targets[i])
			}
		}
	}
	if want := []int32{11, 12, 2, 20, 21, 2, 30, 2}; !slices.Equal(targets, want) {
		t.Errorf("targets %v, want %v", targets, want)
	}
}

func TestDocumentMode(t *testing.T) {
	// T = 3: a document keeps its first 4 tokens.
	s := buildStore(t, Settings{Mode: ModeDocument, SeqLen: 3, BOS: true},
		[]int32{10, 11, 12, 13, 14}, []int32{20}, []int32{30, 31, 32})
	want := []seq{
		{[]int32{1, 10, 11}, []int32{10, 11, 12}, []float32{1, 1, 1}, 0},
		{[]int32{1, 20, 2}, []int32{20, 2, 2}, []float32{1, 0, 0}, 1},
		{[]int32{1, 30, 31}, []int32{30, 31, 32}, []float32{1, 1, 1}, 2},
	}
	checkSequences(t, sequences(t, s, Train), want)
	c := s.Manifest().Counts
	if c.Sequences != 3 || c.TruncatedDocuments != 1 || c.TruncatedTokens != 2 || c.Padding != 2 || c.Targets != 7 {
		t.Errorf("counts %+v", c)
	}
}

func checkSequences(t *testing.T, got, want []seq) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d sequences, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if !slices.Equal(g.ids, w.ids) || !slices.Equal(g.targets, w.targets) || !slices.Equal(g.weights, w.weights) || g.doc != w.doc {
			t.Errorf("sequence %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestHoldoutStableAndDisjoint(t *testing.T) {
	texts := austen(t, 400)
	split := func(texts []string, seed uint64, frac float64) map[string]Split {
		dir := filepath.Join(t.TempDir(), "ds")
		w, err := CreateStore(dir, handTok, Settings{Mode: ModeDocument, SeqLen: 4, Holdout: frac, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		for i, text := range texts {
			if _, err := w.Add(Document{Source: "a", Line: int64(i + 1), Text: text, IDs: []int32{3}}); err != nil {
				t.Fatal(err)
			}
		}
		m, err := w.Commit(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		s, err := OpenStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		out := map[string]Split{}
		for id := range s.NumDocuments() {
			info, _ := s.Doc(id)
			out[texts[id]] = info.Split
		}
		// The manifest's ranges partition the ids.
		seen := make([]int, len(texts))
		for _, si := range []SplitInfo{m.Splits.Train, m.Splits.Holdout} {
			for _, r := range si.DocIDs {
				for id := r[0]; id < r[1]; id++ {
					seen[id]++
				}
			}
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("document %d in %d splits", id, n)
			}
		}
		return out
	}
	a := split(texts, 7, 0.2)
	held := 0
	for _, s := range a {
		if s == Holdout {
			held++
		}
	}
	if held < 50 || held > 110 { // 80 expected
		t.Errorf("%d of %d held out at 0.2", held, len(texts))
	}
	// Stable: reversed and subset inputs put each text in the same split.
	rev := slices.Clone(texts[:250])
	slices.Reverse(rev)
	for text, s := range split(rev, 7, 0.2) {
		if a[text] != s {
			t.Fatalf("split of a text changed with the input order")
		}
	}
	// Another seed moves some.
	moved := 0
	for text, s := range split(texts, 8, 0.2) {
		if a[text] != s {
			moved++
		}
	}
	if moved == 0 {
		t.Error("the seed changes nothing")
	}
	for text, s := range split(texts[:20], 1, 1) {
		if s != Holdout {
			t.Errorf("holdout 1: %q in %s", text[:20], s)
		}
	}
}

func TestStoreCorruption(t *testing.T) {
	tests := []struct {
		name   string
		file   string
		damage func(b []byte) []byte
		want   string
	}{
		{"tokens truncated", TokensFile, func(b []byte) []byte { return b[:len(b)-4] }, "tokens.bin: truncated or corrupt: the header says 12 tokens (112 bytes), the file has 108 bytes"},
		{"tokens short", TokensFile, func(b []byte) []byte { return b[:10] }, "tokens.bin: truncated: 10 bytes"},
		{"tokens flipped", TokensFile, func(b []byte) []byte { b[70] ^= 1; return b }, "tokens.bin: checksum mismatch"},
		{"tokens magic", TokensFile, func(b []byte) []byte { b[0] = 'X'; return b }, "tokens.bin: not a memtrain token file"},
		{"tokens version", TokensFile, func(b []byte) []byte { b[8] = 9; return b }, "tokens.bin: version 9 is not supported"},
		{"index truncated", IndexFile, func(b []byte) []byte { return b[:len(b)-1] }, "index.bin: truncated or corrupt: the header says 3 documents (160 bytes), the file has 159 bytes"},
		{"index flipped", IndexFile, func(b []byte) []byte { b[100] ^= 1; return b }, "index.bin: checksum mismatch"},
		{"index magic", IndexFile, func(b []byte) []byte { b[1] = 'X'; return b }, "index.bin: not a memtrain index"},
		{"manifest json", ManifestFile, func(b []byte) []byte { return b[:20] }, "manifest.json: invalid JSON"},
		{"manifest version", ManifestFile, func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"version": 1`), []byte(`"version": 3`), 1)
		}, "manifest.json: version 3 is not supported"},
		{"manifest version without mask", ManifestFile, func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"version": 1`), []byte(`"version": 2`), 1)
		}, "manifest.json: version 2 (a loss mask) but settings.chat is missing"},
		{"manifest counts", ManifestFile, func(b []byte) []byte {
			var m map[string]any
			json.Unmarshal(b, &m)
			m["counts"].(map[string]any)["sequences"] = 99
			b, _ = json.Marshal(m)
			return b
		}, "manifest.json: counts"},
		{"manifest checksum", ManifestFile, func(b []byte) []byte {
			var m Manifest
			json.Unmarshal(b, &m)
			fi := m.Files[TokensFile]
			fi.SHA256 = strings.Repeat("0", 64)
			m.Files[TokensFile] = fi
			b, _ = json.Marshal(m)
			return b
		}, "tokens.bin: checksum mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := buildStore(t, Settings{Mode: ModeDocument, SeqLen: 8, BOS: true, EOS: true},
				[]int32{10, 11, 12}, []int32{20}, []int32{30, 31})
			dir := s.Dir()
			s.Close()
			path := filepath.Join(dir, tt.file)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tt.damage(b), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = OpenStore(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), dir) {
				t.Errorf("error %v does not name the folder", err)
			}
		})
	}
	if _, err := OpenStore(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "none: no such folder (a dataset is the folder data prepare makes") {
		t.Errorf("missing store: %v", err)
	}
	// A JSONL file given as a dataset (issue 33, item 4) is told what a
	// dataset is, not that file/manifest.json is "not a directory".
	file := filepath.Join(t.TempDir(), "austen.jsonl")
	os.WriteFile(file, []byte(`{"text": "x"}`+"\n"), 0o644)
	if _, err := OpenStore(file); err == nil || !strings.Contains(err.Error(), "austen.jsonl is a file, not a dataset folder: prepare a dataset from it with data prepare") {
		t.Errorf("a file as a store: %v", err)
	}
	// An empty folder still names the manifest it lacks.
	if _, err := OpenStore(t.TempDir()); err == nil || !strings.Contains(err.Error(), "manifest.json") {
		t.Errorf("an empty folder as a store: %v", err)
	}
}

func TestCreateStoreErrors(t *testing.T) {
	noSpecial := TokenizerInfo{VocabSize: 10, BOS: -1, EOS: -1}
	full := t.TempDir()
	writeFile(t, full, "x", "x")
	tests := []struct {
		name string
		dir  string
		tok  TokenizerInfo
		set  Settings
		want string
	}{
		{"mode", "", handTok, Settings{Mode: "mixed", SeqLen: 4}, `unknown mode "mixed"`},
		{"seq len", "", handTok, Settings{Mode: ModePack}, "seq_len 0 out of range"},
		{"holdout", "", handTok, Settings{Mode: ModePack, SeqLen: 4, Holdout: 1.5}, "holdout 1.5 out of range"},
		{"bos", "", noSpecial, Settings{Mode: ModePack, SeqLen: 4, BOS: true}, "no BOS token"},
		{"eos", "", noSpecial, Settings{Mode: ModePack, SeqLen: 4, EOS: true}, "no EOS token"},
		{"vocab", "", TokenizerInfo{}, Settings{Mode: ModePack, SeqLen: 4}, "vocabulary size 0"},
		{"not empty", full, handTok, Settings{Mode: ModePack, SeqLen: 4}, "already exists and is not empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir
			if dir == "" {
				dir = filepath.Join(t.TempDir(), "ds")
			}
			_, err := CreateStore(dir, tt.tok, tt.set)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}

	// Add rejects ids outside the vocabulary and empty documents, naming
	// the record; Abort leaves nothing behind.
	parent := t.TempDir()
	dir := filepath.Join(parent, "ds")
	w, err := CreateStore(dir, handTok, Settings{Mode: ModePack, SeqLen: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Add(Document{Source: "f.jsonl", Line: 3, IDs: []int32{5, 100}}); err == nil || !strings.Contains(err.Error(), "f.jsonl:3: token 1 (id 100) outside the vocabulary") {
		t.Errorf("out of vocabulary: %v", err)
	}
	if _, err := w.Add(Document{Source: "f.jsonl", Line: 4}); err == nil || !strings.Contains(err.Error(), "f.jsonl:4: empty document") {
		t.Errorf("empty: %v", err)
	}
	w.Abort()
	if entries, _ := os.ReadDir(parent); len(entries) != 0 {
		t.Errorf("abort left %v", entries)
	}
}

func TestCommitIntoEmptyFolder(t *testing.T) {
	dir := t.TempDir() // exists, empty
	w, err := CreateStore(dir, handTok, Settings{Mode: ModePack, SeqLen: 2})
	if err != nil {
		t.Fatal(err)
	}
	w.Add(Document{Source: "s", Line: 1, IDs: []int32{5, 6, 7}})
	if _, err := w.Commit([]Source{{Path: "s", Format: JSONL, Bytes: 10}}, nil); err != nil {
		t.Fatal(err)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if src := s.Manifest().Sources; len(src) != 1 || src[0].Bytes != 10 {
		t.Errorf("sources %+v", src)
	}
	if _, err := w.Add(Document{IDs: []int32{1}}); err == nil {
		t.Error("Add after Commit: no error")
	}
}

// TestForcedSplit: a document's Split overrides the hash-based choice, in
// both directions.
func TestForcedSplit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ds")
	w, err := CreateStore(dir, handTok, Settings{Mode: ModeDocument, SeqLen: 4, Holdout: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []Split{Train, Holdout, "", Train}
	for i, sp := range want {
		if _, err := w.Add(Document{Source: "a", Line: int64(i + 1), IDs: []int32{3, 4}, Split: sp}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := w.Commit(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Splits.Train.Documents != 2 || m.Splits.Holdout.Documents != 2 {
		t.Errorf("train %d, holdout %d documents, want 2 and 2", m.Splits.Train.Documents, m.Splits.Holdout.Documents)
	}
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want[2] = Holdout // Holdout: 1 holds out every unforced document
	for id, sp := range want {
		if info, _ := s.Doc(id); info.Split != sp {
			t.Errorf("document %d in %s, want %s", id, info.Split, sp)
		}
	}
}
