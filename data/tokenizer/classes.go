package tokenizer

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	r2syntax "github.com/dlclark/regexp2/v2/syntax"
)

// Both engines of a pattern, regexp2 and Go's regexp, take \p{L} and the
// other classes from Go's Unicode tables. So that they mean what Python's
// regex means instead (see unicode.go), expandClasses writes each class
// escape out as the ranges of the package's tables before either engine
// compiles the pattern, and sameMeaning checks that nothing else changed.

// expandClasses returns expr with each class escape — \p{…} and \P{…} of a
// general category (see classMember), \d, \D, \w, \W, \s and \S — given
// the members of the package's tables (see writeClass). It reports false
// for what its scan does not follow, \Q…\E quoting and free spacing (?x),
// and once the result passes limit bytes.
// The scan may misread other oddities of regexp2's syntax; sameTree, which
// compares the trees of the two patterns, is what tells.
func expandClasses(expr string, limit int) (string, bool) {
	var b strings.Builder
	depth := 0    // of [ ] nesting, > 0 inside a class
	dash := false // the last of a class was an unescaped "-"
	for i := 0; i < len(expr); {
		if b.Len() > limit {
			return "", false
		}
		c := expr[i]
		wasDash := dash
		dash = depth > 0 && c == '-'
		switch {
		case c == '\\':
			if i+1 >= len(expr) {
				return "", false
			}
			name, negate, n := classEscape(expr[i:])
			if n == 0 {
				if expr[i+1] == 'Q' {
					return "", false
				}
				_, size := utf8.DecodeRuneInString(expr[i+1:])
				b.WriteString(expr[i : i+1+size])
				i += 1 + size
				continue
			}
			if !writeClass(&b, expr[i:i+n], name, negate, depth > 0) {
				b.WriteString(expr[i : i+n]) // a script or property: the engine's
			}
			i += n
		case c == '[' && (depth == 0 || wasDash):
			// A class, or a subtracted one: [a-z-[aeiou]]. A "^" and
			// then a "]" first are its own.
			depth++
			b.WriteByte(c)
			i++
			if i < len(expr) && expr[i] == '^' {
				b.WriteByte('^')
				i++
			}
			if i < len(expr) && expr[i] == ']' {
				b.WriteByte(']')
				i++
			}
		case c == ']' && depth > 0:
			depth--
			b.WriteByte(c)
			i++
		case c == '(' && depth == 0 && strings.HasPrefix(expr[i:], "(?"):
			rest := expr[i+2:]
			if strings.HasPrefix(rest, "#") { // a comment, to its ")"
				k := strings.IndexByte(rest, ')')
				if k < 0 {
					return "", false
				}
				b.WriteString(expr[i : i+3+k])
				i += 3 + k
				continue
			}
			k := 0
			for k < len(rest) && strings.IndexByte("imnsx-", rest[k]) >= 0 {
				k++
			}
			if strings.Contains(rest[:k], "x") {
				return "", false
			}
			b.WriteString("(?")
			i += 2
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), true
}

// classEscape reads the class escape at the start of s, which begins with
// a backslash: its class name for classRanges, whether it is negated, and
// its length; n is 0 if s does not start with one.
func classEscape(s string) (name string, negate bool, n int) {
	switch c := s[1]; c {
	case 'd', 'w', 's', 'D', 'W', 'S':
		return string(unicode.ToLower(rune(c))), c < 'a', 2
	case 'p', 'P':
		if len(s) < 3 || s[2] != '{' {
			return "", false, 0
		}
		k := strings.IndexByte(s, '}')
		if k < 0 {
			return "", false, 0
		}
		return s[3:k], c == 'P', k + 1
	}
	return "", false, 0
}

// writeClass writes the class escape esc, of the class name for
// classRanges, negated or not, in a class or not, with the members that
// the package's tables give it: where they add to what the engines' tables
// (Go's) give, as the escape and the ranges it lacks; where they take from
// it, as ranges. It reports false for a name that the tables lack.
func writeClass(b *strings.Builder, esc, name string, negate, inClass bool) bool {
	c, ok := classTables()[name]
	if !ok || c.theirs == nil {
		return false
	}
	ours, add, drop := c.ours, c.add, c.drop
	if len(add) == 0 && len(drop) == 0 {
		b.WriteString(esc) // the same in both
		return true
	}
	if !inClass {
		// [^…] negates the class as a whole.
		b.WriteString("[")
		if negate {
			b.WriteString("^")
		}
		if len(drop) == 0 {
			b.WriteString(positiveEscape(esc))
			writeRanges(b, add)
		} else {
			writeRanges(b, ours)
		}
		b.WriteString("]")
		return true
	}
	switch {
	case !negate && len(drop) == 0:
		b.WriteString(esc)
		writeRanges(b, add)
	case negate && len(add) == 0:
		// Not ours = not theirs and what ours drops.
		b.WriteString(esc)
		writeRanges(b, drop)
	case negate:
		writeRanges(b, complementRanges(ours))
	default:
		writeRanges(b, ours)
	}
	return true
}

// positiveEscape returns the escape of the class that esc negates, or esc.
func positiveEscape(esc string) string {
	switch esc[1] {
	case 'P':
		return `\p` + esc[2:]
	case 'D', 'W', 'S':
		return `\` + strings.ToLower(esc[1:])
	}
	return esc
}

// engineClassRanges returns a class as the engines' tables have it: Go's
// unicode tables, with regexp2's \s (unicode.IsSpace, which is
// White_Space) and \w (syntax.IsWordChar).
func engineClassRanges(name string) ([]rune, bool) {
	var tables []*unicode.RangeTable
	var extra []rune
	switch name {
	case "s":
		tables = []*unicode.RangeTable{unicode.White_Space}
	case "w":
		tables = []*unicode.RangeTable{unicode.L, unicode.Mn, unicode.Nd, unicode.Pc}
		extra = []rune{0x200C, 0x200D}
	case "d":
		tables = []*unicode.RangeTable{unicode.Nd}
	default:
		if long, ok := unicode.CategoryAliases[name]; ok {
			name = long
		}
		t, ok := unicode.Categories[name]
		if !ok {
			return nil, false
		}
		tables = []*unicode.RangeTable{t}
	}
	var r []rune
	for _, t := range tables {
		var b []rune
		tableBounds(t, &b) // lo, hi+1 pairs
		for i := 0; i < len(b); i += 2 {
			r = append(r, b[i], b[i+1]-1)
		}
	}
	for _, c := range extra {
		r = append(r, c, c)
	}
	return withoutSurrogates(normalizeRanges(r)), true
}

// normalizeRanges sorts lo, hi pairs and joins those that overlap or touch.
func normalizeRanges(r []rune) []rune {
	pairs := make([][2]rune, 0, len(r)/2)
	for i := 0; i < len(r); i += 2 {
		pairs = append(pairs, [2]rune{r[i], r[i+1]})
	}
	slices.SortFunc(pairs, func(a, b [2]rune) int { return int(a[0] - b[0]) })
	var out []rune
	for _, p := range pairs {
		out = appendRange(out, p[0], p[1])
	}
	return out
}

// unionRanges returns the ranges of sorted ranges a or b.
func unionRanges(a, b []rune) []rune {
	out := make([]rune, 0, len(a)+len(b))
	for len(a) > 0 || len(b) > 0 {
		if len(b) == 0 || len(a) > 0 && a[0] <= b[0] {
			out, a = appendRange(out, a[0], a[1]), a[2:]
		} else {
			out, b = appendRange(out, b[0], b[1]), b[2:]
		}
	}
	return out
}

// minusRanges returns the ranges of sorted ranges a that are not in b.
func minusRanges(a, b []rune) []rune {
	var out []rune
	j := 0
	for i := 0; i < len(a); i += 2 {
		lo, hi := a[i], a[i+1]
		for j < len(b) && b[j+1] < lo {
			j += 2
		}
		for k := j; k < len(b) && b[k] <= hi && lo <= hi; k += 2 {
			if b[k] > lo {
				out = append(out, lo, b[k]-1)
			}
			lo = max(lo, b[k+1]+1)
		}
		if lo <= hi {
			out = append(out, lo, hi)
		}
	}
	return out
}

// writeRanges writes the ranges r in the syntax of a class's members.
func writeRanges(b *strings.Builder, r []rune) {
	for i := 0; i < len(r); i += 2 {
		fmt.Fprintf(b, `\x{%x}`, r[i])
		if r[i+1] != r[i] {
			fmt.Fprintf(b, `-\x{%x}`, r[i+1])
		}
	}
}

// sameTree reports whether b, the tree of expandClasses' result for the
// pattern of a, is a's, with each set of it holding what a's means under
// the package's tables. Under (?i) only the trees are compared: regexp2
// closes the ranges of a class under case but not its categories, so that
// (?i)\p{Lu} matches no letter on it, while on Python's regex, and once
// expanded, it matches "a" and "A".
func sameTree(a, b *r2syntax.RegexNode) bool {
	a, b = skipAtomic(a), skipAtomic(b)
	if plainLoop(a.T) != plainLoop(b.T) || a.Options != b.Options || a.M != b.M || a.N != b.N ||
		a.Ch != b.Ch || !slices.Equal(a.Str, b.Str) || len(a.Children) != len(b.Children) ||
		(a.Set == nil) != (b.Set == nil) {
		return false
	}
	if a.Set != nil && a.Options&r2syntax.IgnoreCase == 0 && !sameSet(a.Set, b.Set) {
		return false
	}
	for i := range a.Children {
		if !sameTree(a.Children[i], b.Children[i]) {
			return false
		}
	}
	return true
}

// skipAtomic skips the atomic groups that regexp2's optimizer adds where a
// loop cannot give back, which depends on the sets' members.
func skipAtomic(n *r2syntax.RegexNode) *r2syntax.RegexNode {
	for n.T == r2syntax.NtAtomic && len(n.Children) == 1 {
		n = n.Children[0]
	}
	return n
}

// plainLoop maps the greedy, lazy and atomic loops of a kind to one: the
// optimizer turns a loop atomic, or a lazy one greedy, where it can prove
// that the sets around it do not overlap, which it proves for Go's classes
// and not always for their expansion. The expansion changes no quantifier.
func plainLoop(t r2syntax.NodeType) r2syntax.NodeType {
	switch t {
	case r2syntax.NtOneloopatomic, r2syntax.NtOnelazy:
		return r2syntax.NtOneloop
	case r2syntax.NtNotoneloopatomic, r2syntax.NtNotonelazy:
		return r2syntax.NtNotoneloop
	case r2syntax.NtSetloopatomic, r2syntax.NtSetlazy:
		return r2syntax.NtSetloop
	case r2syntax.NtLazyloop:
		return r2syntax.NtLoop
	}
	return t
}

// sameSet reports whether the expanded set x holds, by regexp2's own
// membership, what the set orig means under the package's tables.
func sameSet(orig, x *r2syntax.CharSet) bool {
	a, ok := parseSetHash(orig.Hash())
	if !ok {
		return false
	}
	b, ok := parseSetHash(x.Hash())
	if !ok {
		return false
	}
	ra, ok := a.members(categoryRanges, false)
	if !ok {
		return false
	}
	rb, ok := b.members(engineCategoryRanges, true)
	return ok && slices.Equal(ra, rb)
}

// A setSpec is a regexp2 set read from its serialization (CharSet.Hash:
// flags, ranges as UTF-8, categories by name, then the subtracted set),
// for membership under the package's tables.
type setSpec struct {
	negate bool
	ranges []rune // lo, hi pairs
	cats   []setCategory
	sub    *setSpec
}

type setCategory struct {
	name   string
	negate bool
}

// parseSetHash reads a CharSet.Hash.
func parseSetHash(h []byte) (*setSpec, bool) {
	if len(h) < 9 {
		return nil, false
	}
	s := &setSpec{negate: h[0]&1 != 0}
	nRanges := int32(binary.LittleEndian.Uint32(h[1:]))
	nCats := int32(binary.LittleEndian.Uint32(h[5:]))
	h = h[9:]
	if nRanges < 0 || nCats < 0 {
		return nil, false
	}
	for range 2 * nRanges {
		// A surrogate or a rune out of range was written as U+FFFD: the
		// membership compared in sameSet tells.
		r, size := utf8.DecodeRune(h)
		if size == 0 {
			return nil, false
		}
		h = h[size:]
		s.ranges = append(s.ranges, r)
	}
	for range nCats {
		if len(h) < 1 {
			return nil, false
		}
		n := int(int8(h[0]))
		c := setCategory{negate: n < 0}
		if n < 0 {
			n = -n
		}
		if len(h) < 1+n {
			return nil, false
		}
		c.name = string(h[1 : 1+n])
		h = h[1+n:]
		s.cats = append(s.cats, c)
	}
	if len(h) > 0 {
		sub, ok := parseSetHash(h)
		if !ok {
			return nil, false
		}
		s.sub = sub
	}
	return s, true
}

// members returns the set's members as ranges, each category's from cat.
// A character is in the union of the ranges and the categories, each maybe
// negated, as on Python's regex; or, ordered, as regexp2 has it: in the
// ranges, else in the first category that has it, a negated category
// deciding every character left. Then the set is negated, and the
// subtracted set's members taken out.
func (s *setSpec) members(cat func(string) ([]rune, bool), ordered bool) ([]rune, bool) {
	r := withoutSurrogates(normalizeRanges(slices.Clone(s.ranges)))
	undecided := complementRanges(r)
	for _, c := range s.cats {
		t, ok := cat(c.name)
		if !ok {
			return nil, false
		}
		switch {
		case !ordered && c.negate:
			r = unionRanges(r, complementRanges(t))
		case !ordered:
			r = unionRanges(r, t)
		case c.negate:
			r = unionRanges(r, minusRanges(undecided, t))
			undecided = nil
		default:
			r = unionRanges(r, minusRanges(undecided, complementRanges(t)))
			undecided = minusRanges(undecided, t)
		}
	}
	if s.negate {
		r = complementRanges(r)
	}
	if s.sub != nil {
		sub, ok := s.sub.members(cat, ordered)
		if !ok {
			return nil, false
		}
		r = minusRanges(r, sub)
	}
	return r, true
}

// categoryRanges returns the ranges of a category of a regexp2 set under
// the package's tables: its names of \s and \w, and the rest by name.
func categoryRanges(name string) ([]rune, bool) {
	switch name {
	case r2syntax.SpaceCategoryText:
		name = "s"
	case r2syntax.WordCategoryText:
		name = "w"
	}
	return classRanges(name)
}

// engineCategoryRanges returns the ranges of a category of a regexp2 set
// as regexp2 has it.
func engineCategoryRanges(name string) ([]rune, bool) {
	switch name {
	case r2syntax.SpaceCategoryText:
		name = "s"
	case r2syntax.WordCategoryText:
		name = "w"
	}
	if c, ok := classTables()[name]; ok && c.theirs != nil {
		return c.theirs, true
	}
	return engineClassRanges(name)
}
