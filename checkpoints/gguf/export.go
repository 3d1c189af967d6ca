package gguf

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
)

// Options control Export.
type Options struct {
	// Type of the matrices: F32, F16, BF16 or Q8_0. The norms and the rope
	// factors stay F32, as llama.cpp's converter keeps them; under Q8_0 a
	// matrix whose rows are not whole blocks of 32 is F16, as there.
	Type TensorType
	// Name is general.name; "" names the model after the file written
	// (out without its extension), the name its user gave it.
	Name string
	// Adapter, if not nil, is a LoRA adapter of the source to merge in
	// (checkpoints.OpenSource).
	Adapter *checkpoints.Adapter
	// Progress, if set, is called after each tensor with the tensors
	// written and their number.
	Progress func(done, total int)
}

// ParseType reads a type Export writes: f32, f16, bf16 or q8_0, in any
// case.
func ParseType(s string) (TensorType, error) {
	t, err := ParseTensorType(s)
	if _, ok := fileTypes[t]; err != nil || !ok {
		return 0, fmt.Errorf("gguf: cannot write weights as %q (want f32, f16, bf16 or q8_0)", s)
	}
	return t, nil
}

// chunk bounds the values Export holds at a time: a larger tensor is read,
// converted and written a block of whole rows (or one head's rows) at a
// time.
const chunk = 1 << 22

// A tensor of the output: its GGUF description and where its values come
// from.
type outTensor struct {
	info  TensorInfo
	src   string    // the HF weight, or "" for values
	heads int       // > 0: rows are permuted head by head (Q, K)
	vals  []float32 // the rope factors
}

// Export writes the checkpoint in folder src (an HF checkpoint or a sharded
// training checkpoint; with opt.Adapter merged in) as the GGUF file out,
// as llama.cpp's converter writes a LlamaForCausalLM: the llama metadata
// (Metadata), the tokenizer (TokenizerMetadata), and the weights under
// llama.cpp's names (TensorName), Q and K rows permuted (Permute), rope
// factors for Llama 3's scaling (RopeFactors), no output tensor when the
// embeddings are tied. It streams: one tensor at a time, at most chunk
// values of it, into a temporary file renamed to out when complete. An
// existing out is refused, not replaced, as the HF export refuses a
// folder that holds files.
func Export(src, out string, opt Options) error {
	if _, err := fileType(opt.Type); err != nil {
		return err
	}
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("gguf: %s exists: export to a new file (or remove it first)", out)
	}
	merged := checkpoints.DTypeF32
	if opt.Type == BF16 {
		merged = checkpoints.DTypeBF16 // the merge's sum rounded once, to bf16
	}
	s, err := checkpoints.OpenSource(src, opt.Adapter, merged)
	if err != nil {
		return err
	}
	defer s.Close()
	cfg := s.Config
	// llama.cpp's llama architecture is Llama's block: Mistral's without a
	// window is the same (its converter writes Mistral so); a window, a
	// bias or a head norm would be dropped without a word.
	if cfg.QKVBias() || cfg.QKNorm() || cfg.Window() > 0 {
		return fmt.Errorf("gguf: %s: model_type %s: only Llama's block (llama, or mistral without a sliding window) exports to GGUF", src, cfg.Family().ModelType)
	}
	name := opt.Name
	if name == "" {
		name = strings.TrimSuffix(filepath.Base(out), filepath.Ext(out))
	}
	kvs, err := Metadata(cfg, name, opt.Type)
	if err != nil {
		return err
	}
	tk, err := TokenizerMetadata(src, cfg)
	if err != nil {
		return err
	}
	kvs = append(kvs, tk...)
	tensors := plan(cfg, opt.Type)
	infos := make([]TensorInfo, len(tensors))
	for i, t := range tensors {
		infos[i] = t.info
	}
	var buf []byte
	return WriteFile(out, kvs, infos, func(i int, w io.Writer) error {
		t := tensors[i]
		put := func(v []float32) error {
			var err error
			if buf, err = Encode(buf[:0], t.info.Type, v); err != nil {
				return fmt.Errorf("gguf: %s: tensor %q: %w", out, t.info.Name, err)
			}
			_, err = w.Write(buf)
			return err
		}
		var err error
		if t.src == "" {
			err = put(t.vals)
		} else {
			err = stream(s, t, put)
		}
		if err == nil && opt.Progress != nil {
			opt.Progress(i+1, len(tensors))
		}
		return err
	})
}

