package tokenizer

import (
	"encoding/json"
	"unicode/utf8"
)

// Fast readers of the two big values of tokenizer.json, model.vocab and
// model.merges, which hold hundreds of thousands of entries. They handle the
// common shapes only and report false on anything else (escapes in keys
// aside, which they decode with encoding/json), so that the caller falls back
// to encoding/json and its error messages. Their input has been validated
// as JSON already.

// jsonScanner reads JSON values from b.
type jsonScanner struct {
	b []byte
	i int
}

func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// consume skips white space and then c, reporting whether c was there.
func (s *jsonScanner) consume(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string.
func (s *jsonScanner) str() (string, bool) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return "", false
	}
	start := s.i
	s.i++
	escaped := false
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i += 2
			continue
		case '"':
			s.i++
			lit := s.b[start:s.i]
			if !escaped && utf8.Valid(lit) {
				return string(lit[1 : len(lit)-1]), true
			}
			var v string
			if json.Unmarshal(lit, &v) != nil {
				return "", false
			}
			return v, true
		}
		s.i++
	}
	return "", false
}

// int32 reads a non-negative integer below 2³¹ without fraction or exponent.
func (s *jsonScanner) int32() (int32, bool) {
	s.space()
	start := s.i
	var v int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + int64(s.b[s.i]-'0')
		if v > 1<<31-1 {
			return 0, false
		}
		s.i++
	}
	if s.i == start || s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	return int32(v), true
}

// end reports whether only white space is left.
func (s *jsonScanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// fastVocab reads {"token": id, …}.
func fastVocab(b []byte) (map[string]int32, bool) {
	s := &jsonScanner{b: b}
	if !s.consume('{') {
		return nil, false
	}
	m := make(map[string]int32, len(b)/16)
	if s.consume('}') {
		return m, s.end()
	}
	for {
		k, ok := s.str()
		if !ok || !s.consume(':') {
			return nil, false
		}
		v, ok := s.int32()
		if !ok {
			return nil, false
		}
		if _, dup := m[k]; dup {
			return nil, false // the slow path names the duplicate
		}
		m[k] = v
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return m, s.end()
		}
		return nil, false
	}
}

// fastMerges reads ["a b", …], where each string has exactly one space, or
// [["a", "b"], …].
func fastMerges(b []byte) (pairs [][2]string, ok bool) {
	s := &jsonScanner{b: b}
	if !s.consume('[') {
		return nil, false
	}
	if s.consume(']') {
		return nil, s.end()
	}
	s.space()
	asStrings := s.i < len(s.b) && s.b[s.i] == '"'
	pairs = make([][2]string, 0, len(b)/12)
	for {
		var pr [2]string
		if asStrings {
			l, ok := s.str()
			if !ok {
				return nil, false
			}
			if len(l) >= 8 && l[:8] == "#version" {
				// Skipped, as HF does. The slow path does it too.
				if s.consume(',') {
					continue
				}
				if s.consume(']') {
					return pairs, s.end()
				}
				return nil, false
			}
			sp := -1
			for k := 0; k < len(l); k++ {
				if l[k] == ' ' {
					if sp >= 0 {
						return nil, false
					}
					sp = k
				}
			}
			if sp < 0 {
				return nil, false
			}
			pr = [2]string{l[:sp], l[sp+1:]}
		} else {
			var ok1, ok2 bool
			if !s.consume('[') {
				return nil, false
			}
			pr[0], ok1 = s.str()
			if !ok1 || !s.consume(',') {
				return nil, false
			}
			pr[1], ok2 = s.str()
			if !ok2 || !s.consume(']') {
				return nil, false
			}
		}
		pairs = append(pairs, pr)
		if s.consume(',') {
			continue
		}
		if s.consume(']') {
			return pairs, s.end()
		}
		return nil, false
	}
}

// skipValue skips one JSON value.
func (s *jsonScanner) skipValue() bool {
	s.space()
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		return s.skipString()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.skipString() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	}
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.i > start
		}
		s.i++
	}
	return s.i > start
}

func (s *jsonScanner) skipString() bool {
	s.i++ // the opening quote
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return true
		}
		s.i++
	}
	return false
}

// objectFields splits a JSON object, which has been validated, into its
// fields, without decoding them. A repeated key takes the last value, as in
// encoding/json; unlike it, keys are matched exactly, as in HF.
func objectFields(b []byte) (map[string]json.RawMessage, bool) {
	s := &jsonScanner{b: b}
	if !s.consume('{') {
		return nil, false
	}
	fields := make(map[string]json.RawMessage)
	if s.consume('}') {
		return fields, s.end()
	}
	for {
		k, ok := s.str()
		if !ok || !s.consume(':') {
			return nil, false
		}
		s.space()
		start := s.i
		if !s.skipValue() {
			return nil, false
		}
		fields[k] = b[start:s.i]
		if s.consume(',') {
			continue
		}
		if s.consume('}') {
			return fields, s.end()
		}
		return nil, false
	}
}
