package tokenizer

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/memtrain/memtrain/data/assets"
)

// tinyCases are the results of HF tokenizers 0.23.2 with testdata/tiny:
// encode(text, add_special_tokens=True), decode(ids) and
// decode(ids, skip_special_tokens=True).
var tinyCases = []struct {
	text       string
	ids        []int32
	decoded    string
	decodeSkip string
}{
	{"hello world", []int32{1, 20, 25}, "<s> hello world", "hello world"},
	{"hello!\n", []int32{1, 20, 4, 3}, "<s> hello!\n", "hello!\n"},
	{"hello?", []int32{1, 20, 0}, "<s> hello<unk>", "hello"},
	{"xyz", []int32{1, 5, 0}, "<s> <unk>", ""},
	{"Hello <s> world</s>", []int32{1, 5, 0, 17, 19, 5, 1, 5, 25, 2}, "<s> <unk>ello <s>  world</s>", "ello   world"},
	{"", []int32{1}, "<s>", ""},
	{" ", []int32{1, 5, 5}, "<s>  ", " "},
	{"  hello  ", []int32{1, 5, 5, 20, 5, 5}, "<s>   hello  ", "  hello  "},
	{"wow\n\nhello", []int32{1, 21, 13, 15, 3, 3, 11, 17, 19}, "<s> wow\n\nhello", "wow\n\nhello"},
	{"é", []int32{1, 5, 0}, "<s> <unk>", ""},
}

func loadTiny(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := Load("testdata/tiny")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTiny(t *testing.T) {
	tok := loadTiny(t)
	for _, c := range tinyCases {
		if got := tok.Encode(c.text, EncodeOptions{AddSpecial: true}); !slices.Equal(got, c.ids) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.ids)
		}
		if got := tok.Decode(c.ids); got != c.decoded {
			t.Errorf("Decode(%v) = %q, want %q", c.ids, got, c.decoded)
		}
		if got := tok.DecodeSkipSpecial(c.ids); got != c.decodeSkip {
			t.Errorf("DecodeSkipSpecial(%v) = %q, want %q", c.ids, got, c.decodeSkip)
		}
	}
	// With special-token text as text (HF on a copy without added_tokens).
	// The unknown "<", "s" and ">" fuse into one <unk>.
	for text, want := range map[string][]int32{
		"<s>hello": {5, 0, 11, 17, 19},
		"a<unk>b":  {5, 6, 0, 7},
	} {
		if got := tok.Encode(text, EncodeOptions{SplitSpecial: true}); !slices.Equal(got, want) {
			t.Errorf("Encode(%q, SplitSpecial) = %v, want %v", text, got, want)
		}
	}
	checkInfo(t, tok, 26, "bpe/sentencepiece", 1, 2)
	if id, ok := tok.TokenID("▁world"); !ok || id != 25 {
		t.Errorf("TokenID(▁world) = %d, %v", id, ok)
	}
	if s, ok := tok.Token(25); !ok || s != "▁world" {
		t.Errorf("Token(25) = %q, %v", s, ok)
	}
	if _, ok := tok.Token(26); ok {
		t.Errorf("Token(26) is defined")
	}
	if _, ok := tok.TokenID("nope"); ok {
		t.Errorf("TokenID(nope) is defined")
	}

	// Loading the file itself finds the config beside it too.
	tok2, err := Load("testdata/tiny/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("testdata/tiny/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if tok2.Hash() != tok.Hash() || tok.Hash() != sha256Hex(data) {
		t.Errorf("Hash = %s and %s, want %s", tok.Hash(), tok2.Hash(), sha256Hex(data))
	}
}

func TestNoConfig(t *testing.T) {
	data, err := os.ReadFile("testdata/tiny/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), data, 0o666); err != nil {
		t.Fatal(err)
	}
	tok, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	// BOS from the template, EOS from the well-known names.
	checkInfo(t, tok, 26, "bpe/sentencepiece", 1, 2)
}

