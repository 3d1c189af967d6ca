package data

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// TestTextDocumentBounded checks that a text file is read as one document
// only up to the bound of a document (ReadOptions.MaxLineBytes): one longer
// is a too-long problem that names the file and the bound, or the error of
// strict mode, read to its end for its SHA-256 but never held in memory; a
// paragraph is bounded the same way.
func TestTextDocumentBounded(t *testing.T) {
	dir := t.TempDir()
	const limit = 64 << 10
	big := strings.Repeat("a", 4<<20) // a long word, as a 200 MB file of one
	bigPath := writeFile(t, dir, "big.txt", big)
	okPath := writeFile(t, dir, "ok.txt", strings.Repeat("b", limit))
	lines := strings.Repeat(strings.Repeat("c", 100)+"\n", 2*limit/100)
	parasPath := writeFile(t, dir, "paras.txt", "short one\n\n"+lines+"\nlast\n")

	var docs []Document
	var r *Reader
	var err error
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r, err = NewReader([]string{bigPath, okPath}, ReadOptions{MaxLineBytes: limit})
	if err == nil {
		docs, err = readAll(r)
	}
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 || docs[0].Source != okPath || len(docs[0].Text) != limit {
		t.Errorf("read %d documents, want the %d bytes of ok.txt alone", len(docs), limit)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(len(big))/4 {
		t.Errorf("reading allocated %d bytes for a file of %d over a bound of %d", got, len(big), limit)
	}
	ps := r.Problems()
	want := bigPath + ": file longer than 65536 bytes, the most that one document may have"
	if ps.Counts[LineTooLong] != 1 || len(ps.Examples) != 1 || !strings.HasPrefix(ps.Examples[0].String(), want) {
		t.Errorf("problems %v %q, want one %q…", ps.Counts, ps.Examples, want)
	}
	sum := sha256.Sum256([]byte(big))
	if src := r.Sources()[0]; src.SHA256 != hex.EncodeToString(sum[:]) || src.Problems != 1 {
		t.Errorf("source %+v: want the SHA-256 of the whole file and one problem", src)
	}

	// Strict mode: the error names the file and the bound.
	r, err = NewReader([]string{bigPath}, ReadOptions{MaxLineBytes: limit, Strict: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = readAll(r)
	var re *RecordError
	if !errors.As(err, &re) || !strings.HasPrefix(err.Error(), "data: "+want) {
		t.Errorf("strict: %v, want a record error %q…", err, "data: "+want)
	}

	// Paragraphs: the one of many lines is too long.
	r, err = NewReader([]string{parasPath}, ReadOptions{MaxLineBytes: limit, Paragraphs: true})
	if err != nil {
		t.Fatal(err)
	}
	if docs, err = readAll(r); err != nil {
		t.Fatal(err)
	}
	if len(docs) != 2 || docs[0].Text != "short one" || docs[1].Text != "last" {
		t.Errorf("paragraphs %d, want 2", len(docs))
	}
	if ex := r.Problems().Examples; len(ex) != 1 || ex[0].String() != parasPath+":3: paragraph longer than 65536 bytes" {
		t.Errorf("problems %q", ex)
	}
}
