package gguf

import (
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/data/tokenizer"
)

// Tiny Llama-shaped models with the real tokenizers (data/assets): the
// vocabulary is the tokenizer's, everything else small.

// llama2Config is a Llama 2-shaped model: SentencePiece vocabulary of
// 32,000, RoPE θ 10⁴, no scaling.
func llama2Config(heads, kv int, tie bool) *checkpoints.Config {
	return &checkpoints.Config{
		Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama",
		HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
		NumAttentionHeads: heads, NumKeyValueHeads: kv, HeadDim: 64 / heads,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 512,
		VocabSize: 32000, TieWordEmbeddings: tie,
		BOSTokenIDs: []int{1}, EOSTokenIDs: []int{2},
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.02,
	}
}

// llama3Config is a Llama 3-shaped model: byte-level vocabulary of
// 128,256, RoPE θ 5·10⁵ with Llama 3.1's scaling, whose 8 frequencies of
// a head of 16 span all three of its bands.
func llama3Config(heads, kv int, tie bool) *checkpoints.Config {
	return &checkpoints.Config{
		Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama",
		HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2,
		NumAttentionHeads: heads, NumKeyValueHeads: kv, HeadDim: 64 / heads,
		RMSNormEps: 1e-5, RopeTheta: 500000, MaxPositionEmbeddings: 512,
		RopeScaling: &checkpoints.RopeScaling{RopeType: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192},
		VocabSize:   128256, TieWordEmbeddings: tie,
		BOSTokenIDs: []int{128000}, EOSTokenIDs: []int{128001},
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.02,
	}
}

// tokenizerFiles are the embedded tokenizer.json and tokenizer_config.json
// of a model of vocab_size n: Llama 3's for 128,256, else Llama 2's.
func tokenizerFiles(t testing.TB, cfg *checkpoints.Config) map[string][]byte {
	t.Helper()
	tok, conf := assets.Llama2Tokenizer, assets.Llama2TokenizerConfig
	if cfg.VocabSize == 128256 {
		tok, conf = assets.Llama3Tokenizer, assets.Llama3TokenizerConfig
	}
	files := map[string][]byte{}
	for name, asset := range map[string]string{tokenizer.FileName: tok, tokenizer.ConfigFileName: conf} {
		b, err := assets.Read(asset)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = b
	}
	return files
}

// saveModel writes a checkpoint of cfg with random weights (seed) and its
// tokenizer into a new folder.
func saveModel(t testing.TB, cfg *checkpoints.Config, seed uint64, dtype checkpoints.DType) string {
	t.Helper()
	dir := t.TempDir()
	if err := checkpoints.Save(dir, cfg, checkpoints.RandomWeights(cfg, seed), checkpoints.SaveOptions{DType: dtype, Files: tokenizerFiles(t, cfg)}); err != nil {
		t.Fatal(err)
	}
	return dir
}
