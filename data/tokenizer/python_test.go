package tokenizer

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
)

// regexGolden is testdata/regex/spans.json.gz, which testdata/regex/gen.py
// writes: the spans that Python's regex module finds for the pre-tokenizer
// patterns of real tokenizer.json files over a sample of the project's
// corpora and edge cases; or, if set, the file $MEMTRAIN_REGEX_SPANS that
// gen.py --out writes, of many random strings.
type regexGolden struct {
	Regex    string   `json:"regex"`
	Unicode  string   `json:"unicode"`
	Texts    []string `json:"texts"`
	Patterns []struct {
		Name    string  `json:"name"`
		Pattern string  `json:"pattern"`
		Spans   [][]int `json:"spans"` // per text: gap, length, gap, length, … in bytes
	} `json:"patterns"`
}

var (
	goldenRegexOnce sync.Once
	goldenRegex     *regexGolden
	goldenRegexErr  error
)

func readRegexGolden(tb testing.TB) *regexGolden {
	tb.Helper()
	goldenRegexOnce.Do(func() {
		name := "testdata/regex/spans.json.gz"
		if s := os.Getenv("MEMTRAIN_REGEX_SPANS"); s != "" {
			name = s // gen.py --out's, for a larger check
		}
		f, err := os.Open(name)
		if err != nil {
			goldenRegexErr = err
			return
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			goldenRegexErr = err
			return
		}
		var g regexGolden
		if goldenRegexErr = json.NewDecoder(zr).Decode(&g); goldenRegexErr != nil {
			return
		}
		for _, p := range g.Patterns {
			if len(p.Spans) != len(g.Texts) {
				goldenRegexErr = fmt.Errorf("pattern %s: spans of %d texts, want %d", p.Name, len(p.Spans), len(g.Texts))
				return
			}
		}
		goldenRegex = &g
	})
	if goldenRegexErr != nil {
		tb.Fatal(goldenRegexErr)
	}
	return goldenRegex
}

// goldenMatches decodes the gaps and lengths of a text's spans.
func goldenMatches(spans []int) []match {
	var ms []match
	last := 0
	for i := 0; i+1 < len(spans); i += 2 {
		start := last + spans[i]
		ms = append(ms, match{start, start + spans[i+1]})
		last = start + spans[i+1]
	}
	return ms
}

// An engine finds the matches of a pattern in a text.
type engine struct {
	name string
	find func(s string) ([]match, error)
}

// patternEngines returns the ways the package can match a compiled pattern
// on s: regexp2 always; Go's regexp where the pattern translates, unless s
// ends in "\n" and the pattern has $ (see linearRegexp); and the
// hand-written splitter for Llama 3's pattern.
func patternEngines(p *pattern, expr string) []engine {
	es := []engine{{"regexp2", func(s string) ([]match, error) { return p.regexpMatches(nil, s) }}}
	if p.linear != nil {
		es = append(es, engine{"Go regexp", func(s string) ([]match, error) {
			if p.endZ && strings.HasSuffix(s, "\n") {
				return p.regexpMatches(nil, s)
			}
			var ms []match
			for _, m := range p.linear.FindAllStringIndex(s, -1) {
				ms = append(ms, match{m[0], m[1]})
			}
			return ms, nil
		}})
	}
	if expr == llama3Pattern {
		l3 := pattern{llama3: true}
		es = append(es, engine{"llama3Next", func(s string) ([]match, error) { return l3.appendMatches(nil, s) }})
	}
	return es
}

