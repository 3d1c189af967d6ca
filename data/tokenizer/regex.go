package tokenizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"regexp"
	gosyntax "regexp/syntax"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/dlclark/regexp2/v2"
	r2syntax "github.com/dlclark/regexp2/v2/syntax"
)

// The regular expressions of tokenizer.json run on Go's regexp (RE2), in
// time linear in the text, when they mean the same there as on regexp2, the
// backtracking engine that the others need (look-around, as in GPT-2's
// \s+(?!\S), back-references, atomic groups and possessive quantifiers,
// conditionals, \b). On regexp2 a pattern that backtracks catastrophically,
// such as (a+)+(?=b), would run for ages on a few dozen characters, so each
// search (for the next match) has a time budget, past which matching fails
// with an error.

// The budget of a regexp2 search in a text of n characters: floor +
// n·perRune, far above what the patterns of real tokenizers take (well
// under a microsecond a character), and short of a hang on any text.
const (
	regexBudgetFloor   = time.Second
	regexBudgetPerRune = time.Microsecond
)

// A budget is the time a regexp2 search may take.
type budget struct{ floor, perRune time.Duration }

func (b budget) of(runes int) time.Duration { return b.floor + time.Duration(runes)*b.perRune }

// maxExpanded bounds the length of a pattern with its classes written out
// (see expandClasses), past which it keeps Go's tables: regexp2 sorts a
// class's ranges as it adds each, so that a hostile pattern of thousands
// of \w would take minutes to compile. Real patterns stay far below: that
// of GPT-4o, the longest, is 19.5 KiB.
const maxExpanded = 128 << 10

// compileRegex compiles a pattern of tokenizer.json on regexp2, which
// defines its syntax and, but for its classes, which are Python's regex's
// (see expandClasses), its meaning; and also on Go's regexp when that is
// the same pattern (see linearRegexp).
func compileRegex(expr, where string) (pattern, error) {
	tree, err := r2syntax.Parse(expr, r2syntax.ParseOptions{})
	if err != nil {
		return pattern{}, err // as regexp2.Compile's
	}
	p := pattern{where: where, budget: budget{regexBudgetFloor, regexBudgetPerRune}}
	// The classes as Python's regex has them, where the expansion keeps the
	// pattern's meaning otherwise; else Go's tables (see classes.go).
	x, ok := expandClasses(expr, maxExpanded)
	if ok && x != expr {
		if xtree, err := r2syntax.Parse(x, r2syntax.ParseOptions{}); err == nil && sameTree(tree.Root, xtree.Root) {
			if p.re, err = regexp2.Compile(x, regexp2.None); err == nil {
				tree = xtree
			}
		}
	}
	p.tables = ok && p.re != nil || x == expr
	if p.re == nil {
		if p.re, err = regexp2.Compile(expr, regexp2.None); err != nil {
			return pattern{}, err
		}
	}
	// Atomic groups and possessive quantifiers become atomic nodes in
	// regexp2's tree, as do the optimizer's own, which change nothing and
	// are translated as plain groups: refuse the pattern if it may have the
	// user's.
	if !mayBeAtomic(expr) {
		p.linear, p.endZ = linearRegexp(tree)
	}
	return p, nil
}

// linearRegexp returns a regexp2 tree as a Go regexp that finds the same
// matches as a backtracking engine (leftmost first, the same successive
// matches), or nil if it has constructs that RE2 lacks or that mean
// something else there. It translates regexp2's own parse tree, so that
// escapes and classes mean what they mean to regexp2: \s, \d and \w are
// Unicode classes, which they are not in RE2, and (?i) has regexp2's case
// folding. endZ reports that the result's \z stands for regexp2's $, which
// also matches before a final "\n": for texts that end in one, regexp2
// must match instead. (Where the two differ, regexp2 v2.13.0 is wrong: it
// misses matches of some patterns with lazy loops; see TestLinearRegexpRandom.)
// The tree must be of a pattern without atomic groups (see mayBeAtomic).
func linearRegexp(tree *r2syntax.RegexTree) (re *regexp.Regexp, endZ bool) {
	tr := translator{}
	g, ok := tr.node(tree.Root)
	if !ok {
		return nil, false
	}
	re, err := regexp.Compile(g.String())
	if err != nil {
		return nil, false // such as a repeat count over RE2's 1000
	}
	return re, tr.endZ
}

