package checkpoints

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestReadConfigRealLlamaConfigs(t *testing.T) {
	tests := []struct {
		file        string
		params      int64
		kv, headDim int
		eos         []int
		scaling     float64 // 0: none
		tie         bool
	}{
		{"llama2-7b.json", 6_738_415_616, 32, 128, []int{2}, 0, false},
		{"llama3-8b.json", 8_030_261_248, 8, 128, []int{128001}, 0, false},
		{"llama3.1-8b.json", 8_030_261_248, 8, 128, []int{128001, 128008, 128009}, 8, false},
		{"llama3.2-1b.json", 1_235_814_400, 8, 64, []int{128001, 128008, 128009}, 32, true},
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
			if c.NumKeyValueHeads != tt.kv || c.HeadDimension() != tt.headDim {
				t.Errorf("kv heads %d head dim %d, want %d %d", c.NumKeyValueHeads, c.HeadDimension(), tt.kv, tt.headDim)
			}
			if !slices.Equal(c.EOSTokenIDs, tt.eos) {
				t.Errorf("eos = %v, want %v", c.EOSTokenIDs, tt.eos)
			}
			if (c.RopeScaling == nil) != (tt.scaling == 0) || (c.RopeScaling != nil && c.RopeScaling.Factor != tt.scaling) {
				t.Errorf("rope scaling = %+v, want factor %v", c.RopeScaling, tt.scaling)
			}
			if c.TieWordEmbeddings != tt.tie {
				t.Errorf("tie = %v", c.TieWordEmbeddings)
			}
		})
	}
}

func TestConfigMarshalRoundTrip(t *testing.T) {
	for _, p := range Presets() {
		c := p.Config()
		b, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		d, err := ParseConfig(p.Name, b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", p.Name, err, b)
		}
		b2, _ := json.Marshal(d)
		if string(b) != string(b2) {
			t.Errorf("%s: round trip changed the config:\n%s\n%s", p.Name, b, b2)
		}
		if d.Params() != c.Params() {
			t.Errorf("%s: params changed", p.Name)
		}
	}
}