func checkInfo(t *testing.T, tok *Tokenizer, vocabSize int, family string, bos, eos int32) {
	t.Helper()
	if got := tok.VocabSize(); got != vocabSize {
		t.Errorf("VocabSize = %d, want %d", got, vocabSize)
	}
	if got := tok.Family(); got != family {
		t.Errorf("Family = %q, want %q", got, family)
	}
	if id, ok := tok.BOS(); !ok || id != bos {
		t.Errorf("BOS = %d, %v, want %d", id, ok, bos)
	}
	if id, ok := tok.EOS(); !ok || id != eos {
		t.Errorf("EOS = %d, %v, want %d", id, ok, eos)
	}
}

func TestLlamaInfo(t *testing.T) {
	checkInfo(t, llama2(t), 32000, "bpe/sentencepiece", 1, 2)
	checkInfo(t, llama3(t), 128256, "bpe/byte-level", 128000, 128001)
	for _, c := range []struct {
		tok  *Tokenizer
		name string
		hash string
	}{
		{llama2(t), assets.Llama2Tokenizer, "621d3245ba5e0ed5d5e9537e3f88b4c41490f4a1764cb9c62fc8ccdf79245b0b"},
		{llama3(t), assets.Llama3Tokenizer, "e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7"},
	} {
		if got := c.tok.Hash(); got != c.hash {
			t.Errorf("%s: Hash = %s, want %s", c.name, got, c.hash)
		}
	}
	l3 := llama3(t)
	for tok, id := range map[string]int32{"<|eot_id|>": 128009, "Ġthe": 279, "<|reserved_special_token_250|>": 128255} {
		if got, ok := l3.TokenID(tok); !ok || got != id {
			t.Errorf("TokenID(%q) = %d, %v, want %d", tok, got, ok, id)
		}
		if got, ok := l3.Token(id); !ok || got != tok {
			t.Errorf("Token(%d) = %q, %v, want %q", id, got, ok, tok)
		}
	}
	if got := l3.DecodeSkipSpecial([]int32{128000, 9906, 128009}); got != "Hello" {
		t.Errorf("DecodeSkipSpecial = %q, want Hello", got)
	}
}

// TestRoundTripAusten checks Decode(Encode(text)) == text on the whole
// Austen corpus. It holds for Llama 3 (byte-level BPE is lossless) and, as
// Austen has no "▁" nor special-token text, for Llama 2 too.
func TestRoundTripAusten(t *testing.T) {
	texts := austen(t)
	for _, c := range []struct {
		name string
		tok  *Tokenizer
	}{{"llama2", llama2(t)}, {"llama3", llama3(t)}} {
		ids := c.tok.EncodeBatch(texts, EncodeOptions{}, 0)
		fails := 0
		for i, text := range texts {
			if got := c.tok.Decode(ids[i]); got != text {
				t.Errorf("%s: paragraph %d: Decode(Encode(%.40q)) = %.40q", c.name, i, text, got)
				if fails++; fails > 5 {
					break
				}
			}
		}
	}
}

// TestRoundTripLlama2 checks where SentencePiece-style BPE is lossless:
// valid UTF-8 without "▁" (which decodes as a space), with special-token
// text encoded as text. With special tokens matched, each piece between
// them gets its own "▁" prefix, which decodes as an extra space.
func TestRoundTripLlama2(t *testing.T) {
	tok := llama2(t)
	for _, c := range readGolden(t, "testdata/llama2.jsonl") {
		if strings.Contains(c.Text, "▁") {
			continue
		}
		if got := tok.Decode(tok.Encode(c.Text, EncodeOptions{SplitSpecial: true})); got != c.Text {
			t.Errorf("%s: Decode(Encode(%.40q, SplitSpecial)) = %.40q", c.Name, c.Text, got)
		}
	}
}

