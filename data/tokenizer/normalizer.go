package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"unicode"

	"github.com/dlclark/regexp2/v2"
	"golang.org/x/text/unicode/norm"
)

// A normalizer rewrites a piece of text before pre-tokenization.
type normalizer interface {
	// normalize returns s normalized, or an error if that would take more
	// than limit bytes or a regular expression fails.
	normalize(s string, limit int) (string, error)
}

// Bounds on rewritten text, against expansion bombs: each Replace can
// multiply the length of the text, and a chain of them its power. A
// normalizer or a Replace decoder may write at most growth times its input
// and all the normalizers (or decoders) together chainGrowth times the
// text, each plus slack bytes. Real tokenizers stay far below: Llama 2's
// Prepend("▁") and Replace(" ", "▁") write at most 3·n+3 bytes for n.
const (
	growth      = 8
	chainGrowth = 16
	slack       = 4 << 10
)

// bound returns k·n + slack, saturated.
func bound(n, k int) int {
	if n > (math.MaxInt-slack)/k {
		return math.MaxInt
	}
	return k*n + slack
}

// tooLongError is the error of a Replace whose output would be too long;
// the caller names the component.
type tooLongError struct{ size int64 }

func (e *tooLongError) Error() string { return fmt.Sprintf("output of %d bytes too long", e.size) }

// tooLong is the error of a normalizer or decoder at where whose output
// of size bytes from in would pass limit.
func tooLong(where string, size int64, in, limit int) error {
	return fmt.Errorf("%s: would write %d bytes from %d, past its bound of %d bytes "+
		"(%d× its input and %d× the text, plus %d): an expansion bomb?",
		where, size, in, limit, growth, chainGrowth, slack)
}

// normalizerSeq applies normalizers in order (HF "Sequence").
type normalizerSeq []normalizer

func (q normalizerSeq) normalize(s string, limit int) (string, error) {
	for _, n := range q {
		var err error
		if s, err = n.normalize(s, limit); err != nil {
			return "", err
		}
	}
	return s, nil
}

// prepend puts a prefix before non-empty text (HF "Prepend").
type prepend struct {
	prefix string
	where  string // "tokenizer: FILE: FIELD", for errors
}

func (p prepend) normalize(s string, limit int) (string, error) {
	if s == "" {
		return s, nil
	}
	if lim := min(limit, bound(len(s), growth)); len(p.prefix) > lim-len(s) {
		return "", tooLong(p.where, int64(len(p.prefix))+int64(len(s)), len(s), lim)
	}
	return p.prefix + s, nil
}

// replace replaces every match of a pattern with content (HF "Replace").
type replace struct {
	pattern pattern
	content string
	where   string
}

func (r replace) normalize(s string, limit int) (string, error) {
	lim := min(limit, bound(len(s), growth))
	out, err := r.pattern.replaceAll(s, r.content, lim)
	if err != nil {
		if tl := (*tooLongError)(nil); errors.As(err, &tl) {
			return "", tooLong(r.where, tl.size, len(s), lim)
		}
		return "", err
	}
	return out, nil
}

// unicodeForm puts text in a Unicode normalization form (HF "NFC", "NFD",
// "NFKC", "NFKD"; Qwen's tokenizers have NFC). Invalid UTF-8 is kept.
type unicodeForm struct {
	form  norm.Form
	where string
}

var unicodeForms = map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}

func (u unicodeForm) normalize(s string, limit int) (string, error) {
	if u.form.IsNormalString(s) {
		return s, nil
	}
	// A form writes at most 18 characters for one (NFKD of U+FDFA), so the
	// bound is checked once written.
	out := u.form.String(s)
	if lim := min(limit, bound(len(s), growth)); len(out) > lim {
		return "", tooLong(u.where, int64(len(out)), len(s), lim)
	}
	return out, nil
}

// strip removes white space from the ends of the text (HF "Strip").
type strip struct{ left, right bool }

func (p strip) normalize(s string, _ int) (string, error) {
	if p.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if p.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s, nil
}

// A pattern is HF's pattern of Replace and Split: a literal string or a
// regular expression.
type pattern struct {
	literal string
	re      *regexp2.Regexp // nil for a literal
	linear  *regexp.Regexp  // re on Go's regexp, if that means the same (see linearRegexp)
	endZ    bool            // linear's \z is re's $, which also matches before a final "\n"
	budget  budget          // of a search on re
	where   string          // "tokenizer: FILE: FIELD", for errors
	llama3  bool            // the Llama 3 pattern, matched by llama3Next
	tables  bool            // re's \p{…}, \d, \w and \s are the package's tables' (see expandClasses)
}

// match is a half-open byte range of a pattern match.
type match struct{ start, end int }

// appendMatches appends to dst the non-overlapping matches of p in s, in
// order. A regular expression that regexp2 must match fails with an error
// that names the pattern when a search runs past its budget.
func (p *pattern) appendMatches(dst []match, s string) ([]match, error) {
	switch {
	case p.llama3:
		for i := 0; i < len(s); {
			j := llama3Next(s, i)
			dst = append(dst, match{i, j})
			i = j
		}
	case p.linear != nil && !(p.endZ && strings.HasSuffix(s, "\n")):
		for _, m := range p.linear.FindAllStringIndex(s, -1) {
			dst = append(dst, match{m[0], m[1]})
		}
	case p.re != nil:
		return p.regexpMatches(dst, s)
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
	return dst, nil
}

// replaceAll replaces the matches of p in s with content, literally, or
// fails with a *tooLongError if the result would be longer than limit
// bytes, before writing it.
func (p *pattern) replaceAll(s, content string, limit int) (string, error) {
	if p.re == nil && !p.llama3 {
		if p.literal == "" {
			return s, nil
		}
		n := strings.Count(s, p.literal)
		if n == 0 {
			return s, nil
		}
		if size := int64(len(s)) + int64(n)*int64(len(content)-len(p.literal)); size > int64(limit) {
			return "", &tooLongError{size}
		}
		return strings.ReplaceAll(s, p.literal, content), nil
	}
	ms, err := p.appendMatches(nil, s)
	if err != nil || len(ms) == 0 {
		return s, err
	}
	size := int64(len(s))
	for _, m := range ms {
		size += int64(len(content) - (m.end - m.start))
	}
	if size > int64(limit) {
		return "", &tooLongError{size}
	}
	var b strings.Builder
	b.Grow(int(size))
	last := 0
	for _, m := range ms {
		b.WriteString(s[last:m.start])
		b.WriteString(content)
		last = m.end
	}
	b.WriteString(s[last:])
	return b.String(), nil
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