func TestPresetParams(t *testing.T) {
	want := map[string]int64{
		"llama3.2-1b":   1_235_814_400,
		"llama3.1-8b":   8_030_261_248,
		"llama3.1-70b":  70_553_706_496,
		"llama3.1-405b": 405_853_388_800,
		"llama2-7b":     6_738_415_616,
		"mistral-7b":    7_248_023_552,
		"qwen2.5-7b":    7_615_616_512,
		"qwen3-8b":      8_190_735_360,
	}
	for name, n := range want {
		p, err := LookupPreset(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Config().Params().Total; got != n {
			t.Errorf("%s: %d params, want %d", name, got, n)
		}
	}
	if _, err := LookupPreset("gpt2"); err == nil || !strings.Contains(err.Error(), "llama3.1-8b") {
		t.Errorf("unknown preset error should list the presets: %v", err)
	}
}

// base is a valid config that the error cases below break one field at a time.
const base = `{"architectures":["LlamaForCausalLM"],"model_type":"llama","hidden_size":64,
"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,
"rms_norm_eps":1e-5,"rope_theta":10000,"max_position_embeddings":128,"vocab_size":100,
"bos_token_id":1,"eos_token_id":[2,3],"torch_dtype":"float32","tie_word_embeddings":true}`

func edit(t *testing.T, fn func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(m map[string]any)
		field string // must appear in the message
		msg   string
	}{
		{"missing hidden", func(m map[string]any) { delete(m, "hidden_size") }, "hidden_size", "missing"},
		{"string size", func(m map[string]any) { m["hidden_size"] = "64" }, "hidden_size", "want an integer"},
		{"fractional", func(m map[string]any) { m["num_hidden_layers"] = 2.5 }, "num_hidden_layers", "want an integer"},
		{"zero layers", func(m map[string]any) { m["num_hidden_layers"] = 0 }, "num_hidden_layers", "positive"},
		{"negative vocab", func(m map[string]any) { m["vocab_size"] = -1 }, "vocab_size", "positive"},
		{"kv not dividing", func(m map[string]any) { m["num_key_value_heads"] = 3 }, "num_key_value_heads", "does not divide"},
		{"hidden not divisible", func(m map[string]any) { m["num_attention_heads"] = 6; m["num_key_value_heads"] = 6 }, "hidden_size", "not divisible"},
		{"odd head dim", func(m map[string]any) { m["head_dim"] = 15 }, "head_dim", "even"},
		{"other architecture", func(m map[string]any) { m["architectures"] = []string{"MistralForCausalLM"} }, "architectures", "unsupported architecture"},
		{"other model type", func(m map[string]any) { m["model_type"] = "gpt2" }, "model_type", "unsupported model type"},
		{"rope linear", func(m map[string]any) { m["rope_scaling"] = map[string]any{"type": "linear", "factor": 2} }, "rope_scaling.rope_type", "unsupported"},
		{"rope yarn", func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "yarn", "factor": 2} }, "rope_scaling.rope_type", "unsupported"},
		{"rope llama3 incomplete", func(m map[string]any) { m["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8} }, "rope_scaling.low_freq_factor", "missing"},
		{"eos out of vocab", func(m map[string]any) { m["eos_token_id"] = []int{2, 100} }, "eos_token_id", "outside the vocabulary"},
		{"bos not int", func(m map[string]any) { m["bos_token_id"] = "1" }, "bos_token_id", "token id"},
		{"bad eps", func(m map[string]any) { m["rms_norm_eps"] = 0 }, "rms_norm_eps", "positive"},
		{"missing eps", func(m map[string]any) { delete(m, "rms_norm_eps") }, "rms_norm_eps", "missing"},
		{"gelu", func(m map[string]any) { m["hidden_act"] = "gelu" }, "hidden_act", "unsupported"},
		{"bias", func(m map[string]any) { m["attention_bias"] = true }, "attention_bias", "unsupported"},
		{"dtype", func(m map[string]any) { m["torch_dtype"] = "int8" }, "torch_dtype", "unsupported"},
		{"tie not bool", func(m map[string]any) { m["tie_word_embeddings"] = "yes" }, "tie_word_embeddings", "true or false"},
		// Sizes above the limits are refused before anything is sized
		// from them, naming the limit and a real model's value.
		{"a billion layers", func(m map[string]any) { m["num_hidden_layers"] = 1_000_000_000 }, "num_hidden_layers", "want at most 1024 (Llama 3.1 405B has 126), got 1000000000"},
		{"huge hidden", func(m map[string]any) { m["hidden_size"] = 1 << 40; m["head_dim"] = 16 }, "hidden_size", "want at most 131072 (Llama 3.1 405B has 16384), got 1099511627776"},
		{"huge intermediate", func(m map[string]any) { m["intermediate_size"] = 1 << 20 }, "intermediate_size", "want at most 524288"},
		{"huge heads", func(m map[string]any) {
			m["num_attention_heads"] = 2048
			m["num_key_value_heads"] = 2048
			m["head_dim"] = 16
		}, "num_attention_heads", "want at most 1024"},
		{"huge head dim", func(m map[string]any) { m["head_dim"] = 1 << 20 }, "head_dim", "want at most 2048 (Llama 3.1 405B has 128), got 1048576"},
		{"huge vocab", func(m map[string]any) { m["vocab_size"] = 1 << 30 }, "vocab_size", "want at most 4194304 (Llama 3.1 405B has 128256)"},
		{"huge positions", func(m map[string]any) { m["max_position_embeddings"] = 1 << 40 }, "max_position_embeddings", "want at most 16777216"},
		{"huge rope original", func(m map[string]any) {
			m["rope_scaling"] = map[string]any{"rope_type": "llama3", "factor": 8, "low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 1 << 40}
		}, "rope_scaling.original_max_position_embeddings", "want at most 16777216"},
		// Each size within its limit, but together far past any model.
		{"too many parameters", func(m map[string]any) {
			m["hidden_size"], m["intermediate_size"], m["num_hidden_layers"] = MaxHiddenSize, MaxIntermediateSize, MaxLayers
		}, "", "parameters, more than the 35184372088832 (2^45) supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("dir/config.json", edit(t, tt.edit))
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.Field != tt.field {
				t.Errorf("error %q: want field %q", msg, tt.field)
			}
			for _, s := range []string{"dir/config.json", tt.msg} {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not mention %q", msg, s)
				}
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
		})
	}
}

func TestParseConfigDefaults(t *testing.T) {
	b := edit(t, func(m map[string]any) {
		delete(m, "num_key_value_heads")
		delete(m, "rope_theta")
		delete(m, "torch_dtype")
		m["rope_scaling"] = map[string]any{"rope_type": "default"}
	})
	c, err := ParseConfig("x", b)
	if err != nil {
		t.Fatal(err)
	}
	if c.NumKeyValueHeads != 4 || c.RopeTheta != 10000 || c.RopeScaling != nil || c.TorchDType != "float32" {
		t.Errorf("defaults not applied: %+v", c)
	}
}

func TestParseConfigNotJSON(t *testing.T) {
	for _, in := range []string{"", "null", "[1,2]", "{", `{"hidden_size":1} {}`} {
		if _, err := ParseConfig("c.json", []byte(in)); err == nil || !strings.Contains(err.Error(), "c.json") {
			t.Errorf("%q: error %v", in, err)
		}
	}
}

// TestParseConfigDuplicateKeys: a key given twice in config.json — at the
// top or in a nested object — is refused naming the file and the key,
// where encoding/json kept the last one silently; a key repeated in
// another object, or a value equal to a key, is no duplicate.
func TestParseConfigDuplicateKeys(t *testing.T) {
	for _, tc := range []struct{ in, key string }{
		{strings.Replace(base, `"hidden_size":64,`, `"hidden_size":64,"hidden_size":4096,`, 1), "hidden_size"},
		{strings.Replace(base, `"vocab_size":100,`, `"vocab_size":100,"num_hidden_layers":2,`, 1), "num_hidden_layers"},
		{strings.Replace(base, `"torch_dtype":"float32"`, `"torch_dtype":"float32","rope_scaling":{"rope_type":"llama3","factor":8,"factor":2}`, 1), "rope_scaling.factor"},
		{strings.Replace(base, `"torch_dtype":"float32"`, `"torch_dtype":"float32","x":[{"a":1,"a":2}]`, 1), "x.a"},
		{strings.Replace(base, `"torch_dtype":"float32"`, `"torch_dtype":"float32","":1,"":"x"`, 1), ""},
	} {
		_, err := ParseConfig("c.json", []byte(tc.in))
		want := fmt.Sprintf(`checkpoints: c.json: field %q: given twice (want each key once)`, tc.key)
		if tc.key == "" {
			want = `checkpoints: c.json: the empty key "" given twice (want each key once)`
		}
		if err == nil || err.Error() != want {
			t.Errorf("%s: error %v, want %q", tc.in, err, want)
		}
	}
	for _, in := range []string{
		base,
		strings.Replace(base, `"torch_dtype":"float32"`, `"torch_dtype":"float32","a":{"factor":1},"b":{"factor":2},"factor":[{"factor":1},{"factor":2}]`, 1),
		strings.Replace(base, `"torch_dtype":"float32"`, `"torch_dtype":"torch_dtype","":"","x":{"":{"":1}}`, 1),
	} {
		if _, err := ParseConfig("c.json", []byte(in)); err != nil && strings.Contains(err.Error(), "twice") {
			t.Errorf("%s: %v", in, err)
		}
	}
}

func TestReadConfigFolderAndMissingFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := ReadConfig(dir); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("missing config: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadConfig(dir); err != nil {
		t.Error(err)
	}
}

func TestLookupConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	want, err := ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{dir, filepath.Join(dir, ConfigFile)} {
		if got, err := LookupConfig(path); err != nil || got.HiddenSize != want.HiddenSize {
			t.Errorf("LookupConfig(%s) = %+v, %v", path, got, err)
		}
	}
	if got, err := LookupConfig("tiny"); err != nil || got.HiddenSize != 128 {
		t.Errorf("LookupConfig(tiny) = %+v, %v", got, err)
	}
	// A folder that exists is read, not looked up among the presets.
	if _, err := LookupConfig(t.TempDir()); err == nil || !strings.Contains(err.Error(), "config.json") {
		t.Errorf("empty folder: %v", err)
	}
	if _, err := LookupConfig("llama9"); err == nil || !strings.Contains(err.Error(), `"llama9" is no checkpoint folder, config file or preset (presets: `) ||
		!strings.Contains(err.Error(), "llama3.1-8b") {
		t.Errorf("unknown name: %v", err)
	}
}

// TestParamsCountsTheTensors: Params, which counts from the sizes, equals
// the sum over TensorSpecs, and at the limits neither overflows.
func TestParamsCountsTheTensors(t *testing.T) {
	var cfgs []*Config
	for _, p := range Presets() {
		cfgs = append(cfgs, p.Config())
	}
	c, err := ParseConfig("x", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	cfgs = append(cfgs, c)
	// The widest configuration within the limits whose parameter count
	// stays under MaxParams: Params must not wrap around on it.
	wide := &Config{HiddenSize: MaxHiddenSize, IntermediateSize: MaxIntermediateSize, NumHiddenLayers: 4,
		NumAttentionHeads: MaxHeads, NumKeyValueHeads: MaxHeads, HeadDim: MaxHeadDim, VocabSize: MaxVocabSize,
		MaxPositionEmbeddings: MaxPositions, RMSNormEps: 1e-5, RopeTheta: 1e4, HiddenAct: "silu", TorchDType: "float32"}
	if err := wide.Validate(); err != nil {
		t.Fatal(err)
	}
	cfgs = append(cfgs, wide)
	for _, c := range cfgs {
		var total, embedding big.Int
		for _, s := range c.TensorSpecs() {
			n := big.NewInt(1)
			for _, d := range s.Shape {
				n.Mul(n, big.NewInt(int64(d)))
			}
			total.Add(&total, n)
			if s.Name == EmbedTokensName || s.Name == LMHeadName {
				embedding.Add(&embedding, n)
			}
		}
		pc := c.Params()
		if !total.IsInt64() || pc.Total != total.Int64() || pc.Embedding != embedding.Int64() || pc.Total <= 0 {
			t.Errorf("hidden %d, %d layers: Params %+v, TensorSpecs sum to %v (embedding %v)", c.HiddenSize, c.NumHiddenLayers, pc, &total, &embedding)
		}
		if pc.NonEmbedding != pc.Total-pc.Embedding || int64(c.NumHiddenLayers)*pc.PerLayer+int64(c.HiddenSize) != pc.NonEmbedding {
			t.Errorf("hidden %d: inconsistent counts %+v", c.HiddenSize, pc)
		}
	}
}

// TestShapeCheck: an override is 0 (keep) or a size within the limits;
// Reshape refuses any other before touching the configuration.
func TestShapeCheck(t *testing.T) {
	tests := []struct {
		shape Shape
		field string
		msg   string
	}{
		{Shape{Hidden: 1_000_000_000_000}, "hidden_size", "hidden_size override 1000000000000: want at most 131072 (Llama 3.1 405B has 16384)"},
		{Shape{Layers: 1_000_000_000}, "num_hidden_layers", "num_hidden_layers override 1000000000: want at most 1024"},
		{Shape{Heads: 5000}, "num_attention_heads", "want at most 1024"},
		{Shape{KVHeads: 5000}, "num_key_value_heads", "want at most 1024"},
		{Shape{Intermediate: 1 << 30}, "intermediate_size", "want at most 524288"},
		{Shape{HeadDim: 1 << 30}, "head_dim", "want at most 2048"},
		{Shape{MaxPositions: 1 << 30}, "max_position_embeddings", "want at most 16777216"},
		{Shape{Layers: -1}, "num_hidden_layers", "num_hidden_layers override -1: want a positive size, or 0 to keep the model's"},
	}
	for _, tt := range tests {
		p, _ := LookupPreset("tiny")
		c := p.Config()
		err := c.Reshape(tt.shape)
		var se *ShapeError
		if !errors.As(err, &se) || se.Field != tt.field || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%+v: error %v, want field %s and %q", tt.shape, err, tt.field, tt.msg)
		}
		if c.HiddenSize != 128 || c.NumHiddenLayers != 4 {
			t.Errorf("%+v: a refused override changed the config: %+v", tt.shape, c)
		}
	}
	if err := (Shape{Hidden: MaxHiddenSize, Layers: MaxLayers, HeadDim: MaxHeadDim}).Check(); err != nil {
		t.Errorf("overrides at the limits: %v", err)
	}
}