func TestEncodeBatch(t *testing.T) {
	tok := llama3(t)
	texts := austen(t)[:300]
	texts = append(texts, "", "<|eot_id|>", "a\xffb")
	want := make([][]int32, len(texts))
	for i, s := range texts {
		want[i] = tok.Encode(s, EncodeOptions{AddSpecial: true})
	}
	for _, threads := range []int{0, 1, 2, 3, 16, 1000} {
		got := tok.EncodeBatch(texts, EncodeOptions{AddSpecial: true}, threads)
		if len(got) != len(want) {
			t.Fatalf("threads=%d: %d results, want %d", threads, len(got), len(want))
		}
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("threads=%d: text %d: %v, want %v", threads, i, clipIDs(got[i]), clipIDs(want[i]))
			}
		}
	}
	if got := tok.EncodeBatch(nil, EncodeOptions{}, 4); len(got) != 0 {
		t.Errorf("EncodeBatch(nil) = %v", got)
	}
}

func TestDecodeUnknownIDs(t *testing.T) {
	for _, tok := range []*Tokenizer{llama2(t), llama3(t), loadTiny(t)} {
		hello := tok.Encode("hello", EncodeOptions{})
		want := tok.Decode(hello)
		ids := append([]int32{-1, int32(tok.VocabSize()), 1 << 30, -1 << 31}, hello...)
		ids = append(ids, 1<<31-1)
		if got := tok.Decode(ids); got != want {
			t.Errorf("%s: Decode with unknown ids = %q, want %q", tok.Family(), got, want)
		}
		if got := tok.DecodeSkipSpecial(ids); got != want {
			t.Errorf("%s: DecodeSkipSpecial with unknown ids = %q, want %q", tok.Family(), got, want)
		}
	}
}

var invalidUTF8 = []string{"\xff", "a\xffb", "\xe2\x82", "hello \xe2\x82 world", "\xed\xa0\x80", "<|eot_id|>\xc3", "\xc3\xa9\xc3", "\x80\x80\x80", "'\xffs"}

func TestInvalidUTF8(t *testing.T) {
	l3 := llama3(t)
	for _, s := range invalidUTF8 {
		// Byte-level BPE keeps the bytes.
		ids := l3.Encode(s, EncodeOptions{SplitSpecial: true})
		var b []byte
		for _, id := range ids {
			tok, ok := l3.Token(id)
			if !ok {
				t.Fatalf("Encode(%q) gave unknown id %d", s, id)
			}
			b = appendByteLevelDecoded(b, tok)
		}
		if string(b) != s {
			t.Errorf("Llama 3: the tokens of %q are the bytes %q", s, b)
		}
		if got, want := l3.Decode(ids), string(appendLossy(nil, []byte(s))); got != want {
			t.Errorf("Llama 3: Decode(Encode(%q)) = %q, want %q", s, got, want)
		}
	}

	// Byte fallback encodes each invalid byte as itself; decoding turns
	// each byte of an invalid run into U+FFFD.
	l2 := llama2(t)
	ids := l2.Encode("a\xffb", EncodeOptions{})
	ff, _ := l2.TokenID("<0xFF>")
	if !slices.Contains(ids, ff) {
		t.Errorf("Llama 2: Encode(a\\xffb) = %v, want <0xFF> = %d in it", ids, ff)
	}
	if got := l2.Decode(ids); got != "a\uFFFDb" {
		t.Errorf("Llama 2: Decode(Encode(a\\xffb)) = %q", got)
	}
	if got := l2.Decode(l2.Encode("x\xe2\x82y", EncodeOptions{})); got != "x\uFFFD\uFFFDy" {
		t.Errorf("Llama 2: Decode(Encode(x\\xe2\\x82y)) = %q, want one U+FFFD per byte", got)
	}
}

