package data

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestJSONLProblems(t *testing.T) {
	long := `{"text": "` + strings.Repeat("x", 100) + `"}`
	lines := []struct {
		line string
		kind ProblemKind // "" for a document
	}{
		{`{"text": "first document"}`, ""},
		{`not json`, InvalidJSON},
		{`[1, 2]`, InvalidJSON},
		{`{"text": "unterminated}`, InvalidJSON},
		{`{"text": "x"} {}`, InvalidJSON},
		{`{"other": "x"}`, MissingField},
		{`{"text": 5}`, WrongType},
		{`{"text": ["a"]}`, WrongType},
		{`{"text": null}`, NullValue},
		{"{\"text\": \"bad \xff byte\"}", InvalidUTF8},
		{`{"text": "lone \ud800 surrogate"}`, InvalidUTF8},
		{`{"text": "lone \udc00 low"}`, InvalidUTF8},
		{`{"text": ""}`, EmptyText},
		{`{"text": " \n\t "}`, EmptyText},
		{``, ""}, // blank lines are no records
		{long, LineTooLong},
		{"  {\"text\": \"caf\\u00e9 \\ud83d\\ude00\", \"n\": 1}\r", ""},
		{`{"text": "last"}`, ""},
	}
	var content strings.Builder
	var wantDocs []int64
	var want []problemAt
	for i, l := range lines {
		fmt.Fprintln(&content, l.line)
		switch {
		case l.kind != "":
			want = append(want, problemAt{int64(i + 1), l.kind})
		case l.line != "":
			wantDocs = append(wantDocs, int64(i+1))
		}
	}
	path := writeFile(t, t.TempDir(), "in.jsonl", content.String())
	r, err := NewReader([]string{path}, ReadOptions{MaxLineBytes: 64, MaxExamples: 100})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var gotDocs []int64
	for _, d := range docs {
		gotDocs = append(gotDocs, d.Line)
		if d.Source != path {
			t.Errorf("document source %q, want %q", d.Source, path)
		}
	}
	if !slices.Equal(gotDocs, wantDocs) {
		t.Errorf("documents at lines %v, want %v", gotDocs, wantDocs)
	}
	if docs[1].Text != "café 😀" {
		t.Errorf("escaped text = %q", docs[1].Text)
	}
	ps := r.Problems()
	var got []problemAt
	for _, p := range ps.Examples {
		got = append(got, problemAt{p.Line, p.Kind})
		if !strings.HasPrefix(p.String(), fmt.Sprintf("%s:%d: ", path, p.Line)) {
			t.Errorf("problem %q does not start with file:line", p)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("problems\n%v, want\n%v", got, want)
	}
	if ps.Total() != int64(len(want)) || ps.Counts[InvalidJSON] != 4 || ps.Counts[InvalidUTF8] != 3 {
		t.Errorf("counts %v", ps.Counts)
	}
	src := r.Sources()[0]
	if src.Documents != int64(len(wantDocs)) || src.Problems != int64(len(want)) || len(src.SHA256) != 64 {
		t.Errorf("source %+v", src)
	}
}

func TestProblemsKeepsFirstExamples(t *testing.T) {
	var ps Problems
	ps.MaxExamples = 2
	for i := range 5 {
		ps.Add(Problem{Source: "f", Line: int64(i + 1), Kind: MissingField, Detail: "no field"})
	}
	ps.Add(Problem{Source: "f", Line: 9, Row: true, Kind: NullValue, Detail: "null"})
	if ps.Total() != 6 || len(ps.Examples) != 2 || ps.Examples[1].Line != 2 {
		t.Errorf("problems %+v", ps)
	}
	if got := ps.String(); got != "6 (missing-field 5, null 1)" {
		t.Errorf("String() = %q", got)
	}
	p := Problem{Source: "f.parquet", Line: 9, Row: true, Detail: "null"}
	if got := p.String(); got != "f.parquet: row 9: null" {
		t.Errorf("row problem = %q", got)
	}
}

func TestStrict(t *testing.T) {
	dir := t.TempDir()
	path := writeFile(t, dir, "in.jsonl", "{\"text\": \"ok\"}\n\n{\"txt\": \"x\"}\n{\"text\": \"never read\"}\n")
	r, err := NewReader([]string{path}, ReadOptions{Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readAll(r)
	var re *RecordError
	if !errors.As(err, &re) || re.Problem.Line != 3 || re.Problem.Kind != MissingField || len(docs) != 1 {
		t.Fatalf("docs %d, err %v", len(docs), err)
	}
	if want := path + `:3: no field "text"`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not name %q", err, want)
	}
	if _, again := r.Next(); again != err {
		t.Errorf("error not sticky: %v", again)
	}
}

func TestPretokenizedJSONL(t *testing.T) {
	tests := []struct {
		line string
		ids  []int32
		kind ProblemKind
	}{
		{`{"input_ids": [1, 2, 3]}`, []int32{1, 2, 3}, ""},
		{`{"input_ids": [ 0 ,99 ]}`, []int32{0, 99}, ""},
		{`{"input_ids": []}`, nil, EmptyText},
		{`{"input_ids": [1, 2.5]}`, nil, WrongType},
		{`{"input_ids": [1, "2"]}`, nil, WrongType},
		{`{"input_ids": [1, null]}`, nil, NullValue},
		{`{"input_ids": [1, [2]]}`, nil, WrongType},
		{`{"input_ids": "1 2"}`, nil, WrongType},
		{`{"input_ids": [-1]}`, nil, BadToken},
		{`{"input_ids": [100]}`, nil, BadToken},
		{`{"input_ids": [99999999999999999999]}`, nil, BadToken},
		{`{"ids": [1]}`, nil, MissingField},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "in.jsonl", tt.line+"\n")
			r, err := NewReader([]string{path}, ReadOptions{Pretokenized: true, VocabSize: 100})
			if err != nil {
				t.Fatal(err)
			}
			docs, err := readAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if tt.kind != "" {
				if len(docs) != 0 || r.Problems().Counts[tt.kind] != 1 {
					t.Errorf("docs %v, problems %v; want one %s", docs, r.Problems().Examples, tt.kind)
				}
				return
			}
			if len(docs) != 1 || !slices.Equal(docs[0].IDs, tt.ids) || docs[0].Text != "" {
				t.Errorf("docs %+v, want ids %v (problems %v)", docs, tt.ids, r.Problems().Examples)
			}
		})
	}
}

