package checkpoints

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func testAdapterConfig() *AdapterConfig {
	return &AdapterConfig{PEFTType: "LORA", TaskType: "CAUSAL_LM", R: 4, LoRAAlpha: 8, TargetModules: []string{"q_proj", "v_proj", "down_proj"},
		Bias: "none", BaseModelNameOrPath: "/models/base"}
}

// peftKeys are the keys of a LoRA adapter_config.json as PEFT's
// LoraConfig writes them (peft/tuners/lora/config.py; PeftConfig's
// peft_type, task_type, base_model_name_or_path, revision, inference_mode)
// that memtrain writes: each with the value of a plain LoRA.
var peftKeys = []string{"alpha_pattern", "base_model_name_or_path", "bias", "fan_in_fan_out", "inference_mode", "init_lora_weights",
	"layers_to_transform", "lora_alpha", "lora_dropout", "modules_to_save", "peft_type", "r", "rank_pattern", "revision",
	"target_modules", "task_type", "use_dora", "use_rslora"}

// TestAdapterLayout: SaveAdapter writes PEFT's files, keys and tensor
// names (lora_A [r, in], lora_B [out, r] under
// base_model.model.model.layers.N.{self_attn,mlp}.M), and OpenAdapter
// reads them back.
func TestAdapterLayout(t *testing.T) {
	cfg := tinyConfig(false)
	ac := testAdapterConfig()
	specs := cfg.AdapterTensorSpecs(ac)
	if len(specs) != 2*3*cfg.NumHiddenLayers {
		t.Fatalf("%d adapter tensors, want %d", len(specs), 6*cfg.NumHiddenLayers)
	}
	want := []TensorSpec{
		{Name: "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", Shape: []int{4, cfg.HiddenSize}},
		{Name: "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", Shape: []int{cfg.QDim(), 4}},
		{Name: "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight", Shape: []int{4, cfg.HiddenSize}},
		{Name: "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight", Shape: []int{cfg.KVDim(), 4}},
		{Name: "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight", Shape: []int{4, cfg.IntermediateSize}},
		{Name: "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight", Shape: []int{cfg.HiddenSize, 4}},
	}
	for i, w := range want {
		if specs[i].Name != w.Name || !slices.Equal(specs[i].Shape, w.Shape) {
			t.Errorf("tensor %d: %s %v, want %s %v", i, specs[i].Name, specs[i].Shape, w.Name, w.Shape)
		}
	}
	var tensors []Tensor
	for i, s := range specs {
		data := make([]float32, s.Elements())
		for j := range data {
			data[j] = float32(i*1000 + j)
		}
		tensors = append(tensors, Tensor{Name: s.Name, Shape: s.Shape, Data: data})
	}
	dir := t.TempDir()
	if err := SaveAdapter(dir, cfg, ac, tensors); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, AdapterConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	var got []string
	for k := range keys {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, peftKeys) {
		t.Errorf("adapter_config.json keys %v, want PEFT's %v", got, peftKeys)
	}
	for k, v := range map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4.0, "lora_alpha": 8.0, "bias": "none",
		"fan_in_fan_out": false, "use_rslora": false, "inference_mode": true, "base_model_name_or_path": "/models/base"} {
		if keys[k] != v {
			t.Errorf("%s = %v, want %v", k, keys[k], v)
		}
	}
	ad, err := OpenAdapter(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	if ad.Config.R != 4 || ad.Config.Scale() != 2 || !slices.Equal(ad.Config.TargetModules, ac.TargetModules) {
		t.Errorf("read back %+v", ad.Config)
	}
	for _, tt := range tensors {
		v, err := ad.Weights.ReadFloat32(tt.Name)
		if err != nil || !slices.Equal(v, tt.Data) {
			t.Errorf("%s: read back %v (%v)", tt.Name, len(v), err)
		}
	}
	// A model of another shape is refused, naming the tensor.
	other := tinyConfig(false)
	other.IntermediateSize += 8
	if _, err := OpenAdapter(dir, other); err == nil || !strings.Contains(err.Error(), "down_proj.lora_A") {
		t.Errorf("adapter on another shape: %v", err)
	}
}