func TestAppendLossy(t *testing.T) {
	// Rust's String::from_utf8_lossy on these bytes.
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"abc", "abc"},
		{"a\xffb", "a\uFFFDb"},
		{"\xe2\x82", "\uFFFD"},
		{"\xe2\x82\xac", "€"},
		{"\xe2\x82x", "\uFFFDx"},
		{"\xf0\x90\x80", "\uFFFD"},
		{"\xf0\x90\x80\xf0\x90\x80\x80", "\uFFFD𐀀"},
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xe0\x80\x80", "\uFFFD\uFFFD\uFFFD"},
		{"\xe0\xa0", "\uFFFD"},
		{"\xef\xbf\xbd", "\uFFFD"},
		{"\xf8\x88\x80\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD"},
	} {
		if got := string(appendLossy(nil, []byte(c.in))); got != c.want {
			t.Errorf("appendLossy(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestMergeAlgorithms checks that the quadratic merge of short words and the
// priority-queue merge of long ones agree, and that Llama 2's chunked
// encoding agrees with encoding the whole text as one word, as HF does.
func TestMergeAlgorithms(t *testing.T) {
	texts := austen(t)[:1500]
	if testing.Short() {
		texts = texts[:200]
	}
	for _, c := range []struct {
		name string
		tok  *Tokenizer
	}{{"llama2", llama2(t)}, {"llama3", llama3(t)}} {
		m := c.tok.model
		st := c.tok.getState()
		var small, large []int32
		n := 0
		for i, text := range texts {
			var words []string
			if c.tok.pre == nil {
				for _, w := range strings.SplitAfter(text, " ") {
					words = append(words, "▁"+strings.ReplaceAll(w, " ", "▁"))
				}
				if i < 30 {
					words = append(words, "▁"+strings.ReplaceAll(text, " ", "▁"))
				}
			} else {
				words = llama3Split(nil, text)
			}
			for _, w := range words {
				if c.tok.byteLevel {
					w = string(appendByteLevel(nil, w))
				}
				base := m.mergeWord(st, nil, []byte(w))
				small = m.mergeSmall(st, m.initialSymbols(st, []byte(w)))
				small = slices.Clone(small)
				large = m.mergeLarge(st, m.initialSymbols(st, []byte(w)))
				if !slices.Equal(small, large) || !slices.Equal(small, base) {
					t.Fatalf("%s: %q: mergeSmall %v, mergeLarge %v, mergeWord %v", c.name, w, small, large, base)
				}
				n++
			}
		}
		t.Logf("%s: %d words", c.name, n)
	}

	// Chunked and whole-word encoding of Llama 2.
	l2 := llama2(t)
	if l2.model.splitBefore == "" {
		t.Fatal("Llama 2 is not encoded in chunks")
	}
	whole := *l2.model
	whole.splitBefore = ""
	st := l2.getState()
	for i, text := range texts {
		if i >= 300 {
			break
		}
		w := []byte("▁" + strings.ReplaceAll(text, " ", "▁"))
		got := l2.model.encodeWord(st, nil, w)
		want := whole.mergeWord(st, nil, w)
		if !slices.Equal(got, want) {
			t.Fatalf("paragraph %d: chunked %v, whole %v", i, clipIDs(got), clipIDs(want))
		}
	}
}

func TestByteLevelAlphabet(t *testing.T) {
	seen := map[rune]bool{}
	for b := range 256 {
		r := byteLevelRune[b]
		if seen[r] {
			t.Fatalf("byte %#x: rune %U repeated", b, r)
		}
		seen[r] = true
		if byteLevelByte[r] != int16(b) {
			t.Errorf("byte %#x: inverse %d", b, byteLevelByte[r])
		}
		c := byteLevelUTF8[b]
		if string(c.b[:c.n]) != string(r) {
			t.Errorf("byte %#x: UTF-8 %q, want %q", b, c.b[:c.n], string(r))
		}
	}
	if byteLevelRune[' '] != 'Ġ' || byteLevelRune['\n'] != 'Ċ' {
		t.Errorf("space and newline are %q and %q", byteLevelRune[' '], byteLevelRune['\n'])
	}
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	mapped := appendByteLevel(nil, string(all))
	if !utf8.Valid(mapped) {
		t.Fatal("mapped bytes are not UTF-8")
	}
	if back := appendByteLevelDecoded(nil, string(mapped)); !bytes.Equal(back, all) {
		t.Errorf("round trip of all bytes: %q", back)
	}
}