// TestPresetsWithinLimits: every preset is a valid configuration.
func TestPresetsWithinLimits(t *testing.T) {
	for _, p := range Presets() {
		if err := p.Config().Validate(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
}

// fuzzAllocLimit is what parsing, validating and listing the tensors of
// one config may allocate: a few MB whatever the sizes it declares (the
// largest list, MaxLayers layers, takes about 1.5 MB), plus the parse of
// the input itself.
const fuzzAllocLimit = 4 << 20

func FuzzConfig(f *testing.F) {
	f.Add([]byte(base))
	for _, name := range []string{"llama2-7b.json", "llama3-8b.json", "llama3.1-8b.json", "llama3.2-1b.json",
		"mistral-7b-v0.1.json", "mistral-7b-v0.3.json", "qwen2.5-0.5b.json", "qwen2.5-7b.json", "qwen3-8b.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "configs", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"hidden_size":1e400}`))
	f.Add([]byte(strings.Replace(base, `"hidden_size":64,`, `"hidden_size":64,"hidden_size":4096,`, 1)))
	f.Add([]byte(`{"rope_scaling":{"factor":1,"factor":2},"x":[{"a":1,"a":2}],"":1,"":2}`))
	f.Add([]byte(`{"rope_scaling":{"rope_type":"llama3","factor":"x"}}`))
	for _, edit := range []string{`"num_hidden_layers":1000000000`, `"num_hidden_layers":1024`, `"hidden_size":1099511627776,"head_dim":16`, `"vocab_size":4194304`} {
		f.Add([]byte(strings.Replace(base, `"num_hidden_layers":2`, edit, 1)))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c, err := ParseConfig("fuzz.json", b)
		if err == nil {
			_ = c.TensorSpecs()
			_ = c.Params()
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > fuzzAllocLimit+64*uint64(len(b)) {
			t.Errorf("parsing, validating and listing the tensors of a %d-byte config allocated %d bytes", len(b), n)
		}
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.json") {
				t.Errorf("error does not name the file: %v", err)
			}
			return
		}
		// A valid config must describe a model whose sizes are consistent.
		if c.QDim() <= 0 || c.KVDim() <= 0 || c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
			t.Errorf("accepted inconsistent config %+v", c)
		}
		if _, err := json.Marshal(c); err != nil {
			t.Errorf("accepted config does not marshal: %v", err)
		}
	})
}