func TestTextReader(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "corpus")
	writeFile(t, corpus, "b.txt", "Second file.\n")
	writeFile(t, corpus, "a.md", "# Title\n\nFirst para\nline two\r\n\n\n  \nSecond para\n")
	writeFile(t, corpus, "sub/c.txt", "bad \xff\nmore\n\nafter bad\n")
	writeFile(t, corpus, "sub/empty.txt", " \n\n")
	writeFile(t, corpus, ".hidden.txt", "hidden")
	writeFile(t, corpus, ".git/x.txt", "hidden")
	writeFile(t, corpus, "notes.csv", "a,b")

	type doc struct {
		src  string
		line int64
		text string
	}
	tests := []struct {
		name       string
		paragraphs bool
		docs       []doc
		problems   []string
	}{
		{"files", false, []doc{
			{"a.md", 1, "# Title\n\nFirst para\nline two\r\n\n\n  \nSecond para\n"},
			{"b.txt", 1, "Second file.\n"},
		}, []string{"notes.csv: skipped", "sub/c.txt:1: invalid UTF-8 at byte 4 of the file", "sub/empty.txt: empty file"}},
		{"paragraphs", true, []doc{
			{"a.md", 1, "# Title"},
			{"a.md", 3, "First para\nline two"},
			{"a.md", 8, "Second para"},
			{"b.txt", 1, "Second file."},
			{"sub/c.txt", 4, "after bad"},
		}, []string{"notes.csv: skipped", "sub/c.txt:1: invalid UTF-8 at byte 4 of the line", "sub/empty.txt: no paragraph"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader([]string{corpus}, ReadOptions{Paragraphs: tt.paragraphs})
			if err != nil {
				t.Fatal(err)
			}
			docs, err := readAll(r)
			if err != nil {
				t.Fatal(err)
			}
			var got []doc
			for _, d := range docs {
				rel, _ := filepath.Rel(corpus, d.Source)
				got = append(got, doc{filepath.ToSlash(rel), d.Line, d.Text})
			}
			if !slices.Equal(got, tt.docs) {
				t.Errorf("documents\n%+v\nwant\n%+v", got, tt.docs)
			}
			var probs []string
			for _, p := range r.Problems().Examples {
				probs = append(probs, strings.TrimPrefix(filepath.ToSlash(p.String()), filepath.ToSlash(corpus)+"/"))
			}
			if len(probs) != len(tt.problems) {
				t.Fatalf("problems %q, want %q", probs, tt.problems)
			}
			for i := range probs {
				if !strings.HasPrefix(probs[i], tt.problems[i]) {
					t.Errorf("problem %q, want %q…", probs[i], tt.problems[i])
				}
			}
		})
	}

	// An explicit format reads every file of the folder in it.
	r, err := NewReader([]string{corpus}, ReadOptions{Format: Text})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.Sources() {
		names = append(names, filepath.Base(s.Path))
	}
	if want := []string{"a.md", "b.txt", "notes.csv", "c.txt", "empty.txt"}; !slices.Equal(names, want) {
		t.Errorf("sources %v, want %v", names, want)
	}
}

