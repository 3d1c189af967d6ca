package checkpoints

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadConfigFamilies reads the released configs of each family:
// the published parameter counts follow from the family's declaration
// (Qwen2's biases, Qwen3's head norms and explicit head_dim), and the
// variations are read from the keys each family's config has.
func TestReadConfigFamilies(t *testing.T) {
	tests := []struct {
		file          string
		params        int64 // as the model cards and safetensors indexes give them
		window        int
		bias, qkNorm  bool
		headDim, qDim int
	}{
		{"mistral-7b-v0.1.json", 7_241_732_096, 4096, false, false, 128, 4096},
		{"mistral-7b-v0.3.json", 7_248_023_552, 0, false, false, 128, 4096},
		{"qwen2.5-0.5b.json", 494_032_768, 0, true, false, 64, 896},
		{"qwen2.5-7b.json", 7_615_616_512, 0, true, false, 128, 3584},
		{"qwen3-8b.json", 8_190_735_360, 0, false, true, 128, 4096},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			c, err := ReadConfig(filepath.Join("testdata", "configs", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Params().Total; got != tt.params {
				t.Errorf("params = %d, want %d", got, tt.params)
			}
			if c.Window() != tt.window || c.QKVBias() != tt.bias || c.QKNorm() != tt.qkNorm {
				t.Errorf("window %d, biases %v, head norms %v; want %d, %v, %v", c.Window(), c.QKVBias(), c.QKNorm(), tt.window, tt.bias, tt.qkNorm)
			}
			if c.HeadDimension() != tt.headDim || c.QDim() != tt.qDim {
				t.Errorf("head_dim %d, q_proj rows %d; want %d, %d", c.HeadDimension(), c.QDim(), tt.headDim, tt.qDim)
			}
			// Written back in the family's layout and read again: the same
			// model, under the same model_type and architecture.
			b, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			d, err := ParseConfig(tt.file, b)
			if err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if d.Params() != c.Params() || d.Window() != c.Window() || d.ModelType != c.ModelType ||
				!slices.Equal(d.Architectures, c.Architectures) || d.SlidingWindow != c.SlidingWindow || d.MaxWindowLayers != c.MaxWindowLayers {
				t.Errorf("round trip changed the config:\n%+v\n%+v", c, d)
			}
		})
	}
}

// TestFamilyConfigKeys: each family's config.json is written with the keys
// its transformers class has, and without Llama's that it lacks.
func TestFamilyConfigKeys(t *testing.T) {
	tests := []struct {
		preset      string
		has, hasNot []string
	}{
		{"tiny", []string{"head_dim", "attention_bias", "mlp_bias", "pretraining_tp"}, []string{"sliding_window", "use_sliding_window"}},
		{"tiny-mistral", []string{"head_dim", "sliding_window"}, []string{"attention_bias", "mlp_bias", "use_sliding_window"}},
		{"tiny-qwen2", []string{"sliding_window", "use_sliding_window", "max_window_layers"}, []string{"head_dim", "attention_bias", "mlp_bias"}},
		{"tiny-qwen3", []string{"head_dim", "attention_bias", "sliding_window", "use_sliding_window", "max_window_layers"}, []string{"mlp_bias", "pretraining_tp"}},
	}
	for _, tt := range tests {
		p, err := LookupPreset(tt.preset)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(p.Config())
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		fam := p.Config().Family()
		if m["model_type"] != fam.ModelType || !slices.Equal(anyStrings(m["architectures"]), []string{fam.Architecture}) {
			t.Errorf("%s: model_type %v, architectures %v", tt.preset, m["model_type"], m["architectures"])
		}
		for _, k := range tt.has {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: no %q in %s", tt.preset, k, b)
			}
		}
		for _, k := range tt.hasNot {
			if _, ok := m[k]; ok {
				t.Errorf("%s: %q written", tt.preset, k)
			}
		}
	}
}

func anyStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