func TestReshape(t *testing.T) {
	p, err := LookupPreset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	c := p.Config()
	c.HeadDim = 32
	if err := c.Reshape(Shape{Hidden: 64, Heads: 2, Layers: 3, MaxPositions: 256}); err != nil {
		t.Fatal(err)
	}
	if c.HiddenSize != 64 || c.NumAttentionHeads != 2 || c.NumHiddenLayers != 3 || c.MaxPositionEmbeddings != 256 || c.HeadDim != 0 || c.NumKeyValueHeads != 2 {
		t.Errorf("reshaped %+v", c)
	}
	if err := c.Validate(); err != nil || c.HeadDimension() != 32 {
		t.Errorf("head dim %d, %v", c.HeadDimension(), err)
	}
	if err := c.Reshape(Shape{Layers: -1}); err == nil || !strings.Contains(err.Error(), "num_hidden_layers override -1") {
		t.Errorf("negative override: %v", err)
	}
	c.SetSpecialTokens(1, true, 0, false)
	if len(c.BOSTokenIDs) != 1 || c.BOSTokenIDs[0] != 1 || c.EOSTokenIDs != nil {
		t.Errorf("special tokens %v %v", c.BOSTokenIDs, c.EOSTokenIDs)
	}
}

// TestTensorCount: the count without names is the list's length.
func TestTensorCount(t *testing.T) {
	for _, p := range Presets() {
		for _, tied := range []bool{false, true} {
			c := p.Config()
			c.TieWordEmbeddings = tied
			if got, want := c.TensorCount(), len(c.TensorSpecs()); got != want {
				t.Errorf("%s tied=%v: %d tensors, the list has %d", p.Name, tied, got, want)
			}
		}
	}
}

// TestSeqLen: memtrain's one rule for a sequence length: the one asked
// for within the model's positions, else the default; a folder without a
// model bounds nothing.
func TestSeqLen(t *testing.T) {
	dir := t.TempDir()
	cfg, err := LookupConfig("tiny")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxPositionEmbeddings = 256
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	bare := t.TempDir() // a tokenizer's folder, say
	for _, c := range []struct {
		dir     string
		asked   int
		want    int
		wantErr string
	}{
		{dir, 0, 256, ""},
		{dir, 100, 100, ""},
		{dir, 256, 256, ""},
		{dir, 257, 0, "257: the model in " + dir + " takes at most 256 positions (max_position_embeddings in " + filepath.Join(dir, ConfigFile) + ")"},
		{bare, 0, MaxDefaultSeqLen, ""},
		{bare, 4096, 4096, ""},
	} {
		got, err := ModelSeqLen(c.dir, c.asked)
		if c.wantErr != "" {
			var se *SeqLenError
			if !errors.As(err, &se) || err.Error() != c.wantErr || se.Max != 256 {
				t.Errorf("ModelSeqLen(%s, %d): %v, want %q", c.dir, c.asked, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ModelSeqLen(%s, %d) = %d, %v; want %d", c.dir, c.asked, got, err, c.want)
		}
	}
	if _, err := cfg.SeqLen(300); err == nil || err.Error() != "300 exceeds the model's max_position_embeddings 256" {
		t.Errorf("Config.SeqLen(300): %v", err)
	}
	if n, err := cfg.SeqLen(0); err != nil || n != 256 {
		t.Errorf("Config.SeqLen(0) = %d, %v; want 256", n, err)
	}
}
