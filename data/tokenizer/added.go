package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int32
	content    string
	special    bool
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool // matched in normalized text
}

// matcher finds added tokens in text with leftmost-longest semantics, as the
// Aho-Corasick automaton (MatchKind::LeftmostLongest) of HF's AddedVocabulary.
type matcher struct {
	tokens []addedToken
	nodes  []trieNode
	first  [256]bool // bytes that start some token
}

type trieNode struct {
	edges []trieEdge
	token int32 // index into tokens, -1 if no token ends here
}

type trieEdge struct {
	b    byte
	node int32
}

func newMatcher(tokens []addedToken) *matcher {
	m := &matcher{nodes: []trieNode{{token: -1}}}
	for _, t := range tokens {
		if t.content == "" {
			continue
		}
		m.tokens = append(m.tokens, t)
		n := int32(0)
		for i := 0; i < len(t.content); i++ {
			n = m.child(n, t.content[i])
		}
		m.nodes[n].token = int32(len(m.tokens) - 1)
		m.first[t.content[0]] = true
	}
	return m
}

func (m *matcher) child(n int32, b byte) int32 {
	for _, e := range m.nodes[n].edges {
		if e.b == b {
			return e.node
		}
	}
	c := int32(len(m.nodes))
	m.nodes = append(m.nodes, trieNode{token: -1})
	m.nodes[n].edges = append(m.nodes[n].edges, trieEdge{b, c})
	return c
}

func (m *matcher) empty() bool { return len(m.tokens) == 0 }

// find returns the leftmost-longest match in s at or after from.
func (m *matcher) find(s string, from int) (start, end int, tok *addedToken, ok bool) {
	for i := from; i < len(s); i++ {
		if !m.first[s[i]] {
			continue
		}
		n, best, bestEnd := int32(0), int32(-1), 0
		for j := i; j < len(s); j++ {
			next := int32(-1)
			for _, e := range m.nodes[n].edges {
				if e.b == s[j] {
					next = e.node
					break
				}
			}
			if next < 0 {
				break
			}
			n = next
			if t := m.nodes[n].token; t >= 0 {
				best, bestEnd = t, j+1
			}
		}
		if best >= 0 {
			return i, bestEnd, &m.tokens[best], true
		}
	}
	return 0, 0, nil, false
}

// segment is a piece of text to encode, or an added token (id ≥ 0).
type segment struct {
	text  string
	id    int32
	start bool // text begins the whole input
}

// split appends to dst the segments of s: the added tokens found in it and
// the text between them, as HF's AddedVocabulary::split_with_indices. With
// skipSpecial, special tokens are not matched (HF's encode_special_tokens).
// Empty text segments are left out. atStart tells whether s begins the input.
func (m *matcher) split(dst []segment, s string, skipSpecial, atStart bool) []segment {
	if m.empty() {
		if s != "" {
			dst = append(dst, segment{text: s, id: -1, start: atStart})
		}
		return dst
	}
	text := func(a, b int) {
		if a < b {
			dst = append(dst, segment{text: s[a:b], id: -1, start: atStart && a == 0})
		}
	}
	done := 0 // end of the last segment
	for from := 0; from < len(s); {
		start, end, tok, ok := m.find(s, from)
		if !ok {
			break
		}
		from = end
		if skipSpecial && tok.special {
			continue
		}
		if tok.singleWord && (endsWithWord(s[:start]) || startsWithWord(s[end:])) {
			continue
		}
		if tok.lstrip {
			start = done + len(strings.TrimRightFunc(s[done:start], unicode.IsSpace))
		}
		if tok.rstrip {
			end = len(s) - len(strings.TrimLeftFunc(s[end:], unicode.IsSpace))
			from = max(from, end)
		}
		if start < done {
			// An earlier rstrip took the text this match starts in; HF
			// would emit overlapping pieces here.
			continue
		}
		text(done, start)
		dst = append(dst, segment{id: tok.id})
		done = end
	}
	text(done, len(s))
	return dst
}

func endsWithWord(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// isWordChar is Rust's char::is_alphanumeric, as HF uses for single_word.
func isWordChar(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }
