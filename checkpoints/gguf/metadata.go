package gguf

import (
	"fmt"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
)

// Arch is the GGUF architecture of a Llama checkpoint, general.architecture.
const Arch = "llama"

// fileTypes are general.file_type, llama.cpp's llama_ftype, by the type of
// the matrices: the types Export writes.
var fileTypes = map[TensorType]uint32{
	F32:  0,  // LLAMA_FTYPE_ALL_F32
	F16:  1,  // LLAMA_FTYPE_MOSTLY_F16
	Q8_0: 7,  // LLAMA_FTYPE_MOSTLY_Q8_0
	BF16: 32, // LLAMA_FTYPE_MOSTLY_BF16
}

func fileType(t TensorType) (uint32, error) {
	if ft, ok := fileTypes[t]; ok {
		return ft, nil
	}
	return 0, fmt.Errorf("gguf: cannot write weights as %s (want F32, F16, BF16 or Q8_0)", t)
}

// quantizationVersion is general.quantization_version: ggml's
// GGML_QNT_VERSION, the layout of its quantized blocks.
const quantizationVersion = 2

// Metadata is the llama architecture's metadata of a model of configuration
// cfg, as llama.cpp's converter writes it: general.* (name, file type,
// quantization version) and llama.* (vocabulary size, context length,
// embedding length, blocks, feed-forward length, heads, KV heads, key and
// value length, RoPE dimension count and base, the RMS norm epsilon).
// Llama 3's rope scaling is not metadata: it is the rope_freqs.weight
// tensor (RopeFactors).
func Metadata(cfg *checkpoints.Config, name string, t TensorType) ([]KV, error) {
	ft, err := fileType(t)
	if err != nil {
		return nil, err
	}
	hd := uint32(cfg.HeadDimension())
	return []KV{
		{"general.architecture", Arch},
		{"general.name", name},
		{"general.file_type", ft},
		{"general.quantization_version", uint32(quantizationVersion)},
		{"general.alignment", uint32(Alignment)},
		{Arch + ".vocab_size", uint32(cfg.VocabSize)},
		{Arch + ".context_length", uint32(cfg.MaxPositionEmbeddings)},
		{Arch + ".embedding_length", uint32(cfg.HiddenSize)},
		{Arch + ".block_count", uint32(cfg.NumHiddenLayers)},
		{Arch + ".feed_forward_length", uint32(cfg.IntermediateSize)},
		{Arch + ".attention.head_count", uint32(cfg.NumAttentionHeads)},
		{Arch + ".attention.head_count_kv", uint32(cfg.NumKeyValueHeads)},
		{Arch + ".attention.key_length", hd},
		{Arch + ".attention.value_length", hd},
		{Arch + ".rope.dimension_count", hd},
		{Arch + ".rope.freq_base", float32(cfg.RopeTheta)},
		{Arch + ".attention.layer_norm_rms_epsilon", float32(cfg.RMSNormEps)},
	}, nil
}

// RopeFactorsName is the tensor of Llama 3's rope scaling.
const RopeFactorsName = "rope_freqs.weight"

// RopeFactors are the rope_freqs.weight tensor of a `llama3` rope
// scaling, nil without one: for each of the head's D/2 frequencies the
// divisor llama.cpp applies to it (1 for short wavelengths, the factor
// for long ones, interpolated between), as llama.cpp's converter computes
// them, so that 1/θ^(2j/D) divided by factor j is transformers'
// _compute_llama3_parameters' frequency — what engine/llama's InvFreq
// computes. (The converter reads original_max_position_embeddings from the
// config's top level, defaulting to 8192, where transformers reads
// rope_scaling's; this takes rope_scaling's, as the model is trained with
// it: the two agree on every Llama 3.1 and 3.2 config.)
func RopeFactors(cfg *checkpoints.Config) []float32 {
	rs := cfg.RopeScaling
	if rs == nil {
		return nil
	}
	d := cfg.HeadDimension()
	orig := float64(rs.OriginalMaxPositionEmbeddings)
	lowWavelen := orig / rs.LowFreqFactor
	highWavelen := orig / rs.HighFreqFactor
	out := make([]float32, d/2)
	for j := range out {
		freq := 1 / math.Pow(cfg.RopeTheta, float64(2*j)/float64(d))
		wavelen := 2 * math.Pi / freq
		switch {
		case wavelen < highWavelen:
			out[j] = 1
		case wavelen > lowWavelen:
			out[j] = float32(rs.Factor)
		default:
			smooth := (orig/wavelen - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
			out[j] = float32(1 / ((1-smooth)/rs.Factor + smooth))
		}
	}
	return out
}
