package data

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

type textRow struct {
	Text *string `parquet:"text,optional"`
	N    int64   `parquet:"n"`
}

type dictRow struct {
	Body string `parquet:"body,dict"`
}

type idsRow struct {
	IDs  []int64 `parquet:"input_ids,list"`
	Text string  `parquet:"text"`
}

func ptr(s string) *string { return &s }

func TestParquetRowGroups(t *testing.T) {
	dir := t.TempDir()
	var rows []textRow
	var wantDocs []int64
	var want []problemAt
	for i := range 100 {
		row := textRow{Text: ptr(fmt.Sprintf("row %d", i+1)), N: int64(i)}
		switch i % 10 {
		case 3:
			row.Text = nil
			want = append(want, problemAt{int64(i + 1), NullValue})
		case 5:
			row.Text = ptr("bad \xc3")
			want = append(want, problemAt{int64(i + 1), InvalidUTF8})
		case 7:
			row.Text = ptr(" ")
			want = append(want, problemAt{int64(i + 1), EmptyText})
		default:
			wantDocs = append(wantDocs, int64(i+1))
		}
		rows = append(rows, row)
	}
	path := writeParquet(t, dir, "in.parquet", rows, 16)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(pf.RowGroups()); n != 7 {
		t.Fatalf("%d row groups, want 7", n)
	}
	f.Close()

	var progress int64
	r, err := NewReader([]string{path}, ReadOptions{MaxExamples: 100, Progress: func(n int64) { progress += n }})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, d := range docs {
		got = append(got, d.Line)
		if d.Text != fmt.Sprintf("row %d", d.Line) {
			t.Errorf("row %d: text %q", d.Line, d.Text)
		}
	}
	if !slices.Equal(got, wantDocs) {
		t.Errorf("documents at rows %v, want %v", got, wantDocs)
	}
	var gotProbs []problemAt
	for _, p := range r.Problems().Examples {
		gotProbs = append(gotProbs, problemAt{p.Line, p.Kind})
		if !p.Row || !strings.HasPrefix(p.String(), fmt.Sprintf("%s: row %d: ", path, p.Line)) {
			t.Errorf("problem %q does not name file and row", p)
		}
	}
	if !slices.Equal(gotProbs, want) {
		t.Errorf("problems %v, want %v", gotProbs, want)
	}
	if progress != st.Size() {
		t.Errorf("progress %d, file %d bytes", progress, st.Size())
	}
	if s := r.Sources()[0]; s.Format != Parquet || s.Documents != int64(len(wantDocs)) || len(s.SHA256) != 64 {
		t.Errorf("source %+v", s)
	}

	// Strict: the first bad row is an error naming file and row.
	r, _ = NewReader([]string{path}, ReadOptions{Strict: true})
	_, err = readAll(r)
	var re *RecordError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), path+`: row 4: column "text" is null`) {
		t.Errorf("strict error %v", err)
	}
}

func TestParquetDictionaryAndField(t *testing.T) {
	dir := t.TempDir()
	var rows []dictRow
	for i := range 50 {
		rows = append(rows, dictRow{Body: fmt.Sprintf("text %d", i%3)})
	}
	path := writeParquet(t, dir, "d.parquet", rows, 20)
	r, err := NewReader([]string{path}, ReadOptions{Field: "body"})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readAll(r)
	if err != nil || len(docs) != 50 {
		t.Fatalf("%d docs, %v", len(docs), err)
	}
	for i, d := range docs {
		if want := fmt.Sprintf("text %d", i%3); d.Text != want || d.Line != int64(i+1) {
			t.Errorf("doc %d = %q at row %d", i, d.Text, d.Line)
		}
	}
}