// mayBeAtomic reports whether expr may have an atomic group (?>…), a
// possessive quantifier (a*+, a++, a?+, a{2}+) or \R, an atomic match of a
// line break. It errs on the side of yes: a pattern with free spacing
// (?x), where blanks may separate a quantifier from its +, is one.
func mayBeAtomic(expr string) bool {
	quant := false // the last token was a quantifier
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		wasQuant := quant
		quant = false
		switch c {
		case '\\':
			i++
			if i >= len(expr) {
				return true
			}
			switch expr[i] {
			case 'R':
				return true
			case 'Q': // quoted to \E
				k := strings.Index(expr[i:], `\E`)
				if k < 0 {
					return false
				}
				i += k + 1
			case 'p', 'P', 'k': // \p{…}, \k<…>: no quantifier inside
				if k := strings.IndexAny(expr[i:], "}>'"); k >= 0 {
					i += k
				}
			}
		case '[':
			// A class, nested for subtraction; "]" first is a member.
			depth := 1
			i++
			if i < len(expr) && expr[i] == '^' {
				i++
			}
			if i < len(expr) && expr[i] == ']' {
				i++
			}
			for ; i < len(expr) && depth > 0; i++ {
				switch expr[i] {
				case '\\':
					i++
				case '[':
					depth++
				case ']':
					depth--
				}
			}
			i--
		case '(':
			if strings.HasPrefix(expr[i:], "(?") {
				rest := expr[i+2:]
				if strings.HasPrefix(rest, ">") {
					return true
				}
				if strings.HasPrefix(rest, "#") { // a comment
					k := strings.IndexByte(rest, ')')
					if k < 0 {
						return false
					}
					i += 2 + k
					continue
				}
				// Inline options: free spacing may hide a possessive.
				k := 0
				for k < len(rest) && strings.IndexByte("imnsx-", rest[k]) >= 0 {
					k++
				}
				if strings.Contains(rest[:k], "x") {
					return true
				}
				i++ // the ? of (? is no quantifier
			}
		case '*', '?':
			quant = true
		case '+':
			if wasQuant {
				return true
			}
			quant = true
		case '{':
			if k := strings.IndexByte(expr[i:], '}'); k > 0 && isRepeatCount(expr[i+1:i+k]) {
				i += k
				quant = true
			}
		}
	}
	return false
}

// isRepeatCount reports whether s is n, n, or n,m of a {…} quantifier.
func isRepeatCount(s string) bool {
	lo, hi, comma := strings.Cut(s, ",")
	digits := func(s string) bool {
		return strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) < 0
	}
	return lo != "" && digits(lo) && (!comma || digits(hi))
}

// translator turns a regexp2 tree into a Go regexp/syntax tree.
type translator struct {
	endZ bool
}

