package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
)

// shipped is the tokenizer the size study uses, which this command made.
const shipped = "../../experiments/specs/llama2-4k"

// TestShippedTokenizer: the shipped llama2-4k is what the command writes
// today (rerunning it changes nothing), it has 4,096 tokens with Llama
// 2's special tokens, and it round-trips the bundled corpora's text.
func TestShippedTokenizer(t *testing.T) {
	out := t.TempDir()
	if err := run(4096, 64, out); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		got, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(shipped, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: the shipped file is not what the command writes: run go run ./scripts/smalltokenizer -vocab 4096 -out experiments/specs/llama2-4k", name)
		}
	}
	tok, _, err := data.OpenTokenizer(shipped)
	if err != nil {
		t.Fatal(err)
	}
	if n := tok.VocabSize(); n != 4096 {
		t.Errorf("vocabulary %d, want 4096", n)
	}
	if bos, ok := tok.BOS(); !ok || bos != 1 {
		t.Errorf("BOS %d %v, want 1", bos, ok)
	}
	if eos, ok := tok.EOS(); !ok || eos != 2 {
		t.Errorf("EOS %d %v, want 2", eos, ok)
	}
	full, _, err := data.OpenTokenizer("builtin:llama2")
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Fellow-Citizens of the Senate and House of Representatives: naïve café — “quoted” 1790, ½ 東京"}
	for _, name := range []string{assets.Austen, assets.SOTU} {
		b, err := assets.Read(name)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.SplitN(b, []byte("\n"), 3) // a paragraph or a speech each
		texts = append(texts, string(lines[0]), string(lines[1]))
	}
	small, large := 0, 0
	for _, text := range texts {
		ids := tok.Encode(text, tokenizer.EncodeOptions{})
		for _, id := range ids {
			if id < 0 || int(id) >= 4096 {
				t.Fatalf("id %d out of the vocabulary", id)
			}
		}
		if got := tok.Decode(ids); got != text {
			t.Errorf("round trip of %.40q… gave %.40q…", text, got)
		}
		small += len(ids)
		large += len(full.Encode(text, tokenizer.EncodeOptions{}))
	}
	// A smaller vocabulary takes more tokens for the same text, not many more.
	if r := float64(small) / float64(large); !(r >= 1 && r <= 1.6) {
		t.Errorf("%d tokens against Llama 2's %d (ratio %.2f), want 1 to 1.6", small, large, r)
	}
}
