// Package llama is the Llama model with HuggingFace semantics on an
// engine.Backend: token embedding, RMSNorm, RoPE (rotate-half, llama3
// scaling), grouped-query causal attention, SwiGLU MLP, final norm and a
// tied or untied LM head; the loss is cross-entropy weighted per target.
//
// Every layer's backward is hand-written beside its forward (block.go),
// llm.c style; the kernels themselves belong to the backend. The model
// only speaks the Backend interface, so the same code runs on any backend.
package llama

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
)

// Options control how the model trains.
type Options struct {
	// Recompute keeps only each layer's input during the forward pass and
	// recomputes the layer's activations in the backward pass: about one
	// extra forward of compute for a large cut in activation memory.
	Recompute bool
}

// Layer holds one decoder block's parameters.
type Layer struct {
	AttnNorm, Q, K, V, O *engine.Param
	MLPNorm, Gate, Up    *engine.Param
	Down                 *engine.Param
}

// Model is a Llama model's parameters and gradients on a backend, with the
// workspace for its activations.
type Model struct {
	Config  *checkpoints.Config
	Options Options
	backend engine.Backend

	Embed  *engine.Param
	Layers []*Layer
	Norm   *engine.Param
	Head   *engine.Param // the same Param as Embed when the embeddings are tied

	invFreq *engine.Tensor // [D/2]
	ws      *workspace     // activations for the current batch shape
}

// New allocates a model of the given configuration with zero weights and
// gradients.
func New(b engine.Backend, cfg *checkpoints.Config, opt Options) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &Model{Config: cfg.Clone(), Options: opt, backend: b}
	params := map[string]*engine.Param{}
	for _, s := range cfg.TensorSpecs() {
		rows, cols := 1, s.Shape[0]
		if len(s.Shape) == 2 {
			rows, cols = s.Shape[0], s.Shape[1]
		}
		params[s.Name] = &engine.Param{
			Name:  s.Name,
			Full:  append([]int(nil), s.Shape...),
			Shard: engine.WholeShard(rows, cols),
			Value: b.Alloc(engine.F32, s.Shape...),
			Grad:  b.Alloc(engine.F32, s.Shape...),
			Decay: !s.Norm,
		}
	}
	m.Embed = params[checkpoints.EmbedTokensName]
	m.Norm = params[checkpoints.FinalNormName]
	m.Head = m.Embed
	if !cfg.TieWordEmbeddings {
		m.Head = params[checkpoints.LMHeadName]
	}
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		p := func(module string) *engine.Param { return params[checkpoints.LayerTensorName(l, module)] }
		m.Layers = append(m.Layers, &Layer{
			AttnNorm: p("input_layernorm"), Q: p("self_attn.q_proj"), K: p("self_attn.k_proj"),
			V: p("self_attn.v_proj"), O: p("self_attn.o_proj"), MLPNorm: p("post_attention_layernorm"),
			Gate: p("mlp.gate_proj"), Up: p("mlp.up_proj"), Down: p("mlp.down_proj"),
		})
	}
	inv := InvFreq(cfg)
	m.invFreq = b.Alloc(engine.F32, len(inv))
	b.Upload(m.invFreq, inv)
	return m, nil
}

// Load creates a model from an opened checkpoint, converting its weights to
// float32 on the backend.
func Load(b engine.Backend, ck *checkpoints.Checkpoint, opt Options) (*Model, error) {
	m, err := New(b, ck.Config, opt)
	if err != nil {
		return nil, err
	}
	buf := []float32{}
	for _, p := range m.Params() {
		n := p.Value.Len()
		if cap(buf) < n {
			buf = make([]float32, n)
		}
		if err := ck.Weights.ReadFloat32Into(p.Name, buf[:n]); err != nil {
			m.Free()
			return nil, err
		}
		b.Upload(p.Value, buf[:n])
	}
	return m, nil
}

// Params lists the model's parameters in checkpoint order, each once (a
// tied head is the embedding).
func (m *Model) Params() []*engine.Param {
	ps := []*engine.Param{m.Embed}
	for _, l := range m.Layers {
		ps = append(ps, l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down, l.AttnNorm, l.MLPNorm)
	}
	ps = append(ps, m.Norm)
	if m.Head != m.Embed {
		ps = append(ps, m.Head)
	}
	return ps
}

// Backend is the backend the model lives on.
func (m *Model) Backend() engine.Backend { return m.backend }

// SetWeights uploads weights by HF name; every parameter must be given.
func (m *Model) SetWeights(tensors []checkpoints.Tensor) error {
	byName := map[string]checkpoints.Tensor{}
	for _, t := range tensors {
		byName[t.Name] = t
	}
	for _, p := range m.Params() {
		t, ok := byName[p.Name]
		if !ok {
			return fmt.Errorf("llama: weight %q missing", p.Name)
		}
		if len(t.Data) != p.Value.Len() {
			return fmt.Errorf("llama: weight %q has %d elements, want %d", p.Name, len(t.Data), p.Value.Len())
		}
		m.backend.Upload(p.Value, t.Data)
	}
	return nil
}

// Weights downloads every parameter as checkpoint tensors (HF names and
// shapes), ready for checkpoints.Save.
func (m *Model) Weights() []checkpoints.Tensor {
	var out []checkpoints.Tensor
	for _, p := range m.Params() {
		data := make([]float32, p.Value.Len())
		m.backend.Download(data, p.Value)
		out = append(out, checkpoints.Tensor{Name: p.Name, Shape: append([]int(nil), p.Full...), Data: data})
	}
	return out
}

// ZeroGrads clears every gradient.
func (m *Model) ZeroGrads() {
	for _, p := range m.Params() {
		m.backend.Fill(p.Grad, 0)
	}
}

// Free releases the model's tensors.
func (m *Model) Free() {
	m.freeWorkspace()
	for _, p := range m.Params() {
		m.backend.Free(p.Value)
		m.backend.Free(p.Grad)
	}
	m.backend.Free(m.invFreq)
}