func (tr *translator) node(n *r2syntax.RegexNode) (*gosyntax.Regexp, bool) {
	if n.Options&(r2syntax.IgnoreCase|r2syntax.RightToLeft|r2syntax.ECMAScript) != 0 {
		return nil, false
	}
	const inf = math.MaxInt32
	switch n.T {
	case r2syntax.NtOne:
		return literal([]rune{n.Ch}), true
	case r2syntax.NtMulti:
		return literal(slices.Clone(n.Str)), true
	case r2syntax.NtNotone:
		return notOne(n.Ch), true
	case r2syntax.NtSet:
		return charClass(n.Set)
	case r2syntax.NtOneloop, r2syntax.NtOneloopatomic, r2syntax.NtOnelazy:
		return repeat(literal([]rune{n.Ch}), n.M, n.N, n.T == r2syntax.NtOnelazy), true
	case r2syntax.NtNotoneloop, r2syntax.NtNotoneloopatomic, r2syntax.NtNotonelazy:
		return repeat(notOne(n.Ch), n.M, n.N, n.T == r2syntax.NtNotonelazy), true
	case r2syntax.NtSetloop, r2syntax.NtSetloopatomic, r2syntax.NtSetlazy:
		c, ok := charClass(n.Set)
		if !ok {
			return nil, false
		}
		return repeat(c, n.M, n.N, n.T == r2syntax.NtSetlazy), true
	case r2syntax.NtLoop, r2syntax.NtLazyloop:
		// A loop whose body can match the empty string may stop at a
		// different iteration in the two engines.
		if len(n.Children) != 1 || n.N > 1 && n.Children[0].ComputeMinLength() == 0 {
			return nil, false
		}
		sub, ok := tr.node(n.Children[0])
		if !ok {
			return nil, false
		}
		return repeat(sub, n.M, n.N, n.T == r2syntax.NtLazyloop), true
	case r2syntax.NtCapture, r2syntax.NtGroup, r2syntax.NtAtomic:
		// Groups capture nothing that matters here; atomic nodes are the
		// optimizer's (see linearRegexp).
		if len(n.Children) != 1 {
			return nil, false
		}
		return tr.node(n.Children[0])
	case r2syntax.NtConcatenate, r2syntax.NtAlternate:
		op := gosyntax.OpConcat
		if n.T == r2syntax.NtAlternate {
			op = gosyntax.OpAlternate
		}
		g := &gosyntax.Regexp{Op: op}
		for _, c := range n.Children {
			sub, ok := tr.node(c)
			if !ok {
				return nil, false
			}
			g.Sub = append(g.Sub, sub)
		}
		if len(g.Sub) == 0 {
			return &gosyntax.Regexp{Op: gosyntax.OpEmptyMatch}, true
		}
		return g, true
	case r2syntax.NtEmpty, r2syntax.NtUpdateBumpalong:
		return &gosyntax.Regexp{Op: gosyntax.OpEmptyMatch}, true
	case r2syntax.NtNothing:
		return &gosyntax.Regexp{Op: gosyntax.OpNoMatch}, true
	case r2syntax.NtBol:
		return &gosyntax.Regexp{Op: gosyntax.OpBeginLine}, true
	case r2syntax.NtEol:
		return &gosyntax.Regexp{Op: gosyntax.OpEndLine}, true
	case r2syntax.NtBeginning:
		return &gosyntax.Regexp{Op: gosyntax.OpBeginText}, true
	case r2syntax.NtEnd:
		return &gosyntax.Regexp{Op: gosyntax.OpEndText}, true
	case r2syntax.NtEndZ:
		tr.endZ = true
		return &gosyntax.Regexp{Op: gosyntax.OpEndText}, true
	}
	// Back-references, look-around, conditionals, \b, \G, \X: regexp2's.
	return nil, false
}

func literal(r []rune) *gosyntax.Regexp {
	return &gosyntax.Regexp{Op: gosyntax.OpLiteral, Rune: r}
}

// notOne is every character but c.
func notOne(c rune) *gosyntax.Regexp {
	var r []rune
	if c > 0 {
		r = append(r, 0, c-1)
	}
	if c < unicode.MaxRune {
		r = append(r, c+1, unicode.MaxRune)
	}
	return &gosyntax.Regexp{Op: gosyntax.OpCharClass, Rune: r}
}

func repeat(sub *gosyntax.Regexp, lo, hi int, lazy bool) *gosyntax.Regexp {
	g := &gosyntax.Regexp{Sub: []*gosyntax.Regexp{sub}, Min: lo, Max: hi}
	if hi == math.MaxInt32 {
		g.Max = -1
	}
	switch {
	case lo == 0 && g.Max == -1:
		g.Op = gosyntax.OpStar
	case lo == 1 && g.Max == -1:
		g.Op = gosyntax.OpPlus
	case lo == 0 && g.Max == 1:
		g.Op = gosyntax.OpQuest
	default:
		g.Op = gosyntax.OpRepeat
	}
	if lazy {
		g.Flags |= gosyntax.NonGreedy
	}
	return g
}

