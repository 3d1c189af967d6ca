package checkpoints

import (
	"fmt"
)

// TensorSpec names one weight of a Llama checkpoint and its shape, as
// HuggingFace's LlamaForCausalLM stores it (Linear weights are [out, in]).
type TensorSpec struct {
	Name  string
	Shape []int
	Norm  bool // an RMSNorm weight (initialised to one, excluded from weight decay)
}

// Elements is the product of the shape.
func (t TensorSpec) Elements() int64 {
	n := int64(1)
	for _, d := range t.Shape {
		n *= int64(d)
	}
	return n
}

// LayerTensorName is the HF name of a per-layer weight, e.g.
// LayerTensorName(3, "self_attn.q_proj") = "model.layers.3.self_attn.q_proj.weight".
func LayerTensorName(layer int, module string) string {
	return fmt.Sprintf("model.layers.%d.%s.weight", layer, module)
}

// Names of the weights outside the layers.
const (
	EmbedTokensName = "model.embed_tokens.weight"
	FinalNormName   = "model.norm.weight"
	LMHeadName      = "lm_head.weight"
)

// TensorCount is len(c.TensorSpecs()), counted without naming them: nine
// a layer, the embedding and the final norm, and an untied LM head.
func (c *Config) TensorCount() int {
	n := 9*max(c.NumHiddenLayers, 0) + 2
	if !c.TieWordEmbeddings {
		n++
	}
	return n
}

// TensorSpecs lists every weight the configuration implies, in the order
// HuggingFace's state dict has them. lm_head.weight is absent when the
// embeddings are tied.
func (c *Config) TensorSpecs() []TensorSpec {
	h, i := c.HiddenSize, c.IntermediateSize
	// One allocation of the list: Validate bounds the layers, so this is
	// at most 9·MaxLayers+3 entries.
	specs := make([]TensorSpec, 0, 9*max(c.NumHiddenLayers, 0)+3)
	specs = append(specs, TensorSpec{Name: EmbedTokensName, Shape: []int{c.VocabSize, h}})
	for l := 0; l < c.NumHiddenLayers; l++ {
		specs = append(specs,
			TensorSpec{Name: LayerTensorName(l, "self_attn.q_proj"), Shape: []int{c.QDim(), h}},
			TensorSpec{Name: LayerTensorName(l, "self_attn.k_proj"), Shape: []int{c.KVDim(), h}},
			TensorSpec{Name: LayerTensorName(l, "self_attn.v_proj"), Shape: []int{c.KVDim(), h}},
			TensorSpec{Name: LayerTensorName(l, "self_attn.o_proj"), Shape: []int{h, c.QDim()}},
			TensorSpec{Name: LayerTensorName(l, "mlp.gate_proj"), Shape: []int{i, h}},
			TensorSpec{Name: LayerTensorName(l, "mlp.up_proj"), Shape: []int{i, h}},
			TensorSpec{Name: LayerTensorName(l, "mlp.down_proj"), Shape: []int{h, i}},
			TensorSpec{Name: LayerTensorName(l, "input_layernorm"), Shape: []int{h}, Norm: true},
			TensorSpec{Name: LayerTensorName(l, "post_attention_layernorm"), Shape: []int{h}, Norm: true},
		)
	}
	specs = append(specs, TensorSpec{Name: FinalNormName, Shape: []int{h}, Norm: true})
	if !c.TieWordEmbeddings {
		specs = append(specs, TensorSpec{Name: LMHeadName, Shape: []int{c.VocabSize, h}})
	}
	return specs
}

// ParamCounts are a model's parameter counts.
type ParamCounts struct {
	Total        int64 // every stored weight (the LM head once, or not at all when tied)
	Embedding    int64 // the token embedding, plus the LM head when untied
	NonEmbedding int64 // Total − Embedding
	PerLayer     int64 // one decoder layer
}

// Params counts the model's parameters: the tensors TensorSpecs lists,
// counted from the sizes without listing them, so that Validate can bound
// the count before anything is allocated. Within the size limits
// (MaxHiddenSize and the others) no count overflows.
func (c *Config) Params() ParamCounts {
	h, i := int64(c.HiddenSize), int64(c.IntermediateSize)
	q, kv := int64(c.QDim()), int64(c.KVDim())
	var pc ParamCounts
	pc.PerLayer = 2*q*h + 2*kv*h + 3*i*h + 2*h // q, o; k, v; gate, up, down; two norms
	pc.Embedding = int64(c.VocabSize) * h
	if !c.TieWordEmbeddings {
		pc.Embedding *= 2
	}
	pc.NonEmbedding = int64(c.NumHiddenLayers)*pc.PerLayer + h // the layers and the final norm
	pc.Total = pc.Embedding + pc.NonEmbedding
	return pc
}
