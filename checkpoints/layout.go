package checkpoints

import "fmt"

// A family's tensors are declared once, in one table (llamaTensors for
// the Llama family): each tensor's HF name, its shape from the
// configuration, its Role in the model and its Split over AxoNN's 4D grid
// (Data × X × Y × Z). TensorSpecs lists them; everything that shards,
// classifies or counts a tensor — engine/parallel's shards, the engine's
// gradient sums and norm, LoRA, the training checkpoint's pieces, the
// memory accounting and the planner — reads the Role and Split it carries,
// never the tensor's name or rank.

// Role says what a tensor is in the model: the slot of the computation it
// fills. Roles are named after the HF modules of the Llama-class families
// (String): every family that shares a computation shares its role.
type Role uint8

const (
	roleUndeclared Role = iota
	RoleEmbedding       // the token embedding [vocab, hidden]
	RoleHead            // the untied LM head [vocab, hidden]
	RoleAttnQ           // q_proj [heads·head_dim, hidden]
	RoleAttnK           // k_proj [kv_heads·head_dim, hidden]
	RoleAttnV           // v_proj [kv_heads·head_dim, hidden]
	RoleAttnO           // o_proj [hidden, heads·head_dim]
	RoleMLPGate         // gate_proj [intermediate, hidden]
	RoleMLPUp           // up_proj [intermediate, hidden]
	RoleMLPDown         // down_proj [hidden, intermediate]
	RoleAttnNorm        // input_layernorm [hidden], before attention
	RoleMLPNorm         // post_attention_layernorm [hidden], before the MLP
	RoleFinalNorm       // the final norm [hidden], before the head
	// Roles no Llama tensor has, for the families that add them: the
	// q/k/v projections' biases (Qwen2) and the per-head RMSNorm of q and
	// k over head_dim (Qwen3).
	RoleAttnQBias // q_proj's bias [heads·head_dim]
	RoleAttnKBias // k_proj's bias [kv_heads·head_dim]
	RoleAttnVBias // v_proj's bias [kv_heads·head_dim]
	RoleAttnQNorm // q_norm [head_dim], applied to every head
	RoleAttnKNorm // k_norm [head_dim], applied to every key/value head
	// The two matrices of a LoRA adapter of a projection (PEFT's lora_A
	// [r, in] and lora_B [out, r]).
	RoleLoRAA
	RoleLoRAB
	roleCount
)

var roleNames = [roleCount]string{
	RoleEmbedding: "embed_tokens", RoleHead: "lm_head",
	RoleAttnQ: "q_proj", RoleAttnK: "k_proj", RoleAttnV: "v_proj", RoleAttnO: "o_proj",
	RoleMLPGate: "gate_proj", RoleMLPUp: "up_proj", RoleMLPDown: "down_proj",
	RoleAttnNorm: "input_layernorm", RoleMLPNorm: "post_attention_layernorm", RoleFinalNorm: "norm",
	RoleAttnQBias: "q_proj bias", RoleAttnKBias: "k_proj bias", RoleAttnVBias: "v_proj bias",
	RoleAttnQNorm: "q_norm", RoleAttnKNorm: "k_norm",
	RoleLoRAA: "lora_A", RoleLoRAB: "lora_B",
}

