package tokenizer

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// FuzzParse checks that Parse never panics, that its errors name the file,
// and that a tokenizer it accepts encodes and decodes without panicking.
// The seed corpus in testdata/fuzz/FuzzParse has valid and broken files.
func FuzzParse(f *testing.F) {
	tiny, err := os.ReadFile("testdata/tiny/tokenizer.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tiny)
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := Parse("fuzz.json", data, nil)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "tokenizer: fuzz.json: ") {
				t.Errorf("error %q does not name the file", err)
			}
			return
		}
		exercise(t, tok, string(data[:min(len(data), 200)]))
	})
}

// checkNamesFile checks that an error of encoding or decoding names the
// file of FuzzParse, when there is one.
func checkNamesFile(t *testing.T, err error) {
	t.Helper()
	if err != nil && !strings.HasPrefix(err.Error(), "tokenizer: fuzz.json: ") {
		t.Errorf("error %q does not name the file", err)
	}
}

// exercise runs the methods of tok on a few texts and some ids.
func exercise(t *testing.T, tok *Tokenizer, extra string) {
	texts := []string{"", " ", "hello world", "<s> a</s>", "a\xffb", "héllo  wörld!\n\t42", extra}
	for _, s := range texts {
		for _, opt := range []EncodeOptions{{}, {AddSpecial: true}, {SplitSpecial: true}} {
			ids, err := tok.EncodeChecked(s, opt)
			checkNamesFile(t, err)
			if ids == nil && err == nil {
				t.Errorf("EncodeChecked(%q) = nil, nil", s)
			}
			_, err = tok.DecodeChecked(ids, false)
			checkNamesFile(t, err)
			tok.Decode(ids)
			tok.DecodeSkipSpecial(ids)
		}
	}
	tok.EncodeBatch(texts, EncodeOptions{}, 2)
	n := int32(tok.VocabSize())
	ids := []int32{-1, 0, 1, n - 1, n, n + 1, 1<<31 - 1}
	for id := range min(n, 300) {
		ids = append(ids, id)
	}
	tok.Decode(ids)
	tok.DecodeSkipSpecial(ids)
	for _, id := range ids {
		if s, ok := tok.Token(id); ok {
			if got, ok := tok.TokenID(s); !ok || tok.tokens[got] != s {
				t.Errorf("TokenID(Token(%d) = %q) = %d, %v", id, s, got, ok)
			}
		}
	}
	tok.BOS()
	tok.EOS()
	tok.Family()
}

var (
	fuzzOnce sync.Once
	fuzzToks map[string]*Tokenizer
	fuzzErr  error
)

// fuzzTokenizers returns the small tokenizers of testdata, by name.
func fuzzTokenizers(tb testing.TB) map[string]*Tokenizer {
	tb.Helper()
	fuzzOnce.Do(func() {
		fuzzToks = map[string]*Tokenizer{}
		tok, err := Load("testdata/tiny")
		if err != nil {
			fuzzErr = err
			return
		}
		fuzzToks["tiny"] = tok
		data, err := os.ReadFile("testdata/hf/configs.json")
		if err != nil {
			fuzzErr = err
			return
		}
		var configs []struct {
			Name      string          `json:"name"`
			Tokenizer json.RawMessage `json:"tokenizer"`
		}
		if fuzzErr = json.Unmarshal(data, &configs); fuzzErr != nil {
			return
		}
		for _, c := range configs {
			if fuzzToks[c.Name], fuzzErr = Parse(c.Name, c.Tokenizer, nil); fuzzErr != nil {
				return
			}
		}
	})
	if fuzzErr != nil {
		tb.Fatal(fuzzErr)
	}
	return fuzzToks
}

// FuzzEncode checks that encoding and decoding never panic, and the round
// trips that hold: byte-level BPE keeps every byte, so Llama 3 gives valid
// UTF-8 back unchanged; Llama 2 does too with special-token text as text,
// unless the text has "▁".
func FuzzEncode(f *testing.F) {
	for _, c := range tinyCases {
		f.Add(c.text, false)
	}
	for _, s := range invalidUTF8 {
		f.Add(s, true)
	}
	for _, c := range trickySplits {
		f.Add(c.text, false)
	}
	f.Add("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>", false)
	f.Add("Hello <s> world</s><unk>", true)
	f.Fuzz(func(t *testing.T, s string, splitSpecial bool) {
		opt := EncodeOptions{SplitSpecial: splitSpecial}
		for name, tok := range fuzzTokenizers(t) {
			ids := tok.Encode(s, opt)
			dec := tok.Decode(ids)
			tok.DecodeSkipSpecial(ids)
			if name == "bytelevel-gpt2" && utf8.ValidString(s) && dec != s {
				t.Errorf("%s: Decode(Encode(%q)) = %q", name, s, dec)
			}
		}

		l3 := llama3(t)
		ids := l3.Encode(s, opt)
		var b []byte
		for _, id := range ids {
			tok, ok := l3.Token(id)
			if !ok {
				t.Fatalf("Llama 3: Encode(%q) gave unknown id %d", s, id)
			}
			b = appendByteLevelDecoded(b, tok)
		}
		if string(b) != s {
			t.Errorf("Llama 3: the tokens of %q are the bytes %q", s, b)
		}
		if dec := l3.Decode(ids); utf8.ValidString(s) && dec != s {
			t.Errorf("Llama 3: Decode(Encode(%q)) = %q", s, dec)
		}

		l2 := llama2(t)
		ids = l2.Encode(s, EncodeOptions{SplitSpecial: true})
		if dec := l2.Decode(ids); utf8.ValidString(s) && !strings.Contains(s, "▁") && dec != s {
			t.Errorf("Llama 2: Decode(Encode(%q, SplitSpecial)) = %q", s, dec)
		}
		l2.Decode(l2.Encode(s, opt))
	})
}
