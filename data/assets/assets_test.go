package assets

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"
)

// The hashes and sizes are those NOTICE.md records for the originals.
func TestAssetsMatchNotice(t *testing.T) {
	for _, tt := range []struct {
		name   string
		size   int
		sha256 string
	}{
		{Llama2Tokenizer, 1156944, "621d3245ba5e0ed5d5e9537e3f88b4c41490f4a1764cb9c62fc8ccdf79245b0b"},
		{Llama2TokenizerConfig, 270, "1a47815c0de47ff85ece7a888f06598178d35008a3408867a9f46d35013d6883"},
		{Llama3Tokenizer, 9085698, "e134af98b985517b4f068e3755ae90d4e9cd2d45d328325dc503f1c6b2d06cc7"},
		{Llama3TokenizerConfig, 50941, "c058e1ff967585f08c1c4dc1577c68a825a482b38bc0b2bff059ab113bf603bf"},
		{Austen, 3887423, "13ec37a73088bae4481de5d1b1510a66e902638307d60d44993b8bd1a749dace"},
		{SOTU, 465603, "7e723ed5c892a740a8e80aceeef96062eaa73a4588ceb9a24194f57a0711e648"},
	} {
		b, err := Read(tt.name)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if len(b) != tt.size || hex.EncodeToString(sum[:]) != tt.sha256 {
			t.Errorf("%s: %d bytes, sha256 %x", tt.name, len(b), sum)
		}
	}
	if _, err := Read("nope.json"); err == nil {
		t.Error("missing asset read without error")
	}
}
