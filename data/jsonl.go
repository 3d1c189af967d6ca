package data

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// lineReader splits a stream into lines of at most max bytes.
type lineReader struct {
	br   *bufio.Reader
	max  int
	buf  []byte
	line int64 // the number of the line last returned
}

func newLineReader(r io.Reader, limit int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 1<<16), max: limit}
}

// next returns the next line without its "\n" (a "\r" before it is kept), or
// io.EOF. A line longer than max is returned empty with tooLong set; its
// bytes are skipped. The first line loses a leading UTF-8 byte order mark.
func (lr *lineReader) next() (line []byte, tooLong bool, err error) {
	lr.buf = lr.buf[:0]
	read := false
	for {
		chunk, err := lr.br.ReadSlice('\n')
		read = read || len(chunk) > 0
		if !tooLong {
			if len(lr.buf)+len(chunk) > lr.max+1 { // +1: the "\n"
				tooLong = true
				lr.buf = lr.buf[:0]
			} else {
				lr.buf = append(lr.buf, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			if !read {
				return nil, false, io.EOF
			}
		} else if err != nil {
			return nil, false, err
		}
		break
	}
	lr.line++
	line = bytes.TrimSuffix(lr.buf, []byte("\n"))
	if len(line) > lr.max {
		tooLong = true
	}
	if lr.line == 1 {
		line = bytes.TrimPrefix(line, []byte("\uFEFF"))
	}
	if tooLong {
		return nil, true, nil
	}
	return line, false, nil
}

// jsonlReader reads JSON Lines: one JSON object per line, blank lines
// skipped.
type jsonlReader struct {
	name   string
	rc     io.ReadCloser
	h      hash.Hash
	lines  *lineReader
	opt    *ReadOptions
	field  string
	report func(Problem) error
}

func newJSONLReader(name string, rc io.ReadCloser, h hash.Hash, opt *ReadOptions, report func(Problem) error) *jsonlReader {
	return &jsonlReader{
		name: name, rc: rc, h: h, opt: opt, field: opt.field(), report: report,
		lines: newLineReader(rc, opt.maxLine()),
	}
}

func (j *jsonlReader) sum() string  { return hexSum(j.h) }
func (j *jsonlReader) close() error { return j.rc.Close() }

func (j *jsonlReader) next() (Document, error) {
	for {
		line, tooLong, err := j.lines.next()
		if err != nil {
			if err != io.EOF {
				err = fmt.Errorf("data: %s:%d: %w", j.name, j.lines.line+1, err)
			}
			return Document{}, err
		}
		n := j.lines.line
		if tooLong {
			if err := j.problem(n, LineTooLong, fmt.Sprintf("line longer than %d bytes", j.lines.max)); err != nil {
				return Document{}, err
			}
			continue
		}
		line = trimJSONSpace(line)
		if len(line) == 0 {
			continue
		}
		doc, kind, detail := j.parse(line)
		if kind != "" {
			if err := j.problem(n, kind, detail); err != nil {
				return Document{}, err
			}
			continue
		}
		doc.Source, doc.Line = j.name, n
		return doc, nil
	}
}

func (j *jsonlReader) problem(line int64, kind ProblemKind, detail string) error {
	return j.report(Problem{Source: j.name, Line: line, Kind: kind, Detail: detail})
}

// parse returns the document of one line, or what is wrong with it. The
// line is validated by encoding/json; the field is then found and decoded
// here, which is several times faster than decoding the record, and agrees
// with encoding/json (the last of duplicate keys wins) except that invalid
// UTF-8 and unpaired surrogates are reported rather than replaced.
func (j *jsonlReader) parse(line []byte) (Document, ProblemKind, string) {
	if j.opt.Chat {
		msgs, kind, detail := ParseChatRecord(line)
		return Document{Messages: msgs}, kind, detail
	}
	if line[0] != '{' {
		return Document{}, InvalidJSON, "invalid JSON: want an object, got " + jsonKind(line)
	}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return Document{}, InvalidJSON, fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, err)
		}
		return Document{}, InvalidJSON, fmt.Sprintf("invalid JSON: %v", err)
	}
	if j.opt.IDsOrText && !j.opt.Pretokenized {
		for _, key := range idsFields {
			if raw, ok := objectField(line, key); ok && raw[0] != 'n' {
				ids, kind, detail := parseIDs(raw, key, j.opt.VocabSize)
				if kind == EmptyText {
					// An empty document, which scores nothing.
					return Document{IDs: []int32{}}, "", ""
				}
				return Document{IDs: ids}, kind, detail
			}
		}
	}
	raw, ok := objectField(line, j.field)
	if !ok && j.opt.IDsOrText && !j.opt.Pretokenized {
		return Document{}, MissingField, fmt.Sprintf("no field \"ids\", \"input_ids\" or %q", j.field)
	}
	if !ok {
		return Document{}, MissingField, fmt.Sprintf("no field %q", j.field)
	}
	if raw[0] == 'n' {
		return Document{}, NullValue, fmt.Sprintf("field %q is null", j.field)
	}
	if j.opt.Pretokenized {
		ids, kind, detail := parseIDs(raw, j.field, j.opt.VocabSize)
		return Document{IDs: ids}, kind, detail
	}
	if raw[0] != '"' {
		return Document{}, WrongType, fmt.Sprintf("field %q is %s, want a string", j.field, jsonKind(raw))
	}
	text, off := decodeJSONString(raw)
	if off >= 0 {
		return Document{}, InvalidUTF8, fmt.Sprintf("field %q is not valid UTF-8 (byte %d of the field)", j.field, off)
	}
	if isBlank(text) {
		return Document{}, EmptyText, fmt.Sprintf("field %q is empty", j.field)
	}
	return Document{Text: text}, "", ""
}

