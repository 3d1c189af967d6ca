package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
)

// llama2Tokenizer is parsed once for all the tests.
var llama2Tokenizer = sync.OnceValues(func() (*tokenizer.Tokenizer, error) {
	tj, err := assets.Read(assets.Llama2Tokenizer)
	if err != nil {
		return nil, err
	}
	cfg, err := assets.Read(assets.Llama2TokenizerConfig)
	if err != nil {
		return nil, err
	}
	return tokenizer.Parse(assets.Llama2Tokenizer, tj, cfg)
})

func llama2(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := llama2Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tiny is a hand-checkable tokenizer: "hello world" is [20, 25], BOS 1,
// EOS 2, vocabulary 26.
func tiny(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.Load("testdata/tiny")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// austen returns the first n paragraphs of the embedded Austen corpus.
func austen(t testing.TB, n int) []string {
	t.Helper()
	b, err := assets.Read(assets.Austen)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() && len(texts) < n {
		var rec struct{ Text string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, rec.Text)
	}
	return texts
}

// writeFile writes a file under dir and returns its path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeJSONL writes one {"text": ...} line per text.
func writeJSONL(t testing.TB, dir, name string, texts []string) string {
	t.Helper()
	var b bytes.Buffer
	for _, s := range texts {
		line, err := json.Marshal(map[string]string{"text": s})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return writeFile(t, dir, name, b.String())
}

// writeParquet writes rows to a Parquet file, rowsPerGroup rows to a row
// group.
func writeParquet[T any](t testing.TB, dir, name string, rows []T, rowsPerGroup int64) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[T](f, parquet.MaxRowsPerRowGroup(rowsPerGroup))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// readAll returns the documents of a reader, and its final error (nil at
// io.EOF).
func readAll(r *Reader) ([]Document, error) {
	var docs []Document
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return docs, err
		}
		docs = append(docs, d)
	}
}

// problemAt is a problem's place and kind, for comparisons.
type problemAt struct {
	line int64
	kind ProblemKind
}
