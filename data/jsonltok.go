package data

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"

	"github.com/memtrain/memtrain/data/tokenizer"
)

// A LineError is an error about one line of a JSON Lines input.
type LineError struct {
	Line int64 // from 1
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

func lineErrorf(n int64, format string, args ...any) error {
	return &LineError{Line: n, Err: fmt.Errorf(format, args...)}
}

// encodeBatch is how many lines EncodeLines encodes together across the
// threads.
const encodeBatch = 512

// EncodeLines reads JSON Lines whose field holds text and writes each
// line's ids, {"ids":[...]}, to w, encoding encodeBatch lines at a time on
// threads threads (0: all cores). A line's own problem is a *LineError.
func EncodeLines(tok *tokenizer.Tokenizer, in io.Reader, w *bufio.Writer, field string, opt tokenizer.EncodeOptions, threads int) error {
	texts := make([]string, 0, encodeBatch)
	lines := make([]int64, 0, encodeBatch)
	flush := func() error {
		enc, errs := tok.EncodeBatchEach(texts, opt, threads)
		for i, ids := range enc {
			if errs != nil && errs[i] != nil {
				return &LineError{Line: lines[i], Err: errs[i]}
			}
			if err := writeIDs(w, ids); err != nil {
				return err
			}
		}
		texts, lines = texts[:0], lines[:0]
		return nil
	}
	err := ReadLines(in, 0, func(line []byte, n int64) error {
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(line, &rec); err != nil {
			return lineErrorf(n, "invalid JSON: %v", err)
		}
		raw, ok := rec[field]
		if !ok {
			return lineErrorf(n, "missing field %q", field)
		}
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return lineErrorf(n, "field %q: want a string", field)
		}
		texts, lines = append(texts, text), append(lines, n)
		if len(texts) == encodeBatch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

func writeIDs(w *bufio.Writer, ids []int32) error {
	buf := make([]byte, 0, 8+7*len(ids))
	buf = append(buf, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = strconv.AppendInt(buf, int64(id), 10)
	}
	buf = append(buf, "]}\n"...)
	_, err := w.Write(buf)
	return err
}

// DecodeLines reads JSON Lines of ids, {"ids":[...]} or
// {"input_ids":[...]}, and writes each line's text, {"text":"..."}, to w
// (special tokens left out with skipSpecial). A line's own problem — ids
// outside the vocabulary among them — is a *LineError.
func DecodeLines(tok *tokenizer.Tokenizer, in io.Reader, w io.Writer, skipSpecial bool) error {
	vocab := tok.VocabSize()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return ReadLines(in, 0, func(line []byte, n int64) error {
		var rec struct {
			IDs      *[]int64 `json:"ids"`
			InputIDs *[]int64 `json:"input_ids"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return lineErrorf(n, "invalid JSON or ids that are not integers: %v", err)
		}
		src := rec.IDs
		if src == nil {
			src = rec.InputIDs
		}
		if src == nil {
			return lineErrorf(n, "missing field \"ids\" (or \"input_ids\")")
		}
		ids := make([]int32, len(*src))
		for i, id := range *src {
			if id < 0 || id >= int64(vocab) {
				return lineErrorf(n, "token id %d outside the vocabulary [0, %d)", id, vocab)
			}
			ids[i] = int32(id)
		}
		text, err := tok.DecodeChecked(ids, skipSpecial)
		if err != nil {
			return &LineError{Line: n, Err: err}
		}
		return enc.Encode(struct {
			Text string `json:"text"`
		}{text})
	})
}
