package checkpoints

import (
	"fmt"
)

// TensorSpec names one weight of a checkpoint and its shape, as
// HuggingFace stores it (Linear weights are [out, in]), with what its
// family's declaration (layout.go) says of it: its role and how the grid
// splits it.
type TensorSpec struct {
	Name  string
	Shape []int
	Role  Role
	Split Split
	Layer int // the decoder layer it belongs to, −1 for the model's own tensors
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

// TensorCount is len(c.TensorSpecs()), counted from the declaration
// without naming the tensors.
func (c *Config) TensorCount() int {
	n := 0
	for _, d := range c.declaration() {
		switch {
		case d.layer:
			n += max(c.NumHiddenLayers, 0)
		case d.present(c):
			n++
		}
	}
	return n
}

// TensorSpecs lists every weight the configuration implies, in the order
// HuggingFace's state dict has them, as its family declares them.
// lm_head.weight is absent when the embeddings are tied.
func (c *Config) TensorSpecs() []TensorSpec {
	decls := c.declaration()
	// One allocation of the list: Validate bounds the layers.
	specs := make([]TensorSpec, 0, c.TensorCount())
	for i := 0; i < len(decls); {
		if !decls[i].layer {
			if decls[i].present(c) {
				specs = append(specs, decls[i].spec(c, -1))
			}
			i++
			continue
		}
		// A run of a layer's tensors, repeated for every layer.
		j := i
		for j < len(decls) && decls[j].layer {
			j++
		}
		for l := 0; l < c.NumHiddenLayers; l++ {
			for _, d := range decls[i:j] {
				specs = append(specs, d.spec(c, l))
			}
		}
		i = j
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
// counted from the declaration without listing every layer's, so that Validate can bound
// the count before anything is allocated. Within the size limits
// (MaxHiddenSize and the others) no count overflows.
func (c *Config) Params() ParamCounts {
	var pc ParamCounts
	var model int64 // the non-embedding tensors outside the layers
	for _, d := range c.declaration() {
		n := d.elements(c)
		switch {
		case d.layer:
			pc.PerLayer += n
		case !d.present(c):
		case d.role == RoleEmbedding || d.role == RoleHead:
			pc.Embedding += n
		default:
			model += n
		}
	}
	pc.NonEmbedding = int64(c.NumHiddenLayers)*pc.PerLayer + model
	pc.Total = pc.Embedding + pc.NonEmbedding
	return pc
}
