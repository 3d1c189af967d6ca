package tokenizer

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// regexCases are patterns of tokenizer.json files and the like, with
// whether they run on Go's regexp.
var regexCases = []struct {
	expr   string
	linear bool
}{
	{`(a+)+$`, true},
	{` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+`, true},
	{`\w+|[^\w\s]+`, true},
	{`\s+`, true},
	{` {2,}`, true},
	{`\d{1,3}`, true},
	{`\p{N}{1,3}`, true},
	{`[0-9]|[,!]`, true},
	{`#+`, true},
	{`^\s+|\s+$`, true},
	{`(?m)^ +| +$`, true},
	{`(?i)abc|ß`, true},
	{`.+?x|.`, true},
	{`(?s).{2}`, true},
	{`[a-z-[aeiou]]+`, true},
	{`[\p{Lu}\p{Lt}]*[\p{Ll}\p{M}]+`, true},
	{`\u00e9+|\x41`, true},
	{`(?:ab|a)(?:c|bcd)`, true},
	{`a{2,3}?`, true},
	{`(?<word>\p{L}+)`, true},
	{`\p{L}++`, false},
	{`(?>a+)b`, false},
	{`a*+`, false},
	{`\R`, false},
	{`(?x) a* + `, false},
	{gpt2Pattern, false},
	{`\s+(?!\S)`, false},
	{`(?<=a)b`, false},
	{`(a)\1`, false},
	{`\bthe\b`, false},
	{`\G.`, false},
	{`(a|)*b`, false},
	{`\p{Han}`, false},
	{`x{1001}`, false},
}

var regexTexts = []string{
	"", "a", "aaaa", "aaaa\n", "aaa!", "Hello, world! 123 4567", "  two  spaces  ",
	"tabs\tand\nnew\r\nlines\n", "héllo wörld ÉTÉ ß SS", "日本語のテキスト", "٣٤٥ ١٢",
	"a\xffb\xfe", "\u2028\u00a0\u3000x", "abcd abc ab", "The the THE them", "x\n",
}

// TestLinearRegexp checks which patterns run on Go's regexp, and that
// those find the same matches there as on regexp2.
func TestLinearRegexp(t *testing.T) {
	for _, c := range regexCases {
		p, err := compileRegex(c.expr, "test")
		if err != nil {
			t.Fatalf("%q: %v", c.expr, err)
		}
		if got := p.linear != nil; got != c.linear {
			t.Errorf("%q: on Go's regexp %v, want %v", c.expr, got, c.linear)
		}
		if p.linear != nil {
			for _, s := range regexTexts {
				checkLinear(t, &p, s)
			}
		}
	}
}

// checkLinear checks that the matches of p in s are the same on Go's regexp
// as on regexp2.
func checkLinear(t *testing.T, p *pattern, s string) {
	t.Helper()
	if p.endZ && strings.HasSuffix(s, "\n") {
		return // regexp2's (appendMatches uses it)
	}
	want, err := p.regexpMatches(nil, s)
	if err != nil {
		return // regexp2 ran out of time: nothing to compare
	}
	var got []match
	for _, m := range p.linear.FindAllStringIndex(s, -1) {
		got = append(got, match{m[0], m[1]})
	}
	if !slices.Equal(got, want) {
		t.Errorf("%q on %q: Go's regexp %v, regexp2 %v", p.re.String(), s, got, want)
	}
}

// FuzzLinearRegexp checks random patterns against Go's regexp compiled
// from the same pattern written in RE2's syntax (see randomPattern), and
// that any pattern compiles and matches without panicking.
func FuzzLinearRegexp(f *testing.F) {
	f.Add([]byte("seed"), "aé b\n1")
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, "bb\n 1É!bb")
	for _, c := range regexCases {
		f.Add([]byte(c.expr), "Hello, world! 123 aaa\n")
	}
	f.Fuzz(func(t *testing.T, seed []byte, s string) {
		if len(seed) > 64 || len(s) > 100 {
			return
		}
		if p, err := compileRegex(string(seed), "fuzz"); err == nil {
			p.budget = budget{floor: 20 * time.Millisecond}
			p.appendMatches(nil, s)
		}
		next := func(n int) int {
			if len(seed) == 0 {
				return 0
			}
			b := seed[0]
			seed = seed[1:]
			return int(b) % n
		}
		checkRandomPattern(t, randomPattern(next, 2), s)
	})
}

