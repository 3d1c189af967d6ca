package tokenizer

import "strings"

// piece is a piece of text during pre-tokenization.
type piece struct {
	s     string
	start bool // the piece begins the whole input (HF: original offset 0)
}

// A preTokenizer splits a piece of text into smaller pieces, as one of HF's
// pre-tokenizers. The byte-level mapping of ByteLevel is not done here but
// on each final piece (see Tokenizer.byteLevel).
type preTokenizer interface {
	split(dst []piece, p piece, st *encState) ([]piece, error)
}

// splitBehavior is HF's SplitDelimiterBehavior: what becomes of the matches.
type splitBehavior int

const (
	splitRemoved splitBehavior = iota
	splitIsolated
	splitMergedWithPrevious
	splitMergedWithNext
	splitContiguous
)

var splitBehaviors = map[string]splitBehavior{
	"Removed":            splitRemoved,
	"Isolated":           splitIsolated,
	"MergedWithPrevious": splitMergedWithPrevious,
	"MergedWithNext":     splitMergedWithNext,
	"Contiguous":         splitContiguous,
}

// splitPre splits text on the matches of a pattern (HF "Split").
type splitPre struct {
	pattern  pattern
	behavior splitBehavior
	invert   bool
}

// split is HF's NormalizedString::split.
func (sp *splitPre) split(dst []piece, p piece, st *encState) ([]piece, error) {
	s := p.s
	if sp.pattern.llama3 && sp.behavior == splitIsolated && !sp.invert {
		// The fast path of Llama 3: every character is in some match.
		for i := 0; i < len(s); {
			j := llama3Next(s, i)
			dst = append(dst, piece{s[i:j], p.start && i == 0})
			i = j
		}
		return dst, nil
	}
	var err error
	if st.matches, err = sp.pattern.appendMatches(st.matches[:0], s); err != nil {
		return dst, err
	}
	// All of s as ranges, each flagged as match or not (HF's find_matches).
	ranges := st.ranges[:0]
	last := 0
	for _, m := range st.matches {
		if last != m.start {
			ranges = append(ranges, flagged{match{last, m.start}, sp.invert})
		}
		ranges = append(ranges, flagged{m, !sp.invert})
		last = m.end
	}
	if last != len(s) {
		ranges = append(ranges, flagged{match{last, len(s)}, sp.invert})
	}
	st.ranges = ranges

	emit := func(m match) {
		if m.start < m.end {
			dst = append(dst, piece{s[m.start:m.end], p.start && m.start == 0})
		}
	}
	switch sp.behavior {
	case splitRemoved:
		for _, r := range ranges {
			if !r.isMatch {
				emit(r.match)
			}
		}
	case splitIsolated:
		for _, r := range ranges {
			emit(r.match)
		}
	case splitContiguous, splitMergedWithPrevious:
		var out []match
		prev := false
		for _, r := range ranges {
			merge := r.isMatch == prev
			if sp.behavior == splitMergedWithPrevious {
				merge = r.isMatch && !prev
			}
			if merge && len(out) > 0 {
				out[len(out)-1].end = r.end
			} else {
				out = append(out, r.match)
			}
			prev = r.isMatch
		}
		for _, m := range out {
			emit(m)
		}
	case splitMergedWithNext:
		var out []match // in reverse
		prev := false
		for i := len(ranges) - 1; i >= 0; i-- {
			r := ranges[i]
			if r.isMatch && !prev && len(out) > 0 {
				out[len(out)-1].start = r.start
			} else {
				out = append(out, r.match)
			}
			prev = r.isMatch
		}
		for i := len(out) - 1; i >= 0; i-- {
			emit(out[i])
		}
	}
	return dst, nil
}

type flagged struct {
	match
	isMatch bool
}

// gpt2Pattern is the pattern of HF's ByteLevel pre-tokenizer with use_regex.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteLevelPre is the splitting part of HF's ByteLevel pre-tokenizer.
type byteLevelPre struct {
	addPrefixSpace bool
	regex          *splitPre // nil unless use_regex
}

func (b *byteLevelPre) split(dst []piece, p piece, st *encState) ([]piece, error) {
	if b.addPrefixSpace && !strings.HasPrefix(p.s, " ") {
		p.s = " " + p.s
	}
	if b.regex == nil {
		return append(dst, p), nil
	}
	return b.regex.split(dst, p, st)
}

// metaspacePre is HF's Metaspace pre-tokenizer: spaces become the
// replacement character, which may be prepended, and the text may be split
// before each replacement character.
type metaspacePre struct {
	replacement string
	prepend     prependScheme
	split_      *splitPre // nil unless split
}

type prependScheme int

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

func (m *metaspacePre) split(dst []piece, p piece, st *encState) ([]piece, error) {
	s := strings.ReplaceAll(p.s, " ", m.replacement)
	if !strings.HasPrefix(s, m.replacement) &&
		(m.prepend == prependAlways || m.prepend == prependFirst && p.start) {
		s = m.replacement + s
	}
	p.s = s
	if m.split_ == nil {
		return append(dst, p), nil
	}
	return m.split_.split(dst, p, st)
}

// preTokenizerSeq applies pre-tokenizers in order (HF "Sequence"). The
// parser flattens nested sequences and leaves out those of one member.
type preTokenizerSeq []preTokenizer

func (q preTokenizerSeq) split(dst []piece, p piece, st *encState) ([]piece, error) {
	cur := []piece{p}
	for i, pt := range q {
		var next []piece
		if i == len(q)-1 {
			next = dst
		}
		for _, c := range cur {
			var err error
			if next, err = pt.split(next, c, st); err != nil {
				return dst, err
			}
		}
		cur = next
	}
	if len(q) == 0 {
		return append(dst, p), nil
	}
	return cur, nil
}
