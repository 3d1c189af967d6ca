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
	// The file is one document, which cannot be split: it is bounded as a
	// line is, and one longer is not read into memory, only to its end for
	// its SHA-256.
	limit := t.opt.maxLine()
	var sb strings.Builder
	if hf, ok := t.rc.(*hashedFile); ok {
		if st, err := hf.f.Stat(); err == nil && st.Size() > 0 {
			sb.Grow(int(min(st.Size(), int64(limit))))
		}
	}
	n, err := io.Copy(&sb, io.LimitReader(t.rc, int64(limit)+1))
	if err == nil && n > int64(limit) {
		sb = strings.Builder{}
		if _, err = io.Copy(io.Discard, t.rc); err == nil {
			return t.skip(0, LineTooLong, fmt.Sprintf("file longer than %d bytes, the most that one document may have "+
				"(split it, or read a document a paragraph)", limit))
		}
	}
	if err != nil {
		return Document{}, fmt.Errorf("data: %s: %w", t.name, err)
	}
	text := sb.String()
	if off := invalidUTF8String(text); off >= 0 {
		line := int64(strings.Count(text[:off], "\n")) + 1
		return t.skip(line, InvalidUTF8, fmt.Sprintf("invalid UTF-8 at byte %d of the file", off))
	}
	if len(strings.TrimSpace(text)) == 0 {
		return t.skip(0, EmptyText, "empty file")
	}
	return Document{Source: t.name, Line: 1, Text: text}, nil
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
		case sb.Len()+min(sb.Len(), 1)+len(line) > t.lines.max:
			// A paragraph of many lines is bounded as one line is.
			bad = &Problem{Source: t.name, Line: first, Kind: LineTooLong,
				Detail: fmt.Sprintf("paragraph longer than %d bytes", t.lines.max)}
			sb = strings.Builder{}
		default:
			if sb.Len() > 0 {
				sb.WriteByte('\n')
			}
			sb.Write(line)
		}
	}
}

// invalidUTF8String is invalidUTF8 of a string.
func invalidUTF8String(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return -1
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
