package data

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReadLines(t *testing.T) {
	// Blank lines are counted but skipped; white space, "\r" and the byte
	// order mark of the first line are trimmed; the last line needs no "\n".
	in := "\uFEFF{\"a\":1}\r\n\n   \n\t{\"b\":2}  \n{\"c\":3}"
	var got []string
	err := ReadLines(strings.NewReader(in), 0, func(line []byte, n int64) error {
		got = append(got, fmt.Sprintf("%d %s", n, line))
		return nil
	})
	if want := []string{`1 {"a":1}`, `4 {"b":2}`, `5 {"c":3}`}; err != nil || !slices.Equal(got, want) {
		t.Errorf("ReadLines = %q, %v; want %q", got, err, want)
	}

	// An over-long line is an error naming it; the lines before it are read.
	got = nil
	err = ReadLines(strings.NewReader("12345\n\n123456\n1\n"), 5, func(line []byte, n int64) error {
		got = append(got, string(line))
		return nil
	})
	var tl *LineTooLongError
	if !errors.As(err, &tl) || *tl != (LineTooLongError{Line: 3, Max: 5}) || err.Error() != "line 3: longer than 5 bytes" {
		t.Errorf("over-long line: %v", err)
	}
	if !slices.Equal(got, []string{"12345"}) {
		t.Errorf("lines before the long one: %q", got)
	}
	// Longer than the reader's buffer.
	long := strings.Repeat("x", 200_000)
	err = ReadLines(strings.NewReader("a\n"+long+"\nb\n"), 100_000, func([]byte, int64) error { return nil })
	if !errors.As(err, &tl) || tl.Line != 2 {
		t.Errorf("line of 200000 bytes, at most 100000: %v", err)
	}
	err = ReadLines(strings.NewReader("a\n"+long+"\nb\n"), 0, func(line []byte, n int64) error {
		if n == 2 && len(line) != len(long) {
			t.Errorf("line 2 of %d bytes, want %d", len(line), len(long))
		}
		return nil
	})
	if err != nil {
		t.Errorf("default bound: %v", err)
	}

	// fn's error stops the reading and is returned as it is.
	stop := errors.New("stop")
	calls := 0
	err = ReadLines(strings.NewReader("a\nb\nc\n"), 0, func([]byte, int64) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 2 {
		t.Errorf("fn's error: %v after %d calls", err, calls)
	}

	// A read error is returned as it is.
	broken := errors.New("disk on fire")
	err = ReadLines(io.MultiReader(strings.NewReader("a\n"), iotest.ErrReader(broken)), 0, func([]byte, int64) error { return nil })
	if err != broken {
		t.Errorf("read error: %v", err)
	}
}

func TestParseIDsOrText(t *testing.T) {
	for _, c := range []struct {
		line   string
		ids    []int32
		text   string
		isText bool
		err    string
	}{
		{`{"ids":[5,6]}`, []int32{5, 6}, "", false, ""},
		{`{"input_ids":[1,2,2147483647]}`, []int32{1, 2, 2147483647}, "", false, ""},
		{`{"input_ids":[1,-2]}`, nil, "", false, `element 1 of "input_ids": token id -2 out of range`},
		{`{"ids":[7],"input_ids":[8],"text":"x"}`, []int32{7}, "", false, ""}, // "ids" first
		{`{"ids":[1],"ids":[2]}`, []int32{2}, "", false, ""},                  // the last key wins
		{`{"ids":[]}`, []int32{}, "", false, ""},
		{`{"ids":null}`, nil, "", false, `no field "ids", "input_ids" or "text"`},
		{`{"text":"hello"}`, nil, "hello", true, ""},
		{`{"body":"x"}`, nil, "", false, `no field "ids", "input_ids" or "text"`},
		{`{"text":3}`, nil, "", false, `field "text" is a number, want a string`},
		{`{"ids":["a"]}`, nil, "", false, `element 0 of "ids" is a string, want an integer`},
		{`{"ids":[1.5]}`, nil, "", false, `element 0 of "ids" is 1.5, want an integer`},
		{`{"input_ids":[1,4294967296]}`, nil, "", false, `element 1 of "input_ids": token id 4294967296 out of range`},
		{`{"ids":[1,`, nil, "", false, "invalid JSON at byte 10: unexpected end of JSON input"},
		{`not json`, nil, "", false, "invalid JSON: want an object, got null"},
		{`[1,2]`, nil, "", false, "invalid JSON: want an object, got an array"},
	} {
		ids, text, isText, err := ParseIDsOrText([]byte(c.line), "text")
		if c.err != "" {
			if err == nil || err.Error() != c.err {
				t.Errorf("%s: error %v, want %q", c.line, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(ids, c.ids) || (ids == nil) != (c.ids == nil) || text != c.text || isText != c.isText {
			t.Errorf("%s = %v, %q, %v, %v; want %v, %q, %v", c.line, ids, text, isText, err, c.ids, c.text, c.isText)
		}
	}
	// Another text field.
	if _, text, isText, err := ParseIDsOrText([]byte(`{"text":"a","body":"b"}`), "body"); err != nil || !isText || text != "b" {
		t.Errorf("field body: %q, %v, %v", text, isText, err)
	}
}