// TestFamilyTensors: each family's declaration adds its tensors where its
// state dict has them, with the splits that follow from what they are.
func TestFamilyTensors(t *testing.T) {
	for _, tt := range []struct {
		preset string
		layer  []string // a layer's tensors after the embedding, in order
	}{
		{"tiny-mistral", []string{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
			"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"}},
		{"tiny-qwen2", []string{"self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight", "self_attn.k_proj.bias",
			"self_attn.v_proj.weight", "self_attn.v_proj.bias", "self_attn.o_proj.weight",
			"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"}},
		{"tiny-qwen3", []string{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight", "self_attn.o_proj.weight",
			"self_attn.q_norm.weight", "self_attn.k_norm.weight",
			"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"}},
	} {
		p, _ := LookupPreset(tt.preset)
		c := p.Config()
		specs := c.TensorSpecs()
		if len(specs) != c.TensorCount() {
			t.Errorf("%s: %d specs, TensorCount %d", tt.preset, len(specs), c.TensorCount())
		}
		var got []string
		for _, s := range specs[1 : 1+len(tt.layer)] {
			got = append(got, strings.TrimPrefix(s.Name, "model.layers.0."))
			switch s.Role {
			case RoleAttnQBias, RoleAttnKBias, RoleAttnVBias:
				if s.Split != SplitVectorY || len(s.Shape) != 1 {
					t.Errorf("%s: %s split %v shape %v", tt.preset, s.Name, s.Split, s.Shape)
				}
			case RoleAttnQNorm, RoleAttnKNorm:
				if s.Split != SplitReplicated || !slices.Equal(s.Shape, []int{c.HeadDimension()}) || !s.Role.Norm() {
					t.Errorf("%s: %s split %v shape %v", tt.preset, s.Name, s.Split, s.Shape)
				}
			}
		}
		if !slices.Equal(got, tt.layer) {
			t.Errorf("%s: layer 0 holds %v, want %v", tt.preset, got, tt.layer)
		}
		var sum int64
		for _, s := range specs {
			sum += s.Elements()
		}
		if sum != c.Params().Total {
			t.Errorf("%s: tensors hold %d, Params %d", tt.preset, sum, c.Params().Total)
		}
	}
}

func TestFamilyConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(m map[string]any)
		field string
		msg   string
	}{
		{"unknown model type", func(m map[string]any) { m["model_type"] = "gemma" }, "model_type", `unsupported model type "gemma" (want llama, mistral, qwen2 or qwen3)`},
		{"architecture of another family", func(m map[string]any) { m["model_type"] = "qwen2" }, "architectures", "want Qwen2ForCausalLM"},
		{"qwen windows", func(m map[string]any) {
			m["model_type"], m["architectures"], m["use_sliding_window"] = "qwen2", []string{"Qwen2ForCausalLM"}, true
		}, "use_sliding_window", "want false"},
		{"qwen2 head_dim", func(m map[string]any) {
			m["model_type"], m["architectures"], m["head_dim"] = "qwen2", []string{"Qwen2ForCausalLM"}, 32
		}, "head_dim", "Qwen2 takes hidden_size / num_attention_heads = 16, got 32"},
		{"negative window", func(m map[string]any) {
			m["model_type"], m["architectures"], m["sliding_window"] = "mistral", []string{"MistralForCausalLM"}, -4
		}, "sliding_window", "want null or a positive number"},
		{"window not an integer", func(m map[string]any) {
			m["model_type"], m["architectures"], m["sliding_window"] = "mistral", []string{"MistralForCausalLM"}, "4096"
		}, "sliding_window", "want an integer"},
		{"o_proj bias", func(m map[string]any) {
			m["model_type"], m["architectures"], m["attention_bias"] = "qwen3", []string{"Qwen3ForCausalLM"}, true
		}, "attention_bias", "o_proj's too"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("dir/config.json", edit(t, tt.edit))
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field || !strings.Contains(err.Error(), tt.msg) || !strings.Contains(err.Error(), "dir/config.json") {
				t.Errorf("error %v: want field %q and %q", err, tt.field, tt.msg)
			}
		})
	}
}
