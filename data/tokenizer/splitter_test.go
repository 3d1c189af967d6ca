package tokenizer

import (
	"slices"
	"strings"
	"sync"
	"testing"
)

// The reference for the hand-written Llama 3 splitter is the same pattern
// run by regexp2, a backtracking engine like HF's Oniguruma and Python's
// regex, with the package's classes (compileRegex): \s is Unicode
// White_Space, \p{L} and \p{N} are Python's regex's tables (Unicode 17),
// and (?i) uses Unicode simple case folding, so that 's also matches 'ſ
// (U+017F), as in Oniguruma and Python's regex.
var (
	refOnce sync.Once
	refRe   pattern
	refErr  error
)

// refSplit splits s with regexp2. Each invalid UTF-8 byte is one U+FFFD rune
// for regexp2, and the pieces are cut from s at the runes' byte offsets, so
// that they keep the original bytes. Text between matches (there should be
// none) is a piece of its own, as with HF's Split(Isolated).
func refSplit(tb testing.TB, s string) []string {
	tb.Helper()
	refOnce.Do(func() { refRe, refErr = compileRegex(llama3Pattern, "llama3") })
	if refErr != nil || !refRe.tables {
		tb.Fatalf("compileRegex(Llama 3's pattern): %v; the package's classes %v", refErr, refRe.tables)
	}
	ms, err := refRe.regexpMatches(nil, s)
	if err != nil {
		tb.Fatalf("regexp2 on %q: %v", s, err)
	}
	var pieces []string
	last := 0
	for _, m := range ms {
		if m.start > last {
			pieces = append(pieces, s[last:m.start])
		}
		if m.end > m.start {
			pieces = append(pieces, s[m.start:m.end])
		}
		last = m.end
	}
	if last < len(s) {
		pieces = append(pieces, s[last:])
	}
	return pieces
}

// llama3Split appends to dst the pieces of s under the Llama 3 pattern, as
// the Split pre-tokenizer does.
func llama3Split(dst []string, s string) []string {
	for i := 0; i < len(s); {
		j := llama3Next(s, i)
		dst = append(dst, s[i:j])
		i = j
	}
	return dst
}

// trickySplits are strings with the pieces that HF tokenizers 0.23.2 (the
// Rust library with Oniguruma, through its Node binding) gives for them with
// the Llama 3 pre-tokenizer.
var trickySplits = []struct {
	text   string
	pieces []string
}{
	{"", []string{}},
	{" ", []string{" "}},
	{"  ", []string{"  "}},
	{"a", []string{"a"}},
	{"'s", []string{"'s"}},
	{"'S", []string{"'S"}},
	{"'\u017f", []string{"'\u017f"}},
	{"'\u017ft", []string{"'\u017f", "t"}},
	{"'ll", []string{"'ll"}},
	{"'LL", []string{"'LL"}},
	{"'lL", []string{"'lL"}},
	{"'l", []string{"'l"}},
	{"'re", []string{"'re"}},
	{"'rE", []string{"'rE"}},
	{"'r", []string{"'r"}},
	{"'ve", []string{"'ve"}},
	{"'v", []string{"'v"}},
	{"x'sy", []string{"x", "'s", "y"}},
	{"don't", []string{"don", "'t"}},
	{"I'M", []string{"I", "'M"}},
	{"'d'd", []string{"'d", "'d"}},
	{"''s", []string{"''", "s"}},
	{"' s", []string{"'", " s"}},
	{" 's", []string{" '", "s"}},
	{"\n", []string{"\n"}},
	{"\r\n", []string{"\r\n"}},
	{"\n\n  x", []string{"\n\n", " ", " x"}},
	{"  \n  ", []string{"  \n", "  "}},
	{"a \n b", []string{"a", " \n", " b"}},
	{"  a", []string{" ", " a"}},
	{"   ", []string{"   "}},
	{"\t\tx", []string{"\t", "\tx"}},
	{"x  ", []string{"x", "  "}},
	{"x   y", []string{"x", "  ", " y"}},
	{"x \t y", []string{"x", " \t", " y"}},
	{"123456", []string{"123", "456"}},
	{"1234 567", []string{"123", "4", " ", "567"}},
	{"\u0661\u0662\u0663\u0664\u0665", []string{"\u0661\u0662\u0663", "\u0664\u0665"}},
	{"\u00b2\u00b3\u2074", []string{"\u00b2\u00b3\u2074"}},
	{"\u216b\u216b\u216b\u216b", []string{"\u216b\u216b\u216b", "\u216b"}},
	{"\u00bd\u00be", []string{"\u00bd\u00be"}},
	{"a1b2", []string{"a", "1", "b", "2"}},
	{"$100", []string{"$", "100"}},
	{" $", []string{" $"}},
	{" !!!\n\n", []string{" !!!\n\n"}},
	{"!!!\r\r\nx", []string{"!!!\r\r\n", "x"}},
	{" \u00a0x", []string{" ", "\u00a0x"}},
	{"\u00a0\u00a0", []string{"\u00a0\u00a0"}},
	{"\u3000x", []string{"\u3000x"}},
	{"a\u2028b", []string{"a", "\u2028b"}},
	{"a\u0085b", []string{"a", "\u0085b"}},
	{"x\u200by", []string{"x", "\u200by"}},
	{"\ufeffx", []string{"\ufeffx"}},
	{"\u00e9", []string{"\u00e9"}},
	{"e\u0301", []string{"e", "\u0301"}},
	{"ab\u0301c", []string{"ab", "\u0301c"}},
	{" \u0301x", []string{" \u0301", "x"}},
	{"\U0001f44d\U0001f3fd ok", []string{"\U0001f44d\U0001f3fd", " ok"}},
	{"\u65e5\u672c\u8a9e\u3067\u3059", []string{"\u65e5\u672c\u8a9e\u3067\u3059"}},
	{"\ud55c\uad6d\uc5b4", []string{"\ud55c\uad6d\uc5b4"}},
	{"\u01c4emal \u01c5", []string{"\u01c4emal", " \u01c5"}},
	{"\u02b0a", []string{"\u02b0a"}},
	{"a_b", []string{"a", "_b"}},
	{"__init__", []string{"__", "init", "__"}},
	{"  // comment\n\tx := 1", []string{" ", " //", " comment", "\n", "\tx", " :=", " ", "1"}},
	{"\"quoted\"", []string{"\"quoted", "\""}},
	{"...", []string{"..."}},
	{" ...\n", []string{" ...\n"}},
	{"x\r", []string{"x", "\r"}},
	{"\r", []string{"\r"}},
	{" \r\n \r\n ", []string{" \r\n \r\n", " "}},
	{"a\n\n\nb", []string{"a", "\n\n\n", "b"}},
	{"\n \n", []string{"\n \n"}},
	{"  \u3000  ", []string{"  \u3000  "}},
	{"A.B", []string{"A", ".B"}},
	{"'", []string{"'"}},
	{"'1", []string{"'", "1"}},
	{"'\n", []string{"'\n"}},
	{"'''", []string{"'''"}},
	{"' '", []string{"'", " '"}},
	{"\t", []string{"\t"}},
	{"\v\f", []string{"\v\f"}},
	{"\x1cx\x1d", []string{"\x1cx", "\x1d"}},
	{" \u00ad", []string{" \u00ad"}},
	{"\u16801", []string{"\u1680", "1"}},
	{"\u061f?", []string{"\u061f?"}},
	{"\u0660a", []string{"\u0660", "a"}},
	{"\U0001f600\U0001f600", []string{"\U0001f600\U0001f600"}},
	{"\ufb01", []string{"\ufb01"}},
	{"\u0149", []string{"\u0149"}},
	{"'\u00df", []string{"'\u00df"}},
	{"'K", []string{"'K"}},
	{"'K", []string{"'K"}},
}