func TestParquetPretokenized(t *testing.T) {
	dir := t.TempDir()
	rows := []idsRow{
		{IDs: []int64{1, 2, 3}, Text: "a"},
		{IDs: []int64{}, Text: "b"},
		{IDs: []int64{7, 200}, Text: "c"},
		{IDs: []int64{4}, Text: "d"},
		{IDs: []int64{-1, 5}, Text: "e"},
		{IDs: []int64{5, 6, 7, 8, 9}, Text: "f"},
	}
	path := writeParquet(t, dir, "ids.parquet", rows, 4)
	r, err := NewReader([]string{path}, ReadOptions{Pretokenized: true, VocabSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readAll(r)
	if err != nil {
		t.Fatal(err)
	}
	want := map[int64][]int32{1: {1, 2, 3}, 4: {4}, 6: {5, 6, 7, 8, 9}}
	if len(docs) != len(want) {
		t.Errorf("%d docs, want %d", len(docs), len(want))
	}
	for _, d := range docs {
		if !slices.Equal(d.IDs, want[d.Line]) {
			t.Errorf("row %d: ids %v, want %v", d.Line, d.IDs, want[d.Line])
		}
	}
	var got []problemAt
	for _, p := range r.Problems().Examples {
		got = append(got, problemAt{p.Line, p.Kind})
	}
	if wantP := []problemAt{{2, EmptyText}, {3, BadToken}, {5, BadToken}}; !slices.Equal(got, wantP) {
		t.Errorf("problems %v, want %v", got, wantP)
	}
}

func TestParquetInt32List(t *testing.T) {
	type row struct {
		IDs []int32 `parquet:"tokens,list"`
	}
	path := writeParquet(t, t.TempDir(), "i32.parquet", []row{{[]int32{3, 1, 4}}, {[]int32{-5}}, {[]int32{1, 5}}}, 2)
	r, err := NewReader([]string{path}, ReadOptions{Pretokenized: true, Field: "tokens"})
	if err != nil {
		t.Fatal(err)
	}
	docs, err := readAll(r)
	if err != nil || len(docs) != 2 || !slices.Equal(docs[0].IDs, []int32{3, 1, 4}) || !slices.Equal(docs[1].IDs, []int32{1, 5}) || docs[1].Line != 3 {
		t.Errorf("docs %+v, %v", docs, err)
	}
	if p := r.Problems().Examples; len(p) != 1 || p[0].Kind != BadToken || p[0].Line != 2 {
		t.Errorf("problems %v", p)
	}
}

func TestParquetErrors(t *testing.T) {
	dir := t.TempDir()
	text := writeParquet(t, dir, "t.parquet", []textRow{{Text: ptr("x")}}, 10)
	ids := writeParquet(t, dir, "i.parquet", []idsRow{{IDs: []int64{1}, Text: "x"}}, 10)
	garbage := writeFile(t, dir, "g.parquet", "PAR1 this is not parquet PAR1")
	// A real file with its middle overwritten.
	b, _ := os.ReadFile(text)
	corrupt := bytes.Clone(b)
	for i := 4; i < len(corrupt)-60; i++ {
		corrupt[i] = 0xff
	}
	corruptPath := filepath.Join(dir, "c.parquet")
	os.WriteFile(corruptPath, corrupt, 0o644)

	tests := []struct {
		name string
		path string
		opt  ReadOptions
		want string
	}{
		{"missing column", text, ReadOptions{Field: "body"}, `t.parquet: no column "body" (columns: text, n)`},
		{"int column", text, ReadOptions{Field: "n"}, `t.parquet: column "n" is INT64 (INT(64,true)), want a string`},
		{"list as text", ids, ReadOptions{Field: "input_ids"}, `i.parquet: column "input_ids" is a repeated INT64 (INT(64,true)), want a string`},
		{"text as ids", ids, ReadOptions{Pretokenized: true, Field: "text"}, `i.parquet: column "text" is BYTE_ARRAY (STRING), want a list of INT32 or INT64`},
		{"garbage", garbage, ReadOptions{}, "g.parquet: not a readable Parquet file"},
		{"corrupt", corruptPath, ReadOptions{}, "c.parquet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader([]string{tt.path}, tt.opt)
			if err != nil {
				t.Fatal(err)
			}
			_, err = readAll(r)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}