// TestRegexPython checks that the Split pre-tokenizer, and every engine of
// the package under it, finds for each pattern of the golden file the spans
// that Python's regex module finds.
func TestRegexPython(t *testing.T) {
	g := readRegexGolden(t)
	t.Logf("golden spans of regex %s (Unicode %s); the package's tables are of Unicode %s", g.Regex, g.Unicode, regexUnicodeVersion)
	if g.Unicode != regexUnicodeVersion {
		t.Errorf("the golden spans are of Unicode %s, the tables of %s: run testdata/regex/gen.py", g.Unicode, regexUnicodeVersion)
	}
	for _, gp := range g.Patterns {
		t.Run(gp.Name, func(t *testing.T) {
			p, err := compileRegex(gp.Pattern, gp.Name)
			if err != nil {
				t.Fatal(err)
			}
			if !p.tables {
				t.Errorf("%s: the classes are not the package's tables", gp.Pattern)
			}
			fails := 0
			// The Split pre-tokenizer (Isolated, as tokenizer.json files
			// have it): the matches and the text between them, in order.
			// Llama 3's pattern is the hand-written splitter there.
			split := &splitPre{pattern: p, behavior: splitIsolated}
			if gp.Pattern == llama3Pattern {
				split.pattern = pattern{llama3: true}
			}
			st := &encState{}
			for i, text := range g.Texts {
				var want []string
				last := 0
				for _, m := range goldenMatches(gp.Spans[i]) {
					if m.start > last {
						want = append(want, text[last:m.start])
					}
					if m.end > m.start {
						want = append(want, text[m.start:m.end])
					}
					last = m.end
				}
				if last < len(text) {
					want = append(want, text[last:])
				}
				pieces, err := split.split(nil, piece{s: text, start: true}, st)
				if err != nil {
					t.Fatalf("Split on text %d: %v", i, err)
				}
				got := make([]string, len(pieces))
				for k, pc := range pieces {
					got[k] = pc.s
				}
				if !slices.Equal(got, want) {
					t.Errorf("Split on text %d %.200q:\n got %q\nwant %q (Python's regex)", i, text, got, want)
					if fails++; fails > 5 {
						t.Fatal("too many failures")
					}
				}
			}
			for _, e := range patternEngines(&p, gp.Pattern) {
				for i, text := range g.Texts {
					want := goldenMatches(gp.Spans[i])
					got, err := e.find(text)
					if err != nil {
						t.Fatalf("%s on text %d: %v", e.name, i, err)
					}
					if !slices.Equal(got, want) {
						t.Errorf("%s on text %d %.200q:\n got %v\nwant %v (Python's regex)", e.name, i, text, got, want)
						if fails++; fails > 5 {
							t.Fatal("too many failures")
						}
					}
				}
			}
		})
	}
}

// TestPythonClasses names the cases where Go's tables (Unicode 15) or
// regexp2's own classes differ from Python's regex, whose spans (in bytes)
// each row gives; the package must find Python's.
func TestPythonClasses(t *testing.T) {
	for _, c := range []struct {
		why, expr, text string
		want            []match
	}{
		{"U+1C89 CYRILLIC CAPITAL LETTER TJE is a letter of Unicode 16", `\p{L}+`, "a\u1c89b", []match{{0, 5}}},
		{"so it breaks a run of punctuation", `[^\s\p{L}\p{N}]+`, "!\u1c89!", []match{{0, 1}, {4, 5}}},
		{"U+16FF4 is a number of Unicode 17", `\p{N}+`, "1\U00016ff4", []match{{0, 5}}},
		{"U+10D40 GARAY DIGIT ZERO is a decimal digit of Unicode 16", `\d+`, "1\U00010d40", []match{{0, 5}}},
		{"U+1171E AHOM CONSONANT SIGN MEDIAL RA became a spacing mark", `\p{Mc}`, "\U0001171e", []match{{0, 4}}},
		{"U+0295 LATIN LETTER PHARYNGEAL VOICED FRICATIVE became Lo", `\p{Ll}|\p{Lo}`, "\u0295", []match{{0, 2}}},
		{"U+0295 is no longer Ll", `\p{Ll}`, "\u0295", nil},
		{"\\w has enclosing marks (U+0488), unlike regexp2's", `\w+`, "a\u0488b", []match{{0, 4}}},
		{"\\s is White_Space: not U+001C..U+001F, U+200B or U+180E", `\s+`, "\x1c\x1d \u200b\u180e\u0085", []match{{2, 3}, {9, 11}}},
		{"(?i) folds U+017F LATIN SMALL LETTER LONG S to s", `(?i:'s)`, "'\u017f 'S", []match{{0, 3}, {4, 6}}},
		{"(?i) folds U+212A KELVIN SIGN to k", `(?i:'k)`, "'\u212a", []match{{0, 4}}},
		{"(?i) folds simply: ß is not ss", `(?i:'ss)`, "'\u00df", nil},
		{"(?i) makes \\p{Lu} match lower case", `(?i)\p{Lu}+`, "aA", []match{{0, 2}}},
		{"\\p{C} has no character that Unicode 17 assigned (U+088F)", `\p{C}`, "\u088f\u0890", []match{{3, 6}}},
	} {
		p, err := compileRegex(c.expr, "test")
		if err != nil {
			t.Fatalf("%s: %v", c.expr, err)
		}
		for _, e := range patternEngines(&p, c.expr) {
			got, err := e.find(c.text)
			if err != nil || !slices.Equal(got, c.want) {
				t.Errorf("%s: %s on %+q: %v, %v; want %v", c.why, e.name, c.text, got, err, c.want)
			}
		}
	}
}