// trickyInvalid are strings that are not valid UTF-8, which HF cannot take.
var trickyInvalid = []string{
	"\x80", "a\xffb", "\xe2\x82", "\xe2\x82x", " \xff", "'\xff", "'\xffs", "\xff's", " \xff\xfe\n",
	"abc\xc3", "\xc3\xa9\xc3", "1\xff2", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a \xff",
}

func TestSplitterHF(t *testing.T) {
	for _, tc := range trickySplits {
		got := llama3Split(nil, tc.text)
		if !slices.Equal(got, tc.pieces) && !(len(got) == 0 && len(tc.pieces) == 0) {
			t.Errorf("llama3Split(%+q) = %+q, want %+q (HF)", tc.text, got, tc.pieces)
		}
	}
}

// checkSplitter compares the hand-written splitter with regexp2 on s and
// checks that its pieces cover s.
func checkSplitter(t *testing.T, s string) bool {
	t.Helper()
	got := llama3Split(nil, s)
	want := refSplit(t, s)
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Errorf("llama3Split(%+q) = %+q, regexp2 gives %+q", s, got, want)
		return false
	}
	if strings.Join(got, "") != s {
		t.Errorf("llama3Split(%+q) = %+q, which does not join to the text", s, got)
		return false
	}
	return true
}

func TestSplitterRegexp2(t *testing.T) {
	t.Run("tricky", func(t *testing.T) {
		for _, tc := range trickySplits {
			checkSplitter(t, tc.text)
		}
		for _, s := range trickyInvalid {
			checkSplitter(t, s)
		}
	})
	t.Run("golden", func(t *testing.T) {
		for _, file := range []string{"testdata/llama2.jsonl", "testdata/llama3.jsonl"} {
			for _, c := range readGolden(t, file) {
				if !checkSplitter(t, c.Text) {
					t.Errorf("in golden case %s", c.Name)
				}
			}
		}
	})
	t.Run("austen", func(t *testing.T) {
		if testing.Short() {
			t.Skip("short")
		}
		fails := 0
		for _, s := range austen(t) {
			if !checkSplitter(t, s) {
				if fails++; fails > 10 {
					t.Fatal("too many failures")
				}
			}
		}
	})
	t.Run("alphabet", func(t *testing.T) {
		// Every pair of characters from a small alphabet of all the classes.
		alphabet := []string{"a", "Z", "ſ", "s", "S", "t", "l", "L", "r", "e", "'", "1", "٣", "Ⅻ", " ", "  ", "\t",
			"\n", "\r", "\u00a0", "\u2028", "\u0301", "!", ".", "😀", "\xff", "\xe2\x82"}
		for _, a := range alphabet {
			for _, b := range alphabet {
				for _, c := range alphabet {
					checkSplitter(t, a+b+c)
				}
			}
		}
	})
}

func FuzzSplitter(f *testing.F) {
	for _, tc := range trickySplits {
		f.Add(tc.text)
	}
	for _, s := range trickyInvalid {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkSplitter(t, s)
	})
}