// TestParseAdapterConfig: what memtrain cannot apply is refused in one
// line naming the file and the key; PEFT's shorthand and extra keys are
// accepted.
func TestParseAdapterConfig(t *testing.T) {
	base := `"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16, "lora_dropout": 0.05, "bias": "none"`
	ok := []struct{ name, json string }{
		{"list", `{` + base + `, "target_modules": ["q_proj", "v_proj"]}`},
		{"all-linear", `{` + base + `, "target_modules": "all-linear"}`},
		{"extra keys", `{` + base + `, "target_modules": ["q_proj"], "megatron_core": "megatron.core", "loftq_config": {}, "layer_replication": null, "use_dora": false}`},
	}
	for _, c := range ok {
		a, err := ParseAdapterConfig("a.json", []byte(c.json))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if c.name == "all-linear" && len(a.TargetModules) != 7 {
			t.Errorf("all-linear: %v", a.TargetModules)
		}
	}
	bad := []struct{ json, want string }{
		{`{"peft_type": "IA3", "r": 8, "lora_alpha": 8, "target_modules": ["q_proj"]}`, `field "peft_type"`},
		{`{` + base + `, "target_modules": ["lm_head"]}`, `"lm_head"`},
		{`{` + base + `, "target_modules": ".*q_proj"}`, `a pattern`},
		{`{` + base + `, "target_modules": []}`, `target_modules`},
		{`{"peft_type": "LORA", "r": 0, "lora_alpha": 8, "target_modules": ["q_proj"]}`, `field "r"`},
		{`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "bias": "all", "target_modules": ["q_proj"]}`, `field "bias"`},
		{`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "fan_in_fan_out": true, "target_modules": ["q_proj"]}`, `fan_in_fan_out`},
		{`{` + base + `, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 4}}`, `rank_pattern`},
		{`{` + base + `, "target_modules": ["q_proj"], "use_dora": true}`, `use_dora`},
		{`{` + base + `, "target_modules": ["q_proj"], "modules_to_save": ["lm_head"]}`, `modules_to_save`},
		{`{"peft_type": "LORA", "r": "eight", "lora_alpha": 8, "target_modules": ["q_proj"]}`, `"r"`},
		{`{"peft_type": "LORA", "r": 4, "lora_alpha": 8, "lora_dropout": 1, "target_modules": ["q_proj"]}`, `lora_dropout`},
		{`[1, 2]`, `a.json`},
	}
	for _, c := range bad {
		_, err := ParseAdapterConfig("a.json", []byte(c.json))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "a.json") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line naming a.json and %s", c.json, err, c.want)
		}
	}
}

// FuzzParseAdapterConfig: any bytes give a checked configuration or an
// error, never a panic; an accepted one validates and writes back to one
// that parses equal.
func FuzzParseAdapterConfig(f *testing.F) {
	f.Add([]byte(`{"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}`))
	f.Add([]byte(`{"peft_type": "LORA", "r": 1, "lora_alpha": 1e308, "target_modules": "all-linear", "use_rslora": true}`))
	f.Add([]byte(`{"r": -1}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, err := ParseAdapterConfig("f.json", raw)
		if err != nil {
			return
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("accepted %s, but Validate: %v", raw, err)
		}
		out, err := AdapterConfigJSON(a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseAdapterConfig("f.json", out)
		if err != nil {
			t.Fatalf("wrote %s, which does not parse: %v", out, err)
		}
		b.InferenceMode = a.InferenceMode
		if b.R != a.R || b.LoRAAlpha != a.LoRAAlpha || !slices.Equal(b.TargetModules, a.TargetModules) || b.UseRSLoRA != a.UseRSLoRA {
			t.Fatalf("round trip %+v → %+v", a, b)
		}
	})
}
