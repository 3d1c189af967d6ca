package data

import (
	"bytes"
	"fmt"
	"hash"
	"io"
	"strings"
	"unicode/utf8"
)

// textReader reads a plain text file as one document, or as one document
// per paragraph.
type textReader struct {
	name   string
	rc     io.ReadCloser
	h      hash.Hash
	opt    *ReadOptions
	report func(Problem) error
	lines  *lineReader
	done   bool // the whole-file document was returned
	paras  int  // paragraphs seen, good or bad
}

func newTextReader(name string, rc io.ReadCloser, h hash.Hash, opt *ReadOptions, report func(Problem) error) *textReader {
	t := &textReader{name: name, rc: rc, h: h, opt: opt, report: report}
	if opt.Paragraphs {
		t.lines = newLineReader(rc, opt.maxLine())
	}
	return t
}

func (t *textReader) sum() string  { return hexSum(t.h) }
func (t *textReader) close() error { return t.rc.Close() }

func (t *textReader) next() (Document, error) {
	if t.lines != nil {
		return t.paragraph()
	}
	if t.done {
		return Document{}, io.EOF
	}
	t.done = true
	b, err := io.ReadAll(t.rc)
	if err != nil {
		return Document{}, fmt.Errorf("data: %s: %w", t.name, err)
	}
	if off := invalidUTF8(b); off >= 0 {
		line := int64(bytes.Count(b[:off], []byte("\n"))) + 1
		return t.skip(line, InvalidUTF8, fmt.Sprintf("invalid UTF-8 at byte %d of the file", off))
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return t.skip(0, EmptyText, "empty file")
	}
	return Document{Source: t.name, Line: 1, Text: string(b)}, nil
}

// skip reports a problem and then ends the file, or returns the strict
// error.
func (t *textReader) skip(line int64, kind ProblemKind, detail string) (Document, error) {
	if err := t.report(Problem{Source: t.name, Line: line, Kind: kind, Detail: detail}); err != nil {
		return Document{}, err
	}
	return Document{}, io.EOF
}

// paragraph returns the next run of non-blank lines, joined with "\n".
func (t *textReader) paragraph() (Document, error) {
	var (
		sb    strings.Builder
		first int64 // line of the paragraph's first line; 0: none yet
		bad   *Problem
	)
	for {
		line, tooLong, err := t.lines.next()
		if err != nil && err != io.EOF {
			return Document{}, fmt.Errorf("data: %s:%d: %w", t.name, t.lines.line+1, err)
		}
		eof := err == io.EOF
		n := t.lines.line
		line = bytes.TrimSuffix(line, []byte("\r"))
		blank := !tooLong && len(bytes.TrimSpace(line)) == 0
		if eof || blank {
			if first == 0 {
				if !eof {
					continue
				}
				if t.paras == 0 {
					t.paras = -1 // reported
					return t.skip(0, EmptyText, "no paragraph in the file")
				}
				return Document{}, io.EOF
			}
			t.paras++
			if bad != nil {
				if err := t.report(*bad); err != nil {
					return Document{}, err
				}
				sb.Reset()
				first, bad = 0, nil
				if eof {
					return Document{}, io.EOF
				}
				continue
			}
			return Document{Source: t.name, Line: first, Text: sb.String()}, nil
		}
		if first == 0 {
			first = n
		}
		switch {
		case bad != nil:
			// The paragraph is already bad; skip to its end.
		case tooLong:
			bad = &Problem{Source: t.name, Line: n, Kind: LineTooLong,
				Detail: fmt.Sprintf("line longer than %d bytes", t.lines.max)}
		case invalidUTF8(line) >= 0:
			bad = &Problem{Source: t.name, Line: n, Kind: InvalidUTF8,
				Detail: fmt.Sprintf("invalid UTF-8 at byte %d of the line", invalidUTF8(line))}
		default:
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.Write(line)
		}
	}
}

// invalidUTF8 returns the offset of the first byte of b that is not valid
// UTF-8, or -1.
func invalidUTF8(b []byte) int {
	if utf8.Valid(b) {
		return -1
	}
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}
