package data

import (
	"bufio"
	"errors"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// TestEncodeDecodeLines: text lines encode to their ids and the ids decode
// back to the text; a line's problem is a *LineError naming the line.
func TestEncodeDecodeLines(t *testing.T) {
	tok := tiny(t)
	var ids strings.Builder
	w := bufio.NewWriter(&ids)
	in := `{"text": "hello world"}` + "\n\n" + `{"text": "world"}` + "\n"
	if err := EncodeLines(tok, strings.NewReader(in), w, "text", tokenizer.EncodeOptions{}, 1); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	if got, want := ids.String(), "{\"ids\":[20,25]}\n{\"ids\":[25]}\n"; got != want {
		t.Errorf("encoded %q, want %q", got, want)
	}
	var text strings.Builder
	if err := DecodeLines(tok, strings.NewReader(ids.String()), &text, true); err != nil {
		t.Fatal(err)
	}
	if got, want := text.String(), "{\"text\":\"hello world\"}\n{\"text\":\"world\"}\n"; got != want {
		t.Errorf("decoded %q, want %q", got, want)
	}
	for _, c := range []struct {
		decode bool
		in     string
		line   int64
		want   string
	}{
		{false, `{"text": "a"}` + "\n" + `{"txt": "b"}`, 2, `missing field "text"`},
		{false, `{"text": 3}`, 1, "want a string"},
		{false, `not json`, 1, "invalid JSON"},
		{true, `{"ids": [1]}` + "\n\n" + `{"ids": [100000]}`, 3, "outside the vocabulary"},
		{true, `{"other": [1]}`, 1, `missing field "ids"`},
	} {
		var err error
		if c.decode {
			err = DecodeLines(tok, strings.NewReader(c.in), &text, false)
		} else {
			err = EncodeLines(tok, strings.NewReader(c.in), bufio.NewWriter(&ids), "text", tokenizer.EncodeOptions{}, 1)
		}
		var le *LineError
		if !errors.As(err, &le) || le.Line != c.line || !strings.Contains(le.Err.Error(), c.want) {
			t.Errorf("%q: %v, want line %d: %s", c.in, err, c.line, c.want)
		}
	}
}
