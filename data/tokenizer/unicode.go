package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"unicode"
)

// The classes of the pre-tokenizer patterns — \p{L}, \p{N} and the other
// general categories, \w, \s and \d — are those of Python's regex module,
// the reference for what a tokenizer.json pattern means, from the tables of
// unicode_tables.go that testdata/regex/gen.py writes with it (by hand, not
// go generate: it needs Python's regex, and a newer regex writes newer
// tables). Go's own
// tables (unicode.Version) are of an older Unicode: under them a letter
// that Unicode 16 or 17 added, such as U+1C89 CYRILLIC CAPITAL LETTER TJE,
// would be unassigned and so split with punctuation.

// The bits of a code point's properties byte (see propRuns).
const (
	propCategory = 1<<5 - 1 // the index of the general category in categoryNames
	propWord     = 1 << 5   // \w
	propSpace    = 1 << 6   // \s
	propDigit    = 1 << 7   // \d
)

// props returns the properties byte of r; a rune out of range is U+FFFD's.
func props(r rune) uint8 {
	if r < 0 || r > unicode.MaxRune {
		r = unicode.ReplacementChar
	}
	// The last run that starts at or before r.
	lo, hi := 0, len(propRuns)
	for hi-lo > 1 {
		m := int(uint(lo+hi) >> 1)
		if rune(propRuns[m]>>8) <= r {
			lo = m
		} else {
			hi = m
		}
	}
	return uint8(propRuns[lo])
}

// classRanges returns the code points of a class as sorted, disjoint,
// inclusive ranges lo0, hi0, lo1, hi1, …, without the surrogates, which no
// Go string holds (see classMember for the names). It reports false for
// other names: scripts and properties stay the engines' own.
func classRanges(name string) ([]rune, bool) {
	c, ok := classTables()[name]
	return c.ours, ok
}

// A classTable is a class of the package's tables, and as the engines'
// tables have it (see engineClassRanges), as ranges.
type classTable struct {
	ours, theirs []rune
	add, drop    []rune // ours less theirs, theirs less ours
}

// classTables are the classes of classMember by name, made once, then only
// read.
var classTables = sync.OnceValue(func() map[string]classTable {
	names := []string{"w", "s", "d", "LC", "L&"}
	for _, c := range categoryNames {
		names = append(names, c)
		if !slices.Contains(names, c[:1]) {
			names = append(names, c[:1])
		}
	}
	for long := range unicode.CategoryAliases {
		names = append(names, long)
	}
	m := make(map[string]classTable, len(names))
	for _, name := range names {
		in, ok := classMember(name)
		if !ok {
			continue
		}
		var r []rune
		for i, run := range propRuns {
			if !in(uint8(run)) {
				continue
			}
			lo, hi := rune(run>>8), rune(unicode.MaxRune)
			if i+1 < len(propRuns) {
				hi = rune(propRuns[i+1]>>8) - 1
			}
			r = appendRange(r, lo, hi)
		}
		c := classTable{ours: withoutSurrogates(r)}
		if theirs, ok := engineClassRanges(name); ok {
			c.theirs = theirs
			c.add, c.drop = minusRanges(c.ours, theirs), minusRanges(theirs, c.ours)
		}
		m[name] = c
	}
	return m
})

// classMember returns the test of a class on a code point's properties
// byte: a general category by its one- or two-letter name (\p{L}, \p{Nd}),
// LC or L& (cased letters), a long name of Go's unicode.CategoryAliases
// (Letter), or the escapes w, s and d. It reports false for other names.
func classMember(name string) (func(p uint8) bool, bool) {
	switch name {
	case "w":
		return func(p uint8) bool { return p&propWord != 0 }, true
	case "s":
		return func(p uint8) bool { return p&propSpace != 0 }, true
	case "d":
		return func(p uint8) bool { return p&propDigit != 0 }, true
	case "LC", "L&":
		return func(p uint8) bool {
			c := categoryNames[p&propCategory]
			return c == "Lu" || c == "Ll" || c == "Lt"
		}, true
	}
	if long, ok := unicode.CategoryAliases[name]; ok {
		return classMember(long)
	}
	if name == "" || len(name) > 2 || !slices.ContainsFunc(categoryNames[:], func(c string) bool { return strings.HasPrefix(c, name) }) {
		return nil, false
	}
	return func(p uint8) bool { return strings.HasPrefix(categoryNames[p&propCategory], name) }, true
}

// appendRange appends lo..hi to the sorted ranges r, joining it to the last
// if they touch.
func appendRange(r []rune, lo, hi rune) []rune {
	if n := len(r); n > 0 && r[n-1]+1 >= lo {
		r[n-1] = max(r[n-1], hi)
		return r
	}
	return append(r, lo, hi)
}

// withoutSurrogates removes U+D800..U+DFFF from sorted ranges.
func withoutSurrogates(r []rune) []rune {
	var out []rune
	for i := 0; i < len(r); i += 2 {
		lo, hi := r[i], r[i+1]
		if lo < 0xD800 {
			out = appendRange(out, lo, min(hi, 0xD7FF))
		}
		if hi > 0xDFFF {
			out = appendRange(out, max(lo, 0xE000), hi)
		}
	}
	return out
}

// complementRanges returns the code points, surrogates aside, that are not
// in the sorted ranges r.
func complementRanges(r []rune) []rune {
	var out []rune
	next := rune(0)
	for i := 0; i < len(r); i += 2 {
		if next < r[i] {
			out = append(out, next, r[i]-1)
		}
		next = r[i+1] + 1
	}
	if next <= unicode.MaxRune {
		out = append(out, next, unicode.MaxRune)
	}
	return withoutSurrogates(out)
}
