package tokenizer

import (
	"strings"
	"unicode"

	"github.com/dlclark/regexp2/v2"
)

// A normalizer rewrites a piece of text before pre-tokenization.
type normalizer interface {
	normalize(s string) string
}

// normalizerSeq applies normalizers in order (HF "Sequence").
type normalizerSeq []normalizer

func (q normalizerSeq) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// prepend puts a prefix before non-empty text (HF "Prepend").
type prepend struct{ prefix string }

func (p prepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

// replace replaces every match of a pattern with content (HF "Replace").
type replace struct {
	pattern pattern
	content string
}

func (r replace) normalize(s string) string { return r.pattern.replaceAll(s, r.content) }

// strip removes white space from the ends of the text (HF "Strip").
type strip struct{ left, right bool }

func (p strip) normalize(s string) string {
	if p.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if p.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// A pattern is HF's pattern of Replace and Split: a literal string or a
// regular expression.
type pattern struct {
	literal string
	re      *regexp2.Regexp // nil for a literal
	llama3  bool            // the Llama 3 pattern, matched by llama3Next
}

// match is a half-open byte range of a pattern match.
type match struct{ start, end int }

// appendMatches appends to dst the non-overlapping matches of p in s, in
// order. A regular expression that fails (by exceeding regexp2's
// backtracking limit) reports the matches found before the failure.
func (p *pattern) appendMatches(dst []match, s string) []match {
	switch {
	case p.llama3:
		for i := 0; i < len(s); {
			j := llama3Next(s, i)
			dst = append(dst, match{i, j})
			i = j
		}
	case p.re != nil:
		runes, offsets := decodeRunes(s)
		idx, _ := p.re.FindAllRunesIndex(runes, -1)
		for _, m := range idx {
			dst = append(dst, match{offsets[m[0]], offsets[m[1]]})
		}
	case p.literal != "":
		for i := 0; ; {
			k := strings.Index(s[i:], p.literal)
			if k < 0 {
				break
			}
			dst = append(dst, match{i + k, i + k + len(p.literal)})
			i += k + len(p.literal)
		}
	}
	return dst
}

// replaceAll replaces the matches of p in s with content, literally.
func (p *pattern) replaceAll(s, content string) string {
	if p.re == nil && !p.llama3 {
		if p.literal == "" {
			return s
		}
		return strings.ReplaceAll(s, p.literal, content)
	}
	ms := p.appendMatches(nil, s)
	if len(ms) == 0 {
		return s
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		b.WriteString(s[last:m.start])
		b.WriteString(content)
		last = m.end
	}
	b.WriteString(s[last:])
	return b.String()
}

// decodeRunes returns the runes of s as regexp2 sees them, each invalid
// UTF-8 byte as one U+FFFD, and the byte offset of every rune (and of the
// end, at index len(runes)).
func decodeRunes(s string) ([]rune, []int) {
	runes := make([]rune, 0, len(s))
	offsets := make([]int, 0, len(s)+1)
	for i, r := range s {
		runes = append(runes, r)
		offsets = append(offsets, i)
	}
	return runes, append(offsets, len(s))
}
