package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// TestHFConfigs checks small tokenizers that use the parts of the format
// beyond the Llama families (ByteLevel with its regex and prefix space,
// Metaspace, Split behaviors, Strip and Replace, added tokens with lstrip,
// rstrip, single_word and normalized, continuing-subword prefix and
// end-of-word suffix, ignore_merges, Bert and Roberta processing) against
// HF tokenizers' results, made by testdata/hf/gen.js.
func TestHFConfigs(t *testing.T) {
	data, err := os.ReadFile("testdata/hf/configs.json")
	if err != nil {
		t.Fatal(err)
	}
	var configs []struct {
		Name      string          `json:"name"`
		Tokenizer json.RawMessage `json:"tokenizer"`
		Cases     []struct {
			Text               string  `json:"text"`
			IDs                []int32 `json:"ids"`
			IDsWithSpecial     []int32 `json:"ids_with_special"`
			Decoded            string  `json:"decoded"`
			DecodedSkipSpecial string  `json:"decoded_skip_special"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &configs); err != nil {
		t.Fatal(err)
	}
	for _, c := range configs {
		t.Run(c.Name, func(t *testing.T) {
			tok, err := Parse(c.Name, c.Tokenizer, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range c.Cases {
				if got := tok.Encode(k.Text, EncodeOptions{}); !slices.Equal(got, k.IDs) {
					t.Errorf("Encode(%q) = %v, want %v", k.Text, got, k.IDs)
				}
				if got := tok.Encode(k.Text, EncodeOptions{AddSpecial: true}); !slices.Equal(got, k.IDsWithSpecial) {
					t.Errorf("Encode(%q, AddSpecial) = %v, want %v", k.Text, got, k.IDsWithSpecial)
				}
				if got := tok.Decode(k.IDs); got != k.Decoded {
					t.Errorf("Decode(%v) = %q, want %q", k.IDs, got, k.Decoded)
				}
				if got := tok.DecodeSkipSpecial(k.IDsWithSpecial); got != k.DecodedSkipSpecial {
					t.Errorf("DecodeSkipSpecial(%v) = %q, want %q", k.IDsWithSpecial, got, k.DecodedSkipSpecial)
				}
			}
		})
	}
}