func TestReaderErrors(t *testing.T) {
	dir := t.TempDir()
	jsonl := writeFile(t, dir, "a.jsonl", "{\"text\": \"x\"}\n")
	odd := writeFile(t, dir, "a.data", "x")
	txt := writeFile(t, dir, "a.txt", "x")
	emptyDir := filepath.Join(dir, "empty")
	writeFile(t, emptyDir, "skip.csv", "")
	tests := []struct {
		name  string
		paths []string
		opt   ReadOptions
		want  string
	}{
		{"none", nil, ReadOptions{}, "no input files"},
		{"missing", []string{filepath.Join(dir, "nope.jsonl")}, ReadOptions{}, "nope.jsonl: no such file"},
		{"extension", []string{odd}, ReadOptions{}, "a.data: cannot tell the format"},
		{"format", []string{jsonl}, ReadOptions{Format: "csv"}, `unknown format "csv"`},
		{"empty folder", []string{emptyDir}, ReadOptions{}, "holds no input files"},
		{"strict skipped file", []string{emptyDir}, ReadOptions{Strict: true}, "skip.csv: skipped"},
		{"text ids", []string{txt}, ReadOptions{Pretokenized: true}, "a.txt: a text file holds no token ids"},
		{"text format ids", []string{jsonl}, ReadOptions{Format: Text, Pretokenized: true}, "text files hold no token ids"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewReader(tt.paths, tt.opt)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestReaderProgress(t *testing.T) {
	dir := t.TempDir()
	a := writeJSONL(t, dir, "a.jsonl", austen(t, 50))
	b := writeFile(t, dir, "b.txt", "some text")
	var total int64
	r, err := NewReader([]string{a, b}, ReadOptions{Progress: func(n int64) { total += n }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readAll(r); err != nil {
		t.Fatal(err)
	}
	if total != r.Size() {
		t.Errorf("progress %d bytes, inputs %d", total, r.Size())
	}
}

// TestJSONLFieldDecoding checks the reader's own field lookup and string
// decoding against encoding/json.
func TestJSONLFieldDecoding(t *testing.T) {
	lines := []string{
		`{"text": "plain"}`,
		`{"text": "first", "text": "last wins"}`,
		`{"te\u0078t": "escaped key"}`,
		`{"meta": {"text": "nested, not this"}, "text": "top"}`,
		`{"a": ["}", {"text": "]"}], "b": "\"text\": \"no\"", "text": "after"}`,
		`{"n": -1.5e3, "t": true, "f": false, "z": null, "text":"x"}`,
		`{"text": "esc \" \\ \/ \b \f \n \r \t \u00e9 \u4e2d \ud83d\ude00 \u0000 end"}`,
		`{ "text" : "spaced" , "x" : [ 1 , 2 ] }`,
		"{\"text\": \"raw é 中 😀\"}",
	}
	for _, line := range lines {
		var want struct{ Text string }
		if err := json.Unmarshal([]byte(line), &want); err != nil {
			t.Fatal(err)
		}
		var ps Problems
		opt := ReadOptions{}
		r := newJSONLReader("x", io.NopCloser(strings.NewReader(line)), sha256.New(), &opt,
			func(p Problem) error { ps.Add(p); return nil })
		doc, err := r.next()
		if err != nil || doc.Text != want.Text {
			t.Errorf("%s: text %q, %v (problems %v); encoding/json reads %q", line, doc.Text, err, ps.Examples, want.Text)
		}
	}
}