// TestTablesAgainstGo checks the package's tables against Go's: they differ
// only where Unicode 16 and 17 assigned characters, or moved the two of
// TestPythonClasses to another category. (A newer Go's tables may agree
// more.)
func TestTablesAgainstGo(t *testing.T) {
	moved := map[rune]bool{0x0295: true, 0x1171E: true}
	// Go's category of every code point, by index in categoryNames.
	cn := slices.Index(categoryNames[:], "Cn")
	goCats := make([]uint8, unicode.MaxRune+1)
	for i := range goCats {
		goCats[i] = uint8(cn)
	}
	for i, name := range categoryNames {
		table, ok := unicode.Categories[name]
		if !ok {
			continue
		}
		var b []rune
		tableBounds(table, &b)
		for k := 0; k < len(b); k += 2 {
			for r := b[k]; r < b[k+1]; r++ {
				goCats[r] = uint8(i)
			}
		}
	}
	diffs := 0
	for r := rune(0); r <= unicode.MaxRune; r++ {
		p := props(r)
		if ours, theirs := p&propCategory, goCats[r]; ours != theirs && int(theirs) != cn && !moved[r] {
			if diffs++; diffs <= 10 {
				t.Errorf("U+%04X: category %s, Go's %s", r, categoryNames[ours], categoryNames[theirs])
			}
		}
		if got, want := p&propSpace != 0, unicode.IsSpace(r); got != want {
			t.Errorf("U+%04X: \\s %v, unicode.IsSpace %v", r, got, want)
		}
	}
}

// FuzzRegexEngines checks, for each pattern of the golden file, that the
// package's engines agree on any text: regexp2, Go's regexp where the
// pattern translates, and for Llama 3's pattern the hand-written splitter.
// The seeds are edge cases of the golden file.
func FuzzRegexEngines(f *testing.F) {
	g := readRegexGolden(f)
	for i, s := range g.Texts {
		if i < 60 || i%40 == 0 {
			f.Add(s)
		}
	}
	type compiled struct {
		name    string
		engines []engine
	}
	var pats []compiled
	for _, gp := range g.Patterns {
		p, err := compileRegex(gp.Pattern, gp.Name)
		if err != nil {
			f.Fatal(err)
		}
		pats = append(pats, compiled{gp.Name, patternEngines(&p, gp.Pattern)})
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1000 {
			return
		}
		for _, p := range pats {
			var first []match
			for k, e := range p.engines {
				got, err := e.find(s)
				if err != nil {
					t.Fatalf("%s: %s on %+q: %v", p.name, e.name, s, err)
				}
				last := 0
				for _, m := range got {
					if m.start < last || m.end < m.start || m.end > len(s) {
						t.Fatalf("%s: %s on %+q: matches %v out of order or of the text", p.name, e.name, s, got)
					}
					last = m.end
				}
				if k == 0 {
					first = got
				} else if !slices.Equal(got, first) {
					t.Errorf("%s on %+q: %s %v, %s %v", p.name, s, e.name, got, p.engines[0].name, first)
				}
			}
		}
	})
}
