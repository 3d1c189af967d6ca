package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzJSONL feeds arbitrary bytes to the JSONL reader, as text and as token
// ids: it must never panic, every line must become a document or a problem
// (never both, never twice), and each document's text must be what
// encoding/json reads from its line.
func FuzzJSONL(f *testing.F) {
	f.Add([]byte("{\"text\": \"hello\"}\n{\"text\": 1}\nnot json\n"), false)
	f.Add([]byte("{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [1.5]}\n"), true)
	f.Add([]byte("\uFEFF{\"text\": \"bom\"}\r\n\n  \n{\"text\": \"\\ud83d\\ude00\"}"), false)
	f.Add([]byte("{\"text\": \"\xff\"}\n{\"text\": \"\\udc00\"}\n{\"text\": null}\n"), false)
	f.Add([]byte("{\"input_ids\": [99999999999, -1, null]}\n{\"input_ids\": []}"), true)
	f.Fuzz(func(t *testing.T, data []byte, ids bool) {
		opt := ReadOptions{Pretokenized: ids, VocabSize: 1000, MaxLineBytes: 64, MaxExamples: 1 << 20}
		var ps Problems
		ps.MaxExamples = opt.MaxExamples
		r := newJSONLReader("fuzz.jsonl", io.NopCloser(bytes.NewReader(data)), sha256.New(), &opt,
			func(p Problem) error { ps.Add(p); return nil })
		var lines []int64
		lines1 := bytes.Split(data, []byte("\n"))
		for {
			doc, err := r.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, doc.Line)
			if doc.Line < 1 || int(doc.Line) > len(lines1) {
				t.Fatalf("document at line %d of %d", doc.Line, len(lines1))
			}
			line := lines1[doc.Line-1]
			if doc.Line == 1 {
				line = bytes.TrimPrefix(line, []byte("\uFEFF"))
			}
			var rec map[string]any
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Fatalf("line %d is a document but not JSON: %v", doc.Line, err)
			}
			if ids {
				if len(doc.IDs) == 0 || doc.Text != "" {
					t.Fatalf("line %d: ids %v, text %q", doc.Line, doc.IDs, doc.Text)
				}
				arr, _ := rec["input_ids"].([]any)
				if len(arr) != len(doc.IDs) {
					t.Fatalf("line %d: %d ids, encoding/json reads %d", doc.Line, len(doc.IDs), len(arr))
				}
				for i, v := range arr {
					if n, ok := v.(float64); !ok || n != float64(doc.IDs[i]) || n < 0 || n >= 1000 {
						t.Fatalf("line %d: id %d is %v, encoding/json reads %v", doc.Line, i, doc.IDs[i], v)
					}
				}
				continue
			}
			if !utf8.ValidString(doc.Text) || strings.TrimSpace(doc.Text) == "" || strings.ContainsRune(doc.Text, utf8.RuneError) && !bytes.Contains(line, []byte("\uFFFD")) && !bytes.Contains(bytes.ToLower(line), []byte(`\ufffd`)) {
				t.Fatalf("line %d: bad text %q", doc.Line, doc.Text)
			}
			if text, _ := rec["text"].(string); text != doc.Text {
				t.Fatalf("line %d: text %q, encoding/json reads %q", doc.Line, doc.Text, text)
			}
		}
		for _, p := range ps.Examples {
			lines = append(lines, p.Line)
			if p.Source != "fuzz.jsonl" || p.Detail == "" {
				t.Fatalf("problem %+v", p)
			}
		}
		slices.Sort(lines)
		if len(slices.Compact(slices.Clone(lines))) != len(lines) {
			t.Fatalf("a line is reported twice: %v", lines)
		}
		if len(lines) > 0 && (lines[0] < 1 || int(lines[len(lines)-1]) > len(lines1)) {
			t.Fatalf("lines %v out of [1, %d]", lines, len(lines1))
		}
		// Every line that is not blank is accounted for.
		for i, line := range lines1 {
			if len(bytes.TrimSpace(line)) > 0 && !slices.Contains(lines, int64(i+1)) {
				if i == 0 && len(bytes.TrimSpace(bytes.TrimPrefix(line, []byte("\uFEFF")))) == 0 {
					continue
				}
				t.Fatalf("line %d %q neither a document nor a problem", i+1, line)
			}
		}
	})
}
