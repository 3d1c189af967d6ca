package checkpoints

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/memtrain/memtrain/internal/choice"
)

// A Preset is a named model shape: the small ones for tests and the demo,
// and the real Llama shapes, which `inspect --preset` can size without any
// weights.
type Preset struct {
	Name        string
	Description string
	config      Config
}

// Config returns a copy of the preset's configuration.
func (p Preset) Config() *Config { return p.config.Clone() }

var llama31Scaling = RopeScaling{RopeType: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192}

func llama3(hidden, inter, layers, heads, kv int, tie bool, scaling RopeScaling) Config {
	return Config{
		Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama",
		HiddenSize: hidden, IntermediateSize: inter, NumHiddenLayers: layers,
		NumAttentionHeads: heads, NumKeyValueHeads: kv, HeadDim: hidden / heads,
		RMSNormEps: 1e-5, RopeTheta: 500000, RopeScaling: &scaling,
		MaxPositionEmbeddings: 131072, VocabSize: 128256, TieWordEmbeddings: tie,
		BOSTokenIDs: []int{128000}, EOSTokenIDs: []int{128001, 128008, 128009},
		TorchDType: "bfloat16", HiddenAct: "silu", InitializerRange: 0.02,
	}
}

func small(hidden, inter, layers, heads, kv int) Config {
	return Config{
		Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama",
		HiddenSize: hidden, IntermediateSize: inter, NumHiddenLayers: layers,
		NumAttentionHeads: heads, NumKeyValueHeads: kv, HeadDim: hidden / heads,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 2048,
		VocabSize: 32000, TieWordEmbeddings: true,
		BOSTokenIDs: []int{1}, EOSTokenIDs: []int{2},
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.02,
	}
}

// family is a real model of another family than Llama's: untied, bf16,
// rope_theta 1e6.
func family(modelType string, hidden, inter, layers, heads, kv, headDim, positions, vocab int, eps float64, bos, eos int) Config {
	f := familyOf(modelType)
	return Config{
		Architectures: []string{f.Architecture}, ModelType: modelType,
		HiddenSize: hidden, IntermediateSize: inter, NumHiddenLayers: layers,
		NumAttentionHeads: heads, NumKeyValueHeads: kv, HeadDim: headDim,
		RMSNormEps: eps, RopeTheta: 1e6, MaxPositionEmbeddings: positions, VocabSize: vocab,
		BOSTokenIDs: []int{bos}, EOSTokenIDs: []int{eos},
		TorchDType: "bfloat16", HiddenAct: "silu", InitializerRange: 0.02,
	}
}

// tinyFamily is the tiny preset's shape in another family: a sliding
// window of 16 keys for Mistral, biases for Qwen2, head norms and a
// head_dim of 64 (twice hidden/heads) for Qwen3.
func tinyFamily(modelType string) Config {
	c := small(128, 384, 4, 4, 2)
	f := familyOf(modelType)
	c.Architectures, c.ModelType = []string{f.Architecture}, modelType
	switch modelType {
	case "mistral":
		c.SlidingWindow = 16
	case "qwen2":
		c.HeadDim = 0 // derived, as Qwen2 derives it
		c.MaxWindowLayers = c.NumHiddenLayers
	case "qwen3":
		c.HeadDim = 64
		c.MaxWindowLayers = c.NumHiddenLayers
	}
	return c
}

func qwen(c Config, window int) Config {
	c.SlidingWindow, c.MaxWindowLayers = window, c.NumHiddenLayers
	return c
}

// presets is read-only after package initialisation.
var presets = []Preset{
	{"tiny", "4 layers, hidden 128, tied embeddings: a few million parameters, for tests and the demo", small(128, 384, 4, 4, 2)},
	{"tiny-mistral", "the tiny shape as Mistral, with a sliding window of 16 keys", tinyFamily("mistral")},
	{"tiny-qwen2", "the tiny shape as Qwen2, with q/k/v biases", tinyFamily("qwen2")},
	{"tiny-qwen3", "the tiny shape as Qwen3, with q/k head norms and head_dim 64", tinyFamily("qwen3")},
	{"small", "6 layers, hidden 384, tied embeddings: about 23M parameters (the CPU benchmark shape)", small(384, 1024, 6, 6, 6)},
	{"peer-tiny", "4 layers, hidden 256, 4 heads, intermediate 688, tied: the shape used to compare with other CPU trainers", small(256, 688, 4, 4, 4)},
	{"llama2-7b", "Llama 2 7B (multi-head attention, 4k context)", Config{
		Architectures: []string{"LlamaForCausalLM"}, ModelType: "llama",
		HiddenSize: 4096, IntermediateSize: 11008, NumHiddenLayers: 32,
		NumAttentionHeads: 32, NumKeyValueHeads: 32, HeadDim: 128,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 4096, VocabSize: 32000,
		BOSTokenIDs: []int{1}, EOSTokenIDs: []int{2}, TorchDType: "float16", HiddenAct: "silu", InitializerRange: 0.02,
	}},
	{"llama3.2-1b", "Llama 3.2 1B (tied embeddings, rope scaling factor 32)", llama3(2048, 8192, 16, 32, 8, true,
		RopeScaling{RopeType: "llama3", Factor: 32, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositionEmbeddings: 8192})},
	{"llama3.1-8b", "Llama 3.1 8B", llama3(4096, 14336, 32, 32, 8, false, llama31Scaling)},
	{"mistral-7b", "Mistral 7B v0.3 (no sliding window, 32k context)", family("mistral", 4096, 14336, 32, 32, 8, 128, 32768, 32768, 1e-5, 1, 2)},
	{"qwen2.5-7b", "Qwen2.5 7B (q/k/v biases, 28 heads sharing 4 KV heads)", qwen(family("qwen2", 3584, 18944, 28, 28, 4, 0, 32768, 152064, 1e-6, 151643, 151645), 131072)},
	{"qwen3-8b", "Qwen3 8B (q/k head norms)", qwen(family("qwen3", 4096, 12288, 36, 32, 8, 128, 40960, 151936, 1e-6, 151643, 151645), 0)},
	{"llama3.1-70b", "Llama 3.1 70B", llama3(8192, 28672, 80, 64, 8, false, llama31Scaling)},
	{"llama3.1-405b", "Llama 3.1 405B", llama3(16384, 53248, 126, 128, 8, false, llama31Scaling)},
}

// Presets lists the presets in order of size.
func Presets() []Preset { return append([]Preset(nil), presets...) }

// LookupPreset returns the named preset.
func LookupPreset(name string) (Preset, error) {
	for _, p := range presets {
		if p.Name == name {
			return p, nil
		}
	}
	known := make([]string, len(presets))
	for i, p := range presets {
		known[i] = p.Name
	}
	return Preset{}, &choice.UnknownError{What: "preset", Name: name, Known: known}
}

// presetNames lists the presets' names, sorted, for messages.
func presetNames() string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// LookupConfig returns the configuration name stands for: when a file or
// folder of that name exists, the config.json of a checkpoint folder or a
// config file (ReadConfig); else the preset of that name.
func LookupConfig(name string) (*Config, error) {
	if _, err := os.Stat(name); err == nil {
		return ReadConfig(name)
	}
	p, err := LookupPreset(name)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %q is no checkpoint folder, config file or preset (presets: %s)", name, presetNames())
	}
	return p.Config(), nil
}