// stream hands put the rows of the source weight of t, in blocks of whole
// rows, or for Q and K head by head with the head's rows permuted.
func stream(s *checkpoints.Source, t outTensor, put func([]float32) error) error {
	cols, rows := int(t.info.Dims[0]), 1
	if len(t.info.Dims) > 1 {
		rows = int(t.info.Dims[1])
	}
	step := max(1, chunk/cols)
	if t.heads > 0 {
		step = rows / t.heads
	}
	for r := 0; r < rows; r += step {
		v, err := s.ReadRows(t.src, r, min(rows, r+step))
		if err != nil {
			return err
		}
		if t.heads > 0 {
			v = Permute(v, 1, cols)
		}
		if err := put(v); err != nil {
			return err
		}
	}
	return nil
}

// Permute reorders the rows of a Q or K projection, heads blocks of rows of
// cols values, from HF's RoPE layout, which rotates the first half of a
// head's dimensions with the second (rotate_half), to GGML's, which rotates
// adjacent pairs: row j·D/2 + i of a head of D rows becomes row 2i + j, as
// llama.cpp's converter permutes them (LlamaModel.permute).
func Permute(w []float32, heads, cols int) []float32 {
	out := make([]float32, len(w))
	d := len(w) / cols / heads
	for h := range heads {
		for j := range 2 {
			for i := range d / 2 {
				from := (h*d + j*d/2 + i) * cols
				to := (h*d + 2*i + j) * cols
				copy(out[to:to+cols], w[from:from+cols])
			}
		}
	}
	return out
}

// TensorName is llama.cpp's name for an HF Llama weight ("" for a name it
// does not know): model.layers.N.self_attn.q_proj.weight is
// blk.N.attn_q.weight.
func TensorName(hf string) string {
	switch hf {
	case checkpoints.EmbedTokensName:
		return "token_embd.weight"
	case checkpoints.FinalNormName:
		return "output_norm.weight"
	case checkpoints.LMHeadName:
		return "output.weight"
	}
	rest, ok := strings.CutPrefix(hf, "model.layers.")
	if !ok {
		return ""
	}
	layer, module, ok := strings.Cut(rest, ".")
	if !ok {
		return ""
	}
	names := map[string]string{
		"self_attn.q_proj.weight": "attn_q", "self_attn.k_proj.weight": "attn_k",
		"self_attn.v_proj.weight": "attn_v", "self_attn.o_proj.weight": "attn_output",
		"mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down",
		"input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "ffn_norm",
	}
	if n, ok := names[module]; ok {
		return "blk." + layer + "." + n + ".weight"
	}
	return ""
}

// plan lists the output's tensors: the rope factors (with llama3 scaling),
// then every weight of the configuration in HF's order (TensorSpecs: no
// lm_head when the embeddings are tied, which llama.cpp then takes from
// token_embd), each under its llama.cpp name in its type.
func plan(cfg *checkpoints.Config, t TensorType) []outTensor {
	var out []outTensor
	if f := RopeFactors(cfg); f != nil {
		out = append(out, outTensor{info: TensorInfo{Name: RopeFactorsName, Dims: []uint64{uint64(len(f))}, Type: F32}, vals: f})
	}
	for _, s := range cfg.TensorSpecs() {
		info := TensorInfo{Name: TensorName(s.Name), Type: t}
		for i := len(s.Shape) - 1; i >= 0; i-- {
			info.Dims = append(info.Dims, uint64(s.Shape[i]))
		}
		switch {
		case !s.Role.Matrix(): // norm weights (and biases) stay float32, as llama.cpp keeps them
			info.Type = F32
		case t == Q8_0 && s.Shape[1]%q8Block != 0:
			info.Type = F16
		}
		ot := outTensor{info: info, src: s.Name}
		switch {
		case s.Role == checkpoints.RoleAttnQ:
			ot.heads = cfg.NumAttentionHeads
		case s.Role == checkpoints.RoleAttnK:
			ot.heads = cfg.NumKeyValueHeads
		}
		out = append(out, ot)
	}
	return out
}
