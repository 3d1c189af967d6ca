package checkpoints

import (
	"fmt"
	"strings"
)

// A Family is one of the model architectures memtrain computes: Llama's
// decoder, and the few places where another family's block differs from
// it. A family is its config.json's model_type and architecture, its
// variations and its tensors' declaration (layout.go); the engine reads
// the variations from the configuration (Config.QKVBias, QKNorm,
// Window) and never the family's name.
type Family struct {
	// ModelType is config.json's model_type, Architecture the class its
	// architectures list names.
	ModelType, Architecture string
	// QKVBias: q_proj, k_proj and v_proj have biases (Qwen2).
	QKVBias bool
	// QKNorm: q and k are RMS-normalised over each head's head_dim
	// features after the projection and before RoPE (Qwen3).
	QKNorm bool
	// SlidingWindow: the config's sliding_window, when set, limits each
	// query to that many keys, itself included (Mistral).
	SlidingWindow bool
	// tensors is the family's declaration, in the order of HF's state dict.
	tensors []tensorDecl
}

// Families are the families memtrain computes, in the order messages list
// them.
var families = []*Family{
	{ModelType: "llama", Architecture: "LlamaForCausalLM", tensors: llamaTensors},
	{ModelType: "mistral", Architecture: "MistralForCausalLM", SlidingWindow: true, tensors: llamaTensors},
	{ModelType: "qwen2", Architecture: "Qwen2ForCausalLM", QKVBias: true, tensors: qwen2Tensors},
	{ModelType: "qwen3", Architecture: "Qwen3ForCausalLM", QKNorm: true, tensors: qwen3Tensors},
}

// Families lists the families memtrain computes.
func Families() []*Family { return append([]*Family(nil), families...) }

// LookupFamily returns the family of a config.json's model_type.
func LookupFamily(modelType string) (*Family, error) {
	for _, f := range families {
		if f.ModelType == modelType {
			return f, nil
		}
	}
	return nil, fmt.Errorf("unsupported model type %q (want %s)", modelType, familyNames())
}

// familyNames is "llama, mistral, qwen2 or qwen3".
func familyNames() string {
	names := make([]string, len(families))
	for i, f := range families {
		names[i] = f.ModelType
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// familyOf is the family of a model_type the parser accepted; Llama for
// the zero Config (made in code, as tests and presets do).
func familyOf(modelType string) *Family {
	if f, err := LookupFamily(modelType); err == nil {
		return f
	}
	return families[0]
}

// Family is the configuration's family.
func (c *Config) Family() *Family { return familyOf(c.ModelType) }

// QKVBias reports whether q_proj, k_proj and v_proj have biases.
func (c *Config) QKVBias() bool { return c.Family().QKVBias }

// QKNorm reports whether q and k are normalised per head (q_norm, k_norm).
func (c *Config) QKNorm() bool { return c.Family().QKNorm }

// Window is the number of keys a query attends, itself included, or 0
// for plain causal attention over the whole sequence.
func (c *Config) Window() int {
	if c.Family().SlidingWindow {
		return c.SlidingWindow
	}
	return 0
}

// The variations' tensors. A bias follows its projection's rows, so the
// grid splits it as it splits them (over Y); a per-head norm applies alike
// to every head, and every rank holds it whole.
var (
	qBias = tensorDecl{module: "self_attn.q_proj", bias: true, layer: true, role: RoleAttnQBias, split: SplitVectorY, shape: func(c *Config) []int { return []int{c.QDim()} }}
	kBias = tensorDecl{module: "self_attn.k_proj", bias: true, layer: true, role: RoleAttnKBias, split: SplitVectorY, shape: func(c *Config) []int { return []int{c.KVDim()} }}
	vBias = tensorDecl{module: "self_attn.v_proj", bias: true, layer: true, role: RoleAttnVBias, split: SplitVectorY, shape: func(c *Config) []int { return []int{c.KVDim()} }}
	qNorm = tensorDecl{module: "self_attn.q_norm", layer: true, role: RoleAttnQNorm, split: SplitReplicated, shape: headDim}
	kNorm = tensorDecl{module: "self_attn.k_norm", layer: true, role: RoleAttnKNorm, split: SplitReplicated, shape: headDim}
)

func headDim(c *Config) []int { return []int{c.HeadDimension()} }

// qwen2Tensors is Llama's declaration with each q/k/v bias after its
// weight, as Qwen2's state dict orders them.
var qwen2Tensors = insertAfter(llamaTensors, map[Role][]tensorDecl{
	RoleAttnQ: {qBias}, RoleAttnK: {kBias}, RoleAttnV: {vBias},
})

// qwen3Tensors is Llama's declaration with q_norm and k_norm after o_proj,
// as Qwen3's attention module registers them.
var qwen3Tensors = insertAfter(llamaTensors, map[Role][]tensorDecl{RoleAttnO: {qNorm, kNorm}})

// insertAfter is decls with extra declarations after the tensors of the
// given roles.
func insertAfter(decls []tensorDecl, after map[Role][]tensorDecl) []tensorDecl {
	var out []tensorDecl
	for _, d := range decls {
		out = append(out, d)
		out = append(out, after[d.role]...)
	}
	return out
}
