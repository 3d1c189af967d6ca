package tokenizer

import (
	"slices"
	"strings"
	"testing"
)

// TestExpandClasses checks how class escapes are written, and which
// patterns keep Go's tables.
func TestExpandClasses(t *testing.T) {
	for _, c := range []struct {
		expr   string
		prefix string // of the expansion; "" if expandClasses refuses it
		tables bool   // compileRegex gives the package's classes
	}{
		// Go's class and what Unicode 16 and 17 add to it.
		{`\p{L}+`, `[\p{L}\x{88f}\x{c5c}`, true},
		{`\P{L}`, `[^\p{L}\x{88f}`, true},
		{`[^\s\p{L}\p{N}]`, `[^\s\p{L}\x{88f}`, true},
		{`\d`, `[\d\x{`, true},
		{`\w+|[^\w\s]+`, `[\w\x{488}-\x{489}`, true},
		// In a class, what Unicode 17 adds to \p{L} is out of \P{L}: its
		// complement, written out.
		{`[\P{L}!]`, `[\x{0}-\x{40}\x{5b}-\x{60}`, true},
		// Unicode 17 took characters out of \p{C}: written out.
		{`\p{C}`, `[\x{0}-\x{1f}\x{7f}-\x{9f}`, true},
		// \s is the same in both: as it is.
		{`\s+`, `\s+`, true},
		// A script is the engines': unchanged.
		{`\p{Han}+`, `\p{Han}+`, true},
		{`[a-z-[aeiou]]`, `[a-z-[aeiou]]`, true},
		{`[\w-[\d]]`, `[\w\x{488}`, true},
		{`[a\-[\p{L}]`, `[a\-[\p{L}\x{88f}`, true},
		{`[]\p{N}]`, `[]\p{N}\x{`, true},
		{`(?#\p{L})a`, `(?#\p{L})a`, true},
		// regexp2 widens (?i)\p{Lu} to Go's Lu, Ll and Lt, which the
		// expansion for Lu alone does not match: Go's tables.
		{`(?i)\p{Lu}`, `(?i)[\p{Lu}`, false},
		// Not scanned: Go's tables.
		{`\Q\p{L}\E`, ``, false},
		{`(?x) \p{L} # letter`, ``, false},
		{`(?ix:\p{L})`, ``, false},
		// Past maxExpanded: Go's tables.
		{strings.Repeat(`\w`, 2000), ``, false},
	} {
		x, ok := expandClasses(c.expr, maxExpanded)
		if ok != (c.prefix != "") || !strings.HasPrefix(x, c.prefix) {
			t.Errorf("expandClasses(%q) = %.60q, %v; want %q…", c.expr, x, ok, c.prefix)
		}
		p, err := compileRegex(c.expr, "test")
		if err != nil {
			t.Errorf("compileRegex(%q): %v", c.expr, err)
			continue
		}
		if p.tables != c.tables {
			t.Errorf("compileRegex(%q): the package's classes %v, want %v", c.expr, p.tables, c.tables)
		}
	}
}

// TestRangeAlgebra checks the range operations against sets of runes.
func TestRangeAlgebra(t *testing.T) {
	members := func(r []rune) []rune {
		var m []rune
		for i := 0; i < len(r); i += 2 {
			for c := r[i]; c <= r[i+1] && c < 40; c++ {
				m = append(m, c)
			}
		}
		return m
	}
	sets := [][]rune{nil, {0, 39}, {1, 1}, {1, 3, 5, 5, 7, 9}, {0, 2, 4, 4}, {3, 6}, {2, 5, 9, 20}}
	for _, a := range sets {
		for _, b := range sets {
			ma, mb := members(a), members(b)
			var union, minus []rune
			for c := rune(0); c < 40; c++ {
				inA, inB := slices.Contains(ma, c), slices.Contains(mb, c)
				if inA || inB {
					union = append(union, c)
				}
				if inA && !inB {
					minus = append(minus, c)
				}
			}
			if got := members(unionRanges(a, b)); !slices.Equal(got, union) {
				t.Errorf("unionRanges(%v, %v) has %v, want %v", a, b, got, union)
			}
			if got := members(minusRanges(a, b)); !slices.Equal(got, minus) {
				t.Errorf("minusRanges(%v, %v) has %v, want %v", a, b, got, minus)
			}
		}
	}
	if got := complementRanges([]rune{0, 9, 0xD000, 0xE100}); !slices.Equal(got, []rune{10, 0xCFFF, 0xE101, 0x10FFFF}) {
		t.Errorf("complementRanges = %x", got)
	}
}
