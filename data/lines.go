package data

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// A LineTooLongError is ReadLines's error for a line longer than its bound.
type LineTooLongError struct {
	Line int64 // 1-based
	Max  int   // the bound, in bytes
}

func (e *LineTooLongError) Error() string {
	return fmt.Sprintf("line %d: longer than %d bytes", e.Line, e.Max)
}

// ReadLines calls fn with each non-blank line of r, trimmed of white space,
// and its 1-based number (blank lines are counted). The line is only valid
// during the call. It reads lines as the JSONL and text readers do: of at
// most max bytes (0: DefaultMaxLineBytes), the first without a leading
// UTF-8 byte order mark. It stops at the first error of fn, which it
// returns as it is, at a line longer than max, a *LineTooLongError, and at
// a read error, returned as it is.
func ReadLines(r io.Reader, max int, fn func(line []byte, n int64) error) error {
	if max <= 0 {
		max = DefaultMaxLineBytes
	}
	lr := newLineReader(r, max)
	for {
		line, tooLong, err := lr.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if tooLong {
			return &LineTooLongError{Line: lr.line, Max: max}
		}
		line = trimJSONSpace(line)
		if len(line) == 0 {
			continue
		}
		if err := fn(line, lr.line); err != nil {
			return err
		}
	}
}

// ParseIDsOrText reads one JSON Lines record of token ids or of text: the
// array of integers in its "ids" field or, without one, in "input_ids"
// (ids is then not nil, and empty for an empty array or null); or, without
// either, the string in field (isText set). Of duplicate keys the last
// wins, as in encoding/json. Ids need not be in a vocabulary, only fit in
// an int32. The error describes the record alone ("invalid JSON: …",
// `"ids": want an array of integers`), for the caller to say where it is.
func ParseIDsOrText(line []byte, field string) (ids []int32, text string, isText bool, err error) {
	// The JSONL reader's own record parser, in its ids-or-text mode: one
	// reader of such records for every command.
	opt := &ReadOptions{IDsOrText: true, Field: field}
	j := &jsonlReader{opt: opt, field: opt.field()}
	line = trimJSONSpace(line)
	if len(line) == 0 {
		return nil, "", false, errors.New("invalid JSON: an empty line")
	}
	doc, kind, detail := j.parse(line)
	if kind != "" {
		return nil, "", false, errors.New(detail)
	}
	if doc.IDs != nil {
		return doc.IDs, "", false, nil
	}
	return nil, doc.Text, true, nil
}

// trimJSONSpace trims JSON's whitespace (space, tab, CR, LF) from both ends
// of a record: no more, so that a line that encoding/json would refuse
// (one that begins with a vertical tab, say) is reported, not read.
func trimJSONSpace(b []byte) []byte { return bytes.Trim(b, " \t\r\n") }