// String is the role's HF module name ("q_proj", "input_layernorm"; a
// bias is "q_proj bias").
func (r Role) String() string {
	if r > roleUndeclared && r < roleCount {
		return roleNames[r]
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// Valid reports whether r is a declared role.
func (r Role) Valid() bool { return r > roleUndeclared && r < roleCount }

// Norm reports whether the tensor is an RMSNorm weight: initialised to
// one, read in float32 by the norm kernels.
func (r Role) Norm() bool {
	switch r {
	case RoleAttnNorm, RoleMLPNorm, RoleFinalNorm, RoleAttnQNorm, RoleAttnKNorm:
		return true
	}
	return false
}

// Matrix reports whether the tensor is a weight matrix the passes
// multiply by (or look rows up in): initialised from a normal
// distribution, subject to weight decay, and held as a BF16 copy in mixed
// precision. Norm weights and biases are not.
func (r Role) Matrix() bool {
	switch r {
	case RoleEmbedding, RoleHead, RoleAttnQ, RoleAttnK, RoleAttnV, RoleAttnO,
		RoleMLPGate, RoleMLPUp, RoleMLPDown, RoleLoRAA, RoleLoRAB:
		return true
	}
	return false
}

// An Axis is one of the grid's two model-parallel axes that a dimension
// of a tensor may be split over, or none.
type Axis uint8

const (
	AxisNone Axis = iota // whole on every rank of the grid's X and Y
	AxisX
	AxisY
)

func (a Axis) String() string {
	switch a {
	case AxisX:
		return "X"
	case AxisY:
		return "Y"
	}
	return "none"
}

// A Split says how the 4D grid cuts a tensor. A matrix W[out, in] is cut
// into (x, y) blocks whose elements, flattened, are split again over Z; a
// vector (one row) is cut over one axis and held whole on the others.
//
// The splits are an enumeration, not a free pair of axes, because each is
// a layout the engine implements end to end: which activations it meets,
// which ranks hold copies, over which groups its gradient is summed and
// which rank counts it in the gradient norm follow from it (engine/parallel
// says how). A pair like "rows and columns both over X" would declare a
// layout nothing computes with.
type Split uint8

const (
	splitUndeclared Split = iota
	// SplitRowsY is a matrix with rows over Y and columns over X, each
	// (x, y) block's elements over Z: the linears that take the residual
	// stream (split over X) and give an output split over Y — q/k/v,
	// gate/up — and the embedding and LM head (vocabulary over Y).
	SplitRowsY
	// SplitRowsX is a matrix with rows over X and columns over Y, each
	// block's elements over Z: AxoNN's "transposed" linears, o_proj and
	// down_proj, which take their input split over Y and give their output
	// split over X, so that they chain after q/k/v and gate/up without a
	// re-layout.
	SplitRowsX
	// SplitVectorX is a vector over X, whole on every Y and Z rank: it
	// scales the residual stream, which is split over X and replicated
	// over Y (the RMSNorm weights).
	SplitVectorX
	// SplitVectorY is a vector over Y, whole on every X and Z rank: it
	// follows the rows of a SplitRowsY matrix's output (a q/k/v bias).
	SplitVectorY
	// SplitReplicated is whole on every rank: a tensor applied alike to
	// every head (a per-head q/k norm, on heads split over Y), and LoRA's
	// adapters, which the engine keeps whole (engine/llama's lora.go).
	SplitReplicated
	splitCount
)

var splitNames = [splitCount]string{
	SplitRowsY: "rows over Y, columns over X", SplitRowsX: "rows over X, columns over Y",
	SplitVectorX: "vector over X", SplitVectorY: "vector over Y", SplitReplicated: "replicated",
}

func (s Split) String() string {
	if s.Valid() {
		return splitNames[s]
	}
	return fmt.Sprintf("Split(%d)", uint8(s))
}

// Valid reports whether s is a declared split.
func (s Split) Valid() bool { return s > splitUndeclared && s < splitCount }

// Axes are the axes the tensor's rows and columns are split over (a
// vector is one row).
func (s Split) Axes() (rows, cols Axis) {
	switch s {
	case SplitRowsY:
		return AxisY, AxisX
	case SplitRowsX:
		return AxisX, AxisY
	case SplitVectorX:
		return AxisNone, AxisX
	case SplitVectorY:
		return AxisNone, AxisY
	}
	return AxisNone, AxisNone
}

// ChunksZ reports whether each (x, y) block is split again over Z: a
// matrix's is; a vector, small, is held whole by every Z rank.
func (s Split) ChunksZ() bool { return s == SplitRowsY || s == SplitRowsX }

// Dims is the rank of the tensors the split lays out: a matrix split is
// for matrices, a vector split for vectors; 0 for a replicated tensor,
// whatever its rank.
func (s Split) Dims() int {
	switch s {
	case SplitRowsY, SplitRowsX:
		return 2
	case SplitVectorX, SplitVectorY:
		return 1
	}
	return 0
}

// A tensorDecl declares one tensor of a family.
type tensorDecl struct {
	// module is the tensor's path inside a decoder layer
	// (LayerTensorName's module) for a layer's tensor, else its full HF
	// name.
	module string
	layer  bool // one per decoder layer
	role   Role
	split  Split
	shape  func(c *Config) []int
	// untied: present only when the embeddings are untied (the LM head).
	untied bool
}

// llamaTensors declares the Llama family's tensors, in the order of HF's
// state dict: the embedding, a decoder layer's (repeated for every
// layer), the final norm and the untied LM head.
var llamaTensors = []tensorDecl{
	{module: EmbedTokensName, role: RoleEmbedding, split: SplitRowsY, shape: vocabByHidden},
	{module: "self_attn.q_proj", layer: true, role: RoleAttnQ, split: SplitRowsY, shape: func(c *Config) []int { return []int{c.QDim(), c.HiddenSize} }},
	{module: "self_attn.k_proj", layer: true, role: RoleAttnK, split: SplitRowsY, shape: func(c *Config) []int { return []int{c.KVDim(), c.HiddenSize} }},
	{module: "self_attn.v_proj", layer: true, role: RoleAttnV, split: SplitRowsY, shape: func(c *Config) []int { return []int{c.KVDim(), c.HiddenSize} }},
	{module: "self_attn.o_proj", layer: true, role: RoleAttnO, split: SplitRowsX, shape: func(c *Config) []int { return []int{c.HiddenSize, c.QDim()} }},
	{module: "mlp.gate_proj", layer: true, role: RoleMLPGate, split: SplitRowsY, shape: func(c *Config) []int { return []int{c.IntermediateSize, c.HiddenSize} }},
	{module: "mlp.up_proj", layer: true, role: RoleMLPUp, split: SplitRowsY, shape: func(c *Config) []int { return []int{c.IntermediateSize, c.HiddenSize} }},
	{module: "mlp.down_proj", layer: true, role: RoleMLPDown, split: SplitRowsX, shape: func(c *Config) []int { return []int{c.HiddenSize, c.IntermediateSize} }},
	{module: "input_layernorm", layer: true, role: RoleAttnNorm, split: SplitVectorX, shape: hidden},
	{module: "post_attention_layernorm", layer: true, role: RoleMLPNorm, split: SplitVectorX, shape: hidden},
	{module: FinalNormName, role: RoleFinalNorm, split: SplitVectorX, shape: hidden},
	{module: LMHeadName, role: RoleHead, split: SplitRowsY, shape: vocabByHidden, untied: true},
}

func vocabByHidden(c *Config) []int { return []int{c.VocabSize, c.HiddenSize} }
func hidden(c *Config) []int        { return []int{c.HiddenSize} }

// declaration is the table of c's family.
func (c *Config) declaration() []tensorDecl { return llamaTensors }

// present reports whether the declared tensor exists in a model of c.
func (d tensorDecl) present(c *Config) bool { return !d.untied || !c.TieWordEmbeddings }

// spec is the declared tensor's TensorSpec, in layer l (ignored outside
// the layers).
func (d tensorDecl) spec(c *Config, l int) TensorSpec {
	if d.layer {
		return TensorSpec{Name: LayerTensorName(l, d.module), Shape: d.shape(c), Role: d.role, Split: d.split, Layer: l}
	}
	return TensorSpec{Name: d.module, Shape: d.shape(c), Role: d.role, Split: d.split, Layer: -1}
}

// elements is the declared tensor's element count in a model of c, in
// int64 (Params counts with it before anything is allocated).
func (d tensorDecl) elements(c *Config) int64 {
	n := int64(1)
	for _, v := range d.shape(c) {
		n *= int64(v)
	}
	return n
}