// TestRegexBacktrackingBounded checks that a pattern that backtracks
// catastrophically, in a Replace normalizer, a Split pre-tokenizer or a
// Replace decoder, either runs on Go's regexp, in linear time, or fails
// with an error that names the file, the field and the budget — not a hang.
func TestRegexBacktrackingBounded(t *testing.T) {
	const file = `{
		"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "!": 2, "x": 3, "\n": 4}, "merges": []},
		"normalizer": {"type": "Sequence", "normalizers": [
			{"type": "Prepend", "prepend": "x"},
			{"type": "Replace", "pattern": {"String": "?"}, "content": "!"},
			{"type": "Replace", "pattern": {"Regex": "(a+)+$"}, "content": "b"}
		]},
		"pre_tokenizer": {"type": "Sequence", "pretokenizers": [
			{"type": "Split", "pattern": {"Regex": "(a+)+(?=b)"}, "behavior": "Isolated"}
		]},
		"decoder": {"type": "Sequence", "decoders": [
			{"type": "Fuse"},
			{"type": "Replace", "pattern": {"Regex": "(a+)+(?=b)"}, "content": "b"}
		]}
	}`
	tok, err := Parse("hostile.json", []byte(file), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Short budgets keep the test short; the errors are the same.
	short := budget{floor: 20 * time.Millisecond}
	normalizers := tok.normalizer.(normalizerSeq)
	norm := normalizers[2].(replace)
	if norm.pattern.linear == nil {
		t.Fatal("(a+)+$ does not run on Go's regexp")
	}
	norm.pattern.budget = short
	normalizers[2] = norm
	split := tok.pre.(*splitPre)
	if split.pattern.linear != nil {
		t.Fatal("(a+)+(?=b) runs on Go's regexp")
	}
	split.pattern.budget = short
	decoders := tok.decoder.(decoderSeq)
	dec := decoders[1].(replaceDecoder)
	dec.pattern.budget = short
	decoders[1] = dec

	a60 := strings.Repeat("a", 60)
	for _, c := range []struct{ in, want, err string }{
		// On Go's regexp, at once.
		{a60 + "!", "x" + a60 + "!", ""},
		{a60, "xb", ""},
		// Ending in "\n", $ is regexp2's: at once if it matches...
		{a60 + "\n", "xb\n", ""},
		// ... and out of its budget if not.
		{a60 + "!\n", "", "tokenizer: hostile.json: normalizer.normalizers[2].pattern.Regex: matching a text of 63 characters exceeded its time budget"},
	} {
		got, err := tok.normalize(c.in)
		if c.err == "" && (got != c.want || err != nil) {
			t.Errorf("normalize(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("normalize(%q) = %q, %v; want error %q", c.in, got, err, c.err)
		}
	}

	// The split, on regexp2, runs out of its budget on "xaaa…a!".
	ids, err := tok.EncodeChecked(a60+"!", EncodeOptions{})
	if err == nil {
		t.Fatalf("EncodeChecked(a…a!) = %v, want an error", ids)
	}
	for _, want := range []string{"tokenizer: hostile.json: pre_tokenizer.pretokenizers[0].pattern.Regex: ", "time budget", "62 characters"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if len(err.Error()) > 300 {
		t.Errorf("error of %d bytes: %.300q…", len(err.Error()), err)
	}
	if got := tok.Encode(a60+"!", EncodeOptions{}); got != nil {
		t.Errorf("Encode(a…a!) = %v, want nil", got)
	}
	if _, err := tok.EncodeBatchChecked([]string{"ab", a60 + "!"}, EncodeOptions{}, 2); err == nil ||
		!strings.Contains(err.Error(), "text 1 of 2: tokenizer: hostile.json: pre_tokenizer.pretokenizers[0]") {
		t.Errorf("EncodeBatchChecked: %v", err)
	}
	if ids, err := tok.EncodeChecked("ab!", EncodeOptions{}); err != nil || len(ids) != 4 {
		t.Errorf("EncodeChecked(ab!) = %v, %v; want 4 ids", ids, err)
	}

	// The decoder: Fuse makes "aaa…a!" of the tokens.
	ids = append(slices.Repeat([]int32{0}, 60), 2)
	if s, err := tok.DecodeChecked(ids, false); err == nil ||
		!strings.Contains(err.Error(), "tokenizer: hostile.json: decoder.decoders[1].pattern.Regex: ") {
		t.Errorf("DecodeChecked = %q, %v; want an error naming decoder.decoders[1]", s, err)
	}
	if s := tok.Decode(ids); s != "" {
		t.Errorf("Decode = %q, want \"\"", s)
	}
}

// The atoms of random patterns: regexp2's syntax, and the same in RE2's,
// its classes written out from the package's tables (Python's regex's),
// since in RE2 \s, \w and \d are ASCII-only and \p{L} is Go's.
var randomAtoms = func() [][2]string {
	class := func(negate bool, names ...string) string {
		var b strings.Builder
		b.WriteString("[")
		if negate {
			b.WriteString("^")
		}
		for _, name := range names {
			r, ok := classRanges(name)
			if !ok {
				panic("no class " + name)
			}
			writeRanges(&b, r)
		}
		b.WriteString("]")
		return b.String()
	}
	return [][2]string{
		{"a", "a"}, {"b", "b"}, {"é", "é"}, {" ", " "}, {`\n`, `\n`}, {".", `[^\n]`},
		{`\s`, class(false, "s")}, {`\S`, class(true, "s")},
		{`\w`, class(false, "w")}, {`\W`, class(true, "w")}, {`\d`, class(false, "d")},
		{`[ab]`, `[ab]`}, {`[^a]`, `[^a]`}, {`[^\s\w]`, class(true, "s", "w")},
		{`\p{L}`, class(false, "L")}, {`\P{L}`, class(true, "L")}, {`\p{Lu}`, class(false, "Lu")},
		// $ and \Z are \z but before a final "\n", where regexp2 matches.
		{"^", "^"}, {"$", `\z`}, {`\A`, `\A`}, {`\z`, `\z`}, {`\Z`, `\z`}, {"(?m:^)", "(?m:^)"}, {"(?m:$)", "(?m:$)"},
	}
}()

var randomQuants = []string{"", "", "*", "+", "?", "*?", "+?", "??", "{2}", "{1,2}", "{0,3}?", "{2,}"}

// randomPattern returns a random pattern in regexp2's syntax and in RE2's,
// its choices made by next(n), a number in [0, n).
func randomPattern(next func(n int) int, depth int) [2]string {
	var b, g strings.Builder
	for range 1 + next(3) {
		if depth > 0 && next(3) == 0 {
			var bs, gs []string
			for k := 0; k == 0 || k < 3 && next(2) == 0; k++ {
				p := randomPattern(next, depth-1)
				bs, gs = append(bs, p[0]), append(gs, p[1])
			}
			b.WriteString("(" + strings.Join(bs, "|") + ")")
			g.WriteString("(" + strings.Join(gs, "|") + ")")
		} else {
			a := randomAtoms[next(len(randomAtoms))]
			b.WriteString(a[0])
			g.WriteString(a[1])
		}
		q := randomQuants[next(len(randomQuants))]
		b.WriteString(q)
		g.WriteString(q)
	}
	return [2]string{b.String(), g.String()}
}

// checkRandomPattern checks that the classes of the regexp2 pattern p[0]
// are the package's, and that, if it runs on Go's regexp, it finds the
// same matches in the texts as p[1] does on Go's
// regexp. (Not regexp2 itself: v2.13.0 misses matches of such patterns, as
// of ((\P{L}{0,3}?\w{2,}))??\w{2,} in "ébb", and finds some late, as of
// (\P{L}{1,2}|\w+[^a][^a]??)*?\d+ in "bb\n 1".) It reports whether p[0]
// runs on Go's regexp.
func checkRandomPattern(t *testing.T, p [2]string, texts ...string) bool {
	t.Helper()
	pat, err := compileRegex(p[0], "random")
	if err == nil && !pat.tables {
		t.Errorf("%q: the classes are Go's, not the package's", p[0])
	}
	if err != nil || pat.linear == nil {
		return false
	}
	want, err := regexp.Compile(p[1])
	if err != nil {
		return false // a repeat of an empty-width assertion, say
	}
	for _, s := range texts {
		if pat.endZ && strings.HasSuffix(s, "\n") {
			continue // regexp2's
		}
		got, err := pat.appendMatches(nil, s)
		if err != nil {
			t.Fatalf("%q on %q: %v", p[0], s, err)
		}
		var wantMatches []match
		for _, m := range want.FindAllStringIndex(s, -1) {
			wantMatches = append(wantMatches, match{m[0], m[1]})
		}
		if !slices.Equal(got, wantMatches) {
			t.Errorf("%q on %q: %v, want %v (%q)", p[0], s, got, wantMatches, p[1])
		}
	}
	return true
}

// TestLinearRegexpRandom checks random patterns of the constructs that run
// on Go's regexp, on random texts.
func TestLinearRegexpRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []string{"a", "b", "é", "É", " ", "\n", "1", "!", "\xff", "\u00a0", "\u0663", "\u1c89", "\u0488", "\U0001171e"}
	linear := 0
	for range 3000 {
		p := randomPattern(r.IntN, 2)
		texts := make([]string, 8)
		for k := range texts {
			var s strings.Builder
			for range r.IntN(10) {
				s.WriteString(alphabet[r.IntN(len(alphabet))])
			}
			texts[k] = s.String()
		}
		if checkRandomPattern(t, p, texts...) {
			linear++
		}
	}
	if linear < 1000 {
		t.Errorf("only %d of 3000 random patterns run on Go's regexp", linear)
	}
}