// charClass lists the characters of a regexp2 set as ranges. Membership is
// regexp2's own (CharSet.Contains); the set's ranges and Unicode tables only
// say where it may change.
func charClass(set *r2syntax.CharSet) (*gosyntax.Regexp, bool) {
	bounds := []rune{0, 0xD800, 0xE000, unicode.MaxRune + 1} // no surrogates in Go text
	if !setBounds(set.Hash(), &bounds) {
		return nil, false
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	var r []rune
	for i := 0; i+1 < len(bounds); i++ {
		lo, hi := bounds[i], bounds[i+1]-1
		if lo < 0 || lo > unicode.MaxRune || lo >= 0xD800 && lo < 0xE000 || !set.Contains(lo) {
			continue
		}
		hi = min(hi, unicode.MaxRune)
		if n := len(r); n > 0 && r[n-1] == lo-1 {
			r[n-1] = hi
		} else {
			r = append(r, lo, hi)
		}
	}
	if len(r) == 0 {
		return &gosyntax.Regexp{Op: gosyntax.OpNoMatch}, true
	}
	return &gosyntax.Regexp{Op: gosyntax.OpCharClass, Rune: r}, true
}

// setBounds adds to bounds every character where membership of the set
// serialized in h (regexp2's CharSet.Hash: flags, ranges as UTF-8,
// categories by name, then the subtracted set) may change. It fails on
// categories that it does not know, which regexp2 may define otherwise.
func setBounds(h []byte, bounds *[]rune) bool {
	if len(h) < 9 {
		return false
	}
	nRanges := int32(binary.LittleEndian.Uint32(h[1:]))
	nCats := int32(binary.LittleEndian.Uint32(h[5:]))
	h = h[9:]
	if nRanges < 0 || nCats < 0 {
		return false
	}
	for range 2 * nRanges {
		r, size := utf8.DecodeRune(h)
		if size == 0 {
			return false
		}
		h = h[size:]
		// A surrogate or out-of-range end was written as U+FFFD; the
		// bounds at the surrogates and U+FFFD cover it.
		*bounds = append(*bounds, r, r+1)
	}
	for range nCats {
		if len(h) < 1 {
			return false
		}
		n := int(int8(h[0]))
		if n < 0 {
			n = -n
		}
		if len(h) < 1+n {
			return false
		}
		name := string(h[1 : 1+n])
		h = h[1+n:]
		var tables []*unicode.RangeTable
		switch name {
		case r2syntax.SpaceCategoryText: // unicode.IsSpace
			tables = []*unicode.RangeTable{unicode.White_Space}
		case r2syntax.WordCategoryText: // syntax.IsWordChar
			tables = []*unicode.RangeTable{unicode.L, unicode.Mn, unicode.Nd, unicode.Pc}
			*bounds = append(*bounds, '0', '9'+1, 'A', 'Z'+1, '_', '_'+1, 'a', 'z'+1, 0x200C, 0x200E)
		default:
			t, ok := unicode.Categories[name] // general categories: \p{L}, \p{Nd}, ...
			if !ok {
				return false
			}
			tables = []*unicode.RangeTable{t}
		}
		for _, t := range tables {
			tableBounds(t, bounds)
		}
	}
	if len(h) > 0 {
		return setBounds(h, bounds) // the subtracted set
	}
	return true
}

func tableBounds(t *unicode.RangeTable, bounds *[]rune) {
	add := func(lo, hi, stride rune) {
		if stride == 1 {
			*bounds = append(*bounds, lo, hi+1)
			return
		}
		for c := lo; c <= hi; c += stride {
			*bounds = append(*bounds, c, c+1)
		}
	}
	for _, r := range t.R16 {
		add(rune(r.Lo), rune(r.Hi), rune(r.Stride))
	}
	for _, r := range t.R32 {
		add(rune(r.Lo), rune(r.Hi), rune(r.Stride))
	}
}

// regexpMatches appends the matches of p.re in s, on regexp2 with the
// pattern's time budget for each search.
func (p *pattern) regexpMatches(dst []match, s string) ([]match, error) {
	runes, offsets := decodeRunes(s)
	// A copy with this text's budget, as MatchTimeout is a field; it shares
	// the compiled program and its pool of runners.
	re := *p.re
	re.MatchTimeout = p.budget.of(len(runes))
	idx, err := re.FindAllRunesIndex(runes, -1)
	if err != nil {
		// regexp2's message quotes the whole text: name it instead.
		if errors.Is(err, regexp2.ErrBacktrackingStackLimit) {
			return dst, fmt.Errorf("%s: matching a text of %d characters exceeded regexp2's backtracking limit", p.where, len(runes))
		}
		return dst, fmt.Errorf("%s: matching a text of %d characters exceeded its time budget of %v: the pattern backtracks too much (catastrophically?) on it", p.where, len(runes), re.MatchTimeout)
	}
	for _, m := range idx {
		dst = append(dst, match{offsets[m[0]], offsets[m[1]]})
	}
	return dst, nil
}
