package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"golang.org/x/text/unicode/norm"

	"github.com/memtrain/memtrain/data/assets"
)

// testdata/qwen2 is a tokenizer in the form of Qwen2's, Qwen2.5's and
// Qwen3's tokenizer.json, written by its gen.py: NFC, a Split on Qwen's
// pattern (numbers one digit at a time, unlike Llama 3's three), ByteLevel
// without its regex, byte-level BPE with a vocabulary learned on the
// corpora, and Qwen's special tokens. golden.jsonl holds the ids of its
// reference encoding: Python's regex for the Split, then BPE by rank.

func qwen2(tb testing.TB) *Tokenizer {
	tb.Helper()
	tok, err := Load("testdata/qwen2")
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// TestQwen2Pattern checks that Qwen's Split is the general regex
// pre-tokenizer, on regexp2 with the package's classes, not Llama 3's
// hand-written one.
func TestQwen2Pattern(t *testing.T) {
	tok := qwen2(t)
	split, ok := tok.pre.(*splitPre)
	if !ok {
		t.Fatalf("pre-tokenizer %T, want the Split alone (ByteLevel without regex splits nothing)", tok.pre)
	}
	if p := split.pattern; p.llama3 || p.re == nil || !p.tables || split.behavior != splitIsolated {
		t.Errorf("Split: llama3 %v, regexp2 %v, the package's classes %v, behavior %v; want regexp2 with the package's classes, Isolated",
			p.llama3, p.re != nil, p.tables, split.behavior)
	}
	if fam := tok.Family(); fam != "bpe/byte-level" {
		t.Errorf("Family() = %q, want bpe/byte-level", fam)
	}
	if id, ok := tok.EOS(); !ok || tok.tokens[id] != "<|im_end|>" {
		t.Errorf("EOS() = %d, %v; want <|im_end|>", id, ok)
	}
	if id, ok := tok.BOS(); ok {
		t.Errorf("BOS() = %d, want none (bos_token null)", id)
	}
}

// TestQwen2Golden checks the ids of the reference encoding and that they
// decode to the text, in NFC.
func TestQwen2Golden(t *testing.T) {
	tok := qwen2(t)
	data, err := os.ReadFile("testdata/qwen2/golden.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range bytes.Lines(data) {
		var c struct {
			Text string  `json:"text"`
			IDs  []int32 `json:"ids"`
		}
		if err := json.Unmarshal(line, &c); err != nil {
			t.Fatal(err)
		}
		n++
		ids, err := tok.EncodeChecked(c.Text, EncodeOptions{})
		if err != nil {
			t.Fatalf("%.60q: %v", c.Text, err)
		}
		if !slices.Equal(ids, c.IDs) && !(len(ids) == 0 && len(c.IDs) == 0) {
			t.Errorf("Encode(%.60q)\n = %v\nwant %v (reference)", c.Text, ids, c.IDs)
		}
		if got, want := tok.Decode(ids), norm.NFC.String(c.Text); got != want {
			t.Errorf("Decode(Encode(%.60q)) = %.60q, want the text in NFC", c.Text, got)
		}
	}
	if n < 20 {
		t.Fatalf("%d golden texts", n)
	}
}

// TestQwen2RoundTrip checks decode(encode(x)) = x, x in NFC, over a
// deterministic sample of the corpora: every eighth paragraph of Austen and
// the State of the Union addresses.
func TestQwen2RoundTrip(t *testing.T) {
	tok := qwen2(t)
	var texts []string
	for i, s := range austen(t) {
		if i%8 == 0 {
			texts = append(texts, s)
		}
	}
	sotu, err := assets.Read(assets.SOTU)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(sotu))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		texts = append(texts, rec.Text)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	ids, err := tok.EncodeBatchChecked(texts, EncodeOptions{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	fails, bytesIn, tokens := 0, 0, 0
	for i, text := range texts {
		bytesIn += len(text)
		tokens += len(ids[i])
		if got, want := tok.Decode(ids[i]), norm.NFC.String(text); got != want {
			t.Errorf("text %d: Decode(Encode(%.40q)) = %.40q", i, text, got)
			if fails++; fails > 5 {
				break
			}
		}
	}
	t.Logf("%d texts, %d bytes, %d tokens", len(texts), bytesIn, tokens)
}