// idsFields are the fields that hold token ids in ids-or-text records.
var idsFields = []string{"ids", "input_ids"}

// objectField returns the raw value of the last top-level field named key
// of obj, a valid JSON object.
func objectField(obj []byte, key string) (raw []byte, ok bool) {
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		kEnd := skipString(obj, i)
		k := obj[i:kEnd]
		i = skipSpace(obj, kEnd)
		i = skipSpace(obj, i+1) // ':'
		vEnd := skipValue(obj, i)
		if keyEquals(k, key) {
			raw, ok = obj[i:vEnd], true
		}
		i = skipSpace(obj, vEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return raw, ok
}

// keyEquals reports whether the JSON string literal k decodes to key.
func keyEquals(k []byte, key string) bool {
	if bytes.IndexByte(k, '\\') < 0 {
		return string(k[1:len(k)-1]) == key
	}
	s, off := decodeJSONString(k)
	return off < 0 && s == key
}

// skipString returns the end of the valid JSON string literal at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the end of the valid JSON value at b[i].
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch c := b[i]; c {
		case '"':
			i = skipString(b, i)
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			i++
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i
			}
			i++
		default:
			i++
		}
		if depth == 0 && (b[i-1] == '"' || b[i-1] == '}' || b[i-1] == ']') {
			return i
		}
	}
	return i
}

// decodeJSONString decodes raw, a JSON string literal that encoding/json
// accepts. It returns the offset in raw of the first byte that is not valid
// UTF-8, or of the first \u escape of an unpaired surrogate (which
// encoding/json would silently turn into U+FFFD), or -1.
func decodeJSONString(raw []byte) (string, int) {
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') < 0 {
		if off := invalidUTF8(body); off >= 0 {
			return "", off + 1
		}
		return string(body), -1
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); {
		c := body[i]
		if c != '\\' {
			j := i + 1
			for j < len(body) && body[j] != '\\' {
				j++
			}
			if off := invalidUTF8(body[i:j]); off >= 0 {
				return "", i + off + 1
			}
			out = append(out, body[i:j]...)
			i = j
			continue
		}
		switch e := body[i+1]; e {
		case 'u':
			r, _ := hex4(body, i+2)
			n := 6
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return "", i + 1
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), false
				if i+7 < len(body) && body[i+6] == '\\' && body[i+7] == 'u' {
					lo, ok = hex4(body, i+8)
				}
				if !ok || lo < 0xDC00 || lo > 0xDFFF {
					return "", i + 1
				}
				r = 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00)
				n = 12
			}
			out = utf8.AppendRune(out, r)
			i += n
		default:
			out = append(out, unescape(e))
			i += 2
		}
	}
	return string(out), -1
}

// unescape returns what the character after a backslash stands for.
func unescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e // '"', '\\' and '/'
}

// jsonKind names the kind of JSON value that b begins.
func jsonKind(b []byte) string {
	switch b[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return "a number"
	}
	return "not JSON"
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 32)
	return rune(v), err == nil
}

// parseIDs parses raw, a valid JSON value, as an array of token ids.
func parseIDs(raw []byte, field string, vocab int) ([]int32, ProblemKind, string) {
	if raw[0] != '[' {
		return nil, WrongType, fmt.Sprintf("field %q is %s, want an array of integers", field, jsonKind(raw))
	}
	ids := make([]int32, 0, len(raw)/4)
	i := skipSpace(raw, 1)
	if i < len(raw) && raw[i] == ']' {
		return nil, EmptyText, fmt.Sprintf("field %q is an empty array", field)
	}
	for i < len(raw) {
		start := i
		for i < len(raw) && (raw[i] == '-' || raw[i] >= '0' && raw[i] <= '9' || raw[i] == '.' || raw[i] == 'e' || raw[i] == 'E' || raw[i] == '+') {
			i++
		}
		elem := len(ids)
		if i == start {
			kind, what := WrongType, jsonKind(raw[start:])
			if raw[start] == 'n' {
				kind = NullValue
			}
			return nil, kind, fmt.Sprintf("element %d of %q is %s, want an integer", elem, field, what)
		}
		num := string(raw[start:i])
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			if _, ferr := strconv.ParseFloat(num, 64); ferr == nil && !isOverflow(err) {
				return nil, WrongType, fmt.Sprintf("element %d of %q is %s, want an integer", elem, field, num)
			}
			return nil, BadToken, fmt.Sprintf("element %d of %q: token id %s out of range", elem, field, num)
		}
		switch {
		case v < 0 || v > math.MaxInt32:
			return nil, BadToken, fmt.Sprintf("element %d of %q: token id %d out of range", elem, field, v)
		case vocab > 0 && v >= int64(vocab):
			return nil, BadToken, fmt.Sprintf("element %d of %q: token id %d outside the vocabulary [0, %d)", elem, field, v, vocab)
		}
		ids = append(ids, int32(v))
		i = skipSpace(raw, i)
		if i < len(raw) && raw[i] == ',' {
			i = skipSpace(raw, i+1)
			continue
		}
		break
	}
	return ids, "", ""
}

func isOverflow(err error) bool {
	var ne *strconv.NumError
	return errors.As(err, &ne) && ne.Err == strconv.ErrRange
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// isBlank reports whether s holds nothing but white space.
func isBlank(s string) bool { return strings.TrimSpace(s) == "" }
