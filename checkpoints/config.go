package checkpoints

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/memtrain/memtrain/internal/inputfile"
)

// ConfigFile is the name of a checkpoint's model configuration.
const ConfigFile = "config.json"

// Config is the config.json of a model of one of memtrain's families
// (family.go): LlamaForCausalLM as Llama 2, 3, 3.1 and 3.2 write it,
// MistralForCausalLM, Qwen2ForCausalLM and Qwen3ForCausalLM. Field names
// follow HuggingFace's keys; zero values mean "absent" only where HF has a
// default (HeadDim, NumKeyValueHeads, RopeTheta, SlidingWindow).
type Config struct {
	Architectures         []string
	ModelType             string
	HiddenSize            int
	IntermediateSize      int
	NumHiddenLayers       int
	NumAttentionHeads     int
	NumKeyValueHeads      int
	HeadDim               int
	RMSNormEps            float64
	RopeTheta             float64
	RopeScaling           *RopeScaling
	MaxPositionEmbeddings int
	VocabSize             int
	TieWordEmbeddings     bool
	BOSTokenIDs           []int
	EOSTokenIDs           []int
	PadTokenID            *int
	TorchDType            string
	HiddenAct             string
	InitializerRange      float64
	AttentionBias         bool
	MLPBias               bool
	// SlidingWindow is sliding_window, 0 when null or absent: Mistral's
	// attention window (Config.Window); Qwen's configs carry one that
	// only UseSlidingWindow turns on, which memtrain refuses.
	SlidingWindow    int
	UseSlidingWindow bool
	MaxWindowLayers  int // Qwen's max_window_layers, kept to write it back
}

// RopeScaling is the `llama3` frequency scaling of Llama 3.1 and 3.2.
type RopeScaling struct {
	RopeType                      string
	Factor                        float64
	LowFreqFactor                 float64
	HighFreqFactor                float64
	OriginalMaxPositionEmbeddings int
}

// ConfigError reports a problem with one field of a config.json.
type ConfigError struct {
	File  string // path of the file, or "" when parsed from bytes
	Field string // the JSON key, dotted for nested keys
	Msg   string
}

func (e *ConfigError) Error() string {
	file := e.File
	if file == "" {
		file = ConfigFile
	}
	if e.Field == "" {
		return fmt.Sprintf("checkpoints: %s: %s", file, e.Msg)
	}
	return fmt.Sprintf("checkpoints: %s: field %q: %s", file, e.Field, e.Msg)
}

// ReadConfig reads and validates config.json from a file or a checkpoint
// folder.
func ReadConfig(path string) (*Config, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, ConfigFile)
	}
	b, err := inputfile.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	return ParseConfig(path, b)
}

// ParseConfig parses and validates config.json bytes; name (a path) is used
// in error messages.
func ParseConfig(name string, b []byte) (*Config, error) {
	fail := func(field, format string, args ...any) error {
		return &ConfigError{File: name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&raw); err != nil {
		return nil, fail("", "not a JSON object: %v", err)
	}
	if raw == nil {
		return nil, fail("", "not a JSON object")
	}
	if dec.More() {
		return nil, fail("", "trailing data after the JSON object")
	}
	// encoding/json keeps the last of a key given twice, silently: which
	// one a reader takes is not for it to choose.
	if key, twice := duplicateKey(b); twice && key == "" {
		return nil, fail("", `the empty key "" given twice (want each key once)`)
	} else if twice {
		return nil, fail(key, "given twice (want each key once)")
	}
	p := fieldParser{raw: raw, fail: fail}
	c := &Config{}
	c.Architectures = p.strings("architectures")
	c.ModelType = p.str("model_type", "llama")
	if p.err == nil {
		fam, err := LookupFamily(c.ModelType)
		if err != nil {
			return nil, fail("model_type", "%v", err)
		}
		if len(c.Architectures) > 0 && !contains(c.Architectures, fam.Architecture) {
			return nil, fail("architectures", "unsupported architecture %q for model_type %q (want %s)", strings.Join(c.Architectures, ", "), c.ModelType, fam.Architecture)
		}
	}
	c.HiddenSize = p.requiredInt("hidden_size")
	c.IntermediateSize = p.requiredInt("intermediate_size")
	c.NumHiddenLayers = p.requiredInt("num_hidden_layers")
	c.NumAttentionHeads = p.requiredInt("num_attention_heads")
	c.NumKeyValueHeads = p.optionalInt("num_key_value_heads", 0)
	c.HeadDim = p.optionalInt("head_dim", 0)
	c.RMSNormEps = p.requiredFloat("rms_norm_eps")
	c.RopeTheta = p.optionalFloat("rope_theta", 10000)
	c.MaxPositionEmbeddings = p.requiredInt("max_position_embeddings")
	c.VocabSize = p.requiredInt("vocab_size")
	c.TieWordEmbeddings = p.boolean("tie_word_embeddings", false)
	c.BOSTokenIDs = p.ids("bos_token_id")
	c.EOSTokenIDs = p.ids("eos_token_id")
	if pad := p.ids("pad_token_id"); len(pad) == 1 {
		c.PadTokenID = &pad[0]
	} else if len(pad) > 1 {
		p.setErr(fail("pad_token_id", "want one integer, got a list"))
	}
	c.TorchDType = p.str("torch_dtype", "float32")
	c.HiddenAct = p.str("hidden_act", "silu")
	c.InitializerRange = p.optionalFloat("initializer_range", 0.02)
	c.AttentionBias = p.boolean("attention_bias", false)
	c.MLPBias = p.boolean("mlp_bias", false)
	c.RopeScaling = p.ropeScaling("rope_scaling")
	c.SlidingWindow = p.optionalInt("sliding_window", 0)
	c.UseSlidingWindow = p.boolean("use_sliding_window", false)
	c.MaxWindowLayers = p.optionalInt("max_window_layers", 0)
	if p.err != nil {
		return nil, p.err
	}
	if c.NumKeyValueHeads == 0 {
		// Llama 2 7B/13B configs omit it: plain multi-head attention.
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	if err := c.validate(name); err != nil {
		return nil, err
	}
	return c, nil
}

// duplicateKey is the first key of a JSON document (already decoded, so
// well formed) that an object gives twice, dotted after the keys of the
// objects around it ("rope_scaling.factor"); twice is false when there
// is none.
func duplicateKey(b []byte) (key string, twice bool) {
	dec := json.NewDecoder(bytes.NewReader(b))
	type object struct {
		path    string
		array   bool // an array: its values have no keys
		seen    map[string]bool
		key     string // the last key read
		wantKey bool   // the next token is a key (or the object's end)
	}
	var stack []*object // the open objects and arrays
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *object
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if s, ok := tok.(string); ok && top != nil && top.wantKey {
			if top.seen[s] {
				return joinKey(top.path, s), true
			}
			top.seen[s] = true
			top.key, top.wantKey = s, false
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			path := ""
			if top != nil {
				path = top.path
				if !top.array {
					path = joinKey(top.path, top.key)
				}
			}
			o := &object{path: path, array: tok == json.Delim('[')}
			if !o.array {
				o.seen, o.wantKey = map[string]bool{}, true
			}
			stack = append(stack, o)
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				top = stack[len(stack)-1]
			} else {
				top = nil
			}
		}
		if top != nil && !top.array {
			top.wantKey = true // a value ends its key's pair
		}
	}
}

// joinKey is a key inside the object at path.
func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Size limits of a configuration. Every size is checked against them
// before anything is computed from it (TensorSpecs, Params, the engine's
// memory accounting), so that a config.json, preset, shape override or
// spec with an absurd size is refused in one line instead of sizing an
// allocation. They admit every real Llama with room to spare (Llama 3.1
// 405B: hidden 16384, intermediate 53248, 126 layers, 128 heads of 128,
// vocabulary 128256, 131072 positions), and under them no parameter count
// or tensor size can overflow an int64 (< 2^52 parameters), and
// TensorSpecs lists at most 9·MaxLayers+3 tensors.
const (
	MaxHiddenSize       = 1 << 17 // 131072: 8× Llama 3.1 405B's 16384
	MaxIntermediateSize = 1 << 19 // 524288: nearly 10× 405B's 53248
	MaxLayers           = 1 << 10 // 1024: 8× 405B's 126
	MaxHeads            = 1 << 10 // 1024: 8× 405B's 128 (key/value heads divide them)
	MaxHeadDim          = 1 << 11 // 2048: 16× Llama's 128
	MaxVocabSize        = 1 << 22 // 4194304: 32× Llama 3's 128256
	MaxPositions        = 1 << 24 // 16777216: 128× Llama 3.1's 131072
	// MaxParams bounds the parameter count the sizes above make together:
	// 2^45, about 35 trillion, 86× Llama 3.1 405B.
	MaxParams = 1 << 45
)

// limit is one size field's bound, and the Llama 3.1 405B value that
// messages quote to show the scale.
type limit struct {
	field string
	max   int
	real  int
}

var limits = map[string]limit{
	"hidden_size":             {"hidden_size", MaxHiddenSize, 16384},
	"intermediate_size":       {"intermediate_size", MaxIntermediateSize, 53248},
	"num_hidden_layers":       {"num_hidden_layers", MaxLayers, 126},
	"num_attention_heads":     {"num_attention_heads", MaxHeads, 128},
	"num_key_value_heads":     {"num_key_value_heads", MaxHeads, 8},
	"head_dim":                {"head_dim", MaxHeadDim, 128},
	"max_position_embeddings": {"max_position_embeddings", MaxPositions, 131072},
	"vocab_size":              {"vocab_size", MaxVocabSize, 128256},
}

// check says what was expected of v as the value of the limit's field, or
// "" when it lies in 1…max.
func (l limit) check(v int) string {
	if v >= 1 && v <= l.max {
		return ""
	}
	if v <= 0 {
		return "want a positive integer"
	}
	return fmt.Sprintf("want at most %d (Llama 3.1 405B has %d)", l.max, l.real)
}

// Validate checks the configuration's internal consistency and its sizes
// against the limits (MaxHiddenSize and the others).
func (c *Config) Validate() error { return c.validate("") }

func (c *Config) validate(name string) error {
	fail := func(field, format string, args ...any) error {
		return &ConfigError{File: name, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	sizes := []struct {
		field string
		v     int
	}{
		{"hidden_size", c.HiddenSize},
		{"intermediate_size", c.IntermediateSize},
		{"num_hidden_layers", c.NumHiddenLayers},
		{"num_attention_heads", c.NumAttentionHeads},
		{"num_key_value_heads", c.NumKeyValueHeads},
		{"max_position_embeddings", c.MaxPositionEmbeddings},
		{"vocab_size", c.VocabSize},
	}
	for _, f := range sizes {
		if msg := limits[f.field].check(f.v); msg != "" {
			return fail(f.field, "%s, got %d", msg, f.v)
		}
	}
	if c.NumAttentionHeads%c.NumKeyValueHeads != 0 {
		return fail("num_key_value_heads", "%d does not divide num_attention_heads %d", c.NumKeyValueHeads, c.NumAttentionHeads)
	}
	if c.HeadDim != 0 {
		if msg := limits["head_dim"].check(c.HeadDim); msg != "" {
			return fail("head_dim", "%s, got %d", msg, c.HeadDim)
		}
	}
	if c.ModelType == "qwen2" && c.HeadDim != 0 && c.HeadDim*c.NumAttentionHeads != c.HiddenSize {
		// transformers' Qwen2 takes hidden_size / num_attention_heads
		// whatever head_dim says.
		return fail("head_dim", "Qwen2 takes hidden_size / num_attention_heads = %d, got %d", c.HiddenSize/c.NumAttentionHeads, c.HeadDim)
	}
	if c.HeadDim == 0 && c.HiddenSize%c.NumAttentionHeads != 0 {
		return fail("hidden_size", "%d is not divisible by num_attention_heads %d and head_dim is not given", c.HiddenSize, c.NumAttentionHeads)
	}
	if c.HeadDimension()%2 != 0 {
		return fail("head_dim", "rotary embeddings need an even head dimension, got %d", c.HeadDimension())
	}
	if !(c.RMSNormEps > 0) || math.IsInf(c.RMSNormEps, 0) {
		return fail("rms_norm_eps", "want a positive number, got %v", c.RMSNormEps)
	}
	if !(c.RopeTheta > 0) || math.IsInf(c.RopeTheta, 0) {
		return fail("rope_theta", "want a positive number, got %v", c.RopeTheta)
	}
	if c.HiddenAct != "silu" {
		return fail("hidden_act", "unsupported activation %q (Llama uses silu)", c.HiddenAct)
	}
	// Qwen2's q/k/v biases are its family's, not a key of its config;
	// attention_bias would add one to o_proj too, which no family
	// memtrain computes has.
	if c.AttentionBias {
		return fail("attention_bias", "unsupported: true adds biases to every attention projection, o_proj's too (want false)")
	}
	if c.MLPBias {
		return fail("mlp_bias", "unsupported: true adds biases to the MLP's projections (want false)")
	}
	if c.SlidingWindow < 0 || c.SlidingWindow > MaxPositions {
		return fail("sliding_window", "want null or a positive number of keys up to %d, got %d", MaxPositions, c.SlidingWindow)
	}
	if c.UseSlidingWindow {
		return fail("use_sliding_window", "unsupported: Qwen's windows on some layers only (want false)")
	}
	if c.MaxWindowLayers < 0 || c.MaxWindowLayers > MaxLayers {
		return fail("max_window_layers", "want an integer of 0 to %d, got %d", MaxLayers, c.MaxWindowLayers)
	}
	if _, err := ParseDType(c.TorchDType); err != nil {
		return fail("torch_dtype", "unsupported dtype %q (want float32, bfloat16 or float16)", c.TorchDType)
	}
	for _, f := range []struct {
		field string
		ids   []int
	}{{"bos_token_id", c.BOSTokenIDs}, {"eos_token_id", c.EOSTokenIDs}} {
		for _, id := range f.ids {
			if id < 0 || id >= c.VocabSize {
				return fail(f.field, "token id %d outside the vocabulary [0, %d)", id, c.VocabSize)
			}
		}
	}
	if rs := c.RopeScaling; rs != nil {
		if rs.RopeType != "llama3" {
			return fail("rope_scaling.rope_type", "unsupported rope scaling %q (want llama3)", rs.RopeType)
		}
		if !(rs.Factor >= 1) || !(rs.LowFreqFactor > 0) || !(rs.HighFreqFactor > rs.LowFreqFactor) || rs.OriginalMaxPositionEmbeddings <= 0 {
			return fail("rope_scaling", "want factor ≥ 1, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0, got %+v", *rs)
		}
		if rs.OriginalMaxPositionEmbeddings > MaxPositions {
			return fail("rope_scaling.original_max_position_embeddings", "want at most %d (Llama 3.1 has 8192), got %d", MaxPositions, rs.OriginalMaxPositionEmbeddings)
		}
	}
	// Under the limits above the count cannot overflow; this bounds what
	// the sizes make together (a thousand layers of the widest hidden
	// size, say), before any caller sizes memory from it.
	if n := c.Params().Total; n > MaxParams {
		return fail("", "%d parameters, more than the %d (2^45) supported (Llama 3.1 405B has 405853388800)", n, int64(MaxParams))
	}
	return nil
}

// HeadDimension is the per-head width: head_dim when given, else
// hidden_size / num_attention_heads (0 without heads, as in a config not
// yet validated).
func (c *Config) HeadDimension() int {
	if c.HeadDim > 0 {
		return c.HeadDim
	}
	if c.NumAttentionHeads <= 0 {
		return 0
	}
	return c.HiddenSize / c.NumAttentionHeads
}

// MaxDefaultSeqLen caps DefaultSeqLen: long enough for every preset's
// real use, short enough that a command run without a length does not
// allocate a 128K-token context by surprise.
const MaxDefaultSeqLen = 2048

// DefaultSeqLen is memtrain's one default sequence length for a model when
// nothing else fixes it: max_position_embeddings, capped at
// MaxDefaultSeqLen. A command that reads a dataset uses the dataset's
// seq_len instead (the length it was packed for).
func (c *Config) DefaultSeqLen() int { return min(MaxDefaultSeqLen, c.MaxPositionEmbeddings) }

// A SeqLenError is a sequence length beyond a model's positions.
type SeqLenError struct {
	Asked, Max int
	Model      string // the model's folder
}

func (e *SeqLenError) Error() string {
	if e.Model == "" {
		return fmt.Sprintf("%d exceeds the model's max_position_embeddings %d", e.Asked, e.Max)
	}
	return fmt.Sprintf("%d: the model in %s takes at most %d positions (max_position_embeddings in %s)",
		e.Asked, e.Model, e.Max, filepath.Join(e.Model, ConfigFile))
}

// SeqLen is the sequence length asked for, checked against the model's
// positions, or for 0 its DefaultSeqLen. The error, a *SeqLenError, names
// no folder: the caller knows which model it read.
func (c *Config) SeqLen(asked int) (int, error) {
	switch {
	case asked == 0:
		return c.DefaultSeqLen(), nil
	case asked > c.MaxPositionEmbeddings:
		return 0, &SeqLenError{Asked: asked, Max: c.MaxPositionEmbeddings}
	}
	return asked, nil
}

// ModelSeqLen is the sequence length of data made for the model in dir
// (the folder that holds its tokenizer): asked, checked against the
// model's positions, or for asked 0 the model's DefaultSeqLen. A dir that
// holds no model (a bare tokenizer) bounds nothing: asked, or for 0
// MaxDefaultSeqLen.
func ModelSeqLen(dir string, asked int) (int, error) {
	path := filepath.Join(dir, ConfigFile)
	if _, err := os.Stat(path); err != nil {
		if asked > 0 {
			return asked, nil
		}
		return MaxDefaultSeqLen, nil
	}
	cfg, err := ReadConfig(path)
	if err != nil {
		return 0, fmt.Errorf("the sequence length is checked against the model's: %w", err)
	}
	n, err := cfg.SeqLen(asked)
	if se, ok := err.(*SeqLenError); ok {
		se.Model = dir
	}
	return n, err
}

// QDim is the width of the query projection's output, heads × head_dim.
func (c *Config) QDim() int { return c.NumAttentionHeads * c.HeadDimension() }

// KVDim is the width of the key and value projections' output.
func (c *Config) KVDim() int { return c.NumKeyValueHeads * c.HeadDimension() }

// MarshalJSON writes the config with HuggingFace's keys, as transformers
// writes config.json for the family's class: Llama's keys, and a family's
// own (Mistral's head_dim and sliding_window; Qwen2's sliding-window keys
// and no head_dim, attention_bias, mlp_bias or pretraining_tp; Qwen3's
// both).
func (c *Config) MarshalJSON() ([]byte, error) {
	fam := c.Family()
	m := map[string]any{
		"architectures":           c.architectures(),
		"model_type":              fam.ModelType,
		"hidden_size":             c.HiddenSize,
		"intermediate_size":       c.IntermediateSize,
		"num_hidden_layers":       c.NumHiddenLayers,
		"num_attention_heads":     c.NumAttentionHeads,
		"num_key_value_heads":     c.NumKeyValueHeads,
		"head_dim":                c.HeadDimension(),
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RopeTheta,
		"max_position_embeddings": c.MaxPositionEmbeddings,
		"vocab_size":              c.VocabSize,
		"tie_word_embeddings":     c.TieWordEmbeddings,
		"torch_dtype":             c.TorchDType,
		"hidden_act":              c.HiddenAct,
		"initializer_range":       c.InitializerRange,
		"attention_bias":          c.AttentionBias,
		"attention_dropout":       0.0,
		"mlp_bias":                c.MLPBias,
		"pretraining_tp":          1,
		"use_cache":               true,
		"rope_scaling":            nil,
	}
	var window any // null
	if c.SlidingWindow > 0 {
		window = c.SlidingWindow
	}
	switch fam.ModelType {
	case "mistral":
		m["sliding_window"] = window
		delete(m, "attention_bias")
		delete(m, "mlp_bias")
		delete(m, "pretraining_tp")
	case "qwen2", "qwen3":
		m["sliding_window"] = window
		m["use_sliding_window"] = c.UseSlidingWindow
		m["max_window_layers"] = c.MaxWindowLayers
		delete(m, "mlp_bias")
		delete(m, "pretraining_tp")
		if fam.ModelType == "qwen2" {
			delete(m, "head_dim")
			delete(m, "attention_bias")
		}
	}
	if c.PadTokenID != nil {
		m["pad_token_id"] = *c.PadTokenID
	}
	for key, ids := range map[string][]int{"bos_token_id": c.BOSTokenIDs, "eos_token_id": c.EOSTokenIDs} {
		switch len(ids) {
		case 0:
		case 1:
			m[key] = ids[0]
		default:
			m[key] = ids
		}
	}
	if rs := c.RopeScaling; rs != nil {
		m["rope_scaling"] = map[string]any{
			"rope_type":                        rs.RopeType,
			"factor":                           rs.Factor,
			"low_freq_factor":                  rs.LowFreqFactor,
			"high_freq_factor":                 rs.HighFreqFactor,
			"original_max_position_embeddings": rs.OriginalMaxPositionEmbeddings,
		}
	}
	return json.MarshalIndent(m, "", "  ")
}

func (c *Config) architectures() []string {
	if len(c.Architectures) > 0 {
		return c.Architectures
	}
	return []string{c.Family().Architecture}
}

// Clone returns a deep copy.
func (c *Config) Clone() *Config {
	d := *c
	d.Architectures = append([]string(nil), c.Architectures...)
	d.BOSTokenIDs = append([]int(nil), c.BOSTokenIDs...)
	d.EOSTokenIDs = append([]int(nil), c.EOSTokenIDs...)
	if c.PadTokenID != nil {
		v := *c.PadTokenID
		d.PadTokenID = &v
	}
	if c.RopeScaling != nil {
		rs := *c.RopeScaling
		d.RopeScaling = &rs
	}
	return &d
}

// fieldParser pulls typed values out of a JSON object, keeping the first
// error so that callers can read many fields and check once.
type fieldParser struct {
	raw  map[string]json.RawMessage
	fail func(field, format string, args ...any) error
	err  error
}

func (p *fieldParser) setErr(err error) {
	if p.err == nil {
		p.err = err
	}
}

// get returns the raw value of key, or nil when the key is absent or null.
func (p *fieldParser) get(key string) json.RawMessage {
	v, ok := p.raw[key]
	if !ok || string(bytes.TrimSpace(v)) == "null" {
		return nil
	}
	return v
}

func (p *fieldParser) requiredInt(key string) int {
	if p.get(key) == nil {
		p.setErr(p.fail(key, "missing (want a positive integer)"))
		return 0
	}
	return p.optionalInt(key, 0)
}

func (p *fieldParser) optionalInt(key string, def int) int {
	v := p.get(key)
	if v == nil {
		return def
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		p.setErr(p.fail(key, "want an integer, got %s", short(v)))
		return 0
	}
	return int(f)
}

func (p *fieldParser) requiredFloat(key string) float64 {
	if p.get(key) == nil {
		p.setErr(p.fail(key, "missing (want a number)"))
		return 0
	}
	return p.optionalFloat(key, 0)
}

func (p *fieldParser) optionalFloat(key string, def float64) float64 {
	v := p.get(key)
	if v == nil {
		return def
	}
	var f float64
	if err := json.Unmarshal(v, &f); err != nil {
		p.setErr(p.fail(key, "want a number, got %s", short(v)))
		return 0
	}
	return f
}

func (p *fieldParser) boolean(key string, def bool) bool {
	v := p.get(key)
	if v == nil {
		return def
	}
	var b bool
	if err := json.Unmarshal(v, &b); err != nil {
		p.setErr(p.fail(key, "want true or false, got %s", short(v)))
		return false
	}
	return b
}

func (p *fieldParser) str(key, def string) string {
	v := p.get(key)
	if v == nil {
		return def
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		p.setErr(p.fail(key, "want a string, got %s", short(v)))
		return ""
	}
	return s
}

func (p *fieldParser) strings(key string) []string {
	v := p.get(key)
	if v == nil {
		return nil
	}
	var s []string
	if err := json.Unmarshal(v, &s); err != nil {
		p.setErr(p.fail(key, "want a list of strings, got %s", short(v)))
		return nil
	}
	return s
}

// ids reads a token id field that HF writes as an int or a list of ints.
func (p *fieldParser) ids(key string) []int {
	v := p.get(key)
	if v == nil {
		return nil
	}
	var one float64
	if err := json.Unmarshal(v, &one); err == nil {
		if one != math.Trunc(one) || one < 0 || one > 1<<31 {
			p.setErr(p.fail(key, "want a non-negative integer token id, got %s", short(v)))
			return nil
		}
		return []int{int(one)}
	}
	var many []float64
	if err := json.Unmarshal(v, &many); err != nil {
		p.setErr(p.fail(key, "want a token id or a list of token ids, got %s", short(v)))
		return nil
	}
	out := make([]int, len(many))
	for i, f := range many {
		if f != math.Trunc(f) || f < 0 || f > 1<<31 {
			p.setErr(p.fail(key, "want non-negative integer token ids, got %s", short(v)))
			return nil
		}
		out[i] = int(f)
	}
	return out
}

func (p *fieldParser) ropeScaling(key string) *RopeScaling {
	v := p.get(key)
	if v == nil {
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(v, &raw); err != nil {
		p.setErr(p.fail(key, "want an object or null, got %s", short(v)))
		return nil
	}
	sub := fieldParser{raw: raw, fail: func(field, format string, args ...any) error {
		return p.fail(key+"."+field, format, args...)
	}}
	rs := &RopeScaling{}
	// transformers ≥ 4.43 writes rope_type; earlier ones wrote type.
	rs.RopeType = sub.str("rope_type", "")
	if rs.RopeType == "" {
		rs.RopeType = sub.str("type", "")
	}
	switch rs.RopeType {
	case "default":
		// Explicitly no scaling.
		return nil
	case "llama3":
	case "":
		p.setErr(p.fail(key+".rope_type", "missing (want llama3)"))
		return nil
	default:
		p.setErr(p.fail(key+".rope_type", "unsupported rope scaling type %q (only llama3 is supported)", rs.RopeType))
		return nil
	}
	rs.Factor = sub.requiredFloat("factor")
	rs.LowFreqFactor = sub.requiredFloat("low_freq_factor")
	rs.HighFreqFactor = sub.requiredFloat("high_freq_factor")
	rs.OriginalMaxPositionEmbeddings = sub.requiredInt("original_max_position_embeddings")
	p.setErr(sub.err)
	return rs
}

func short(v json.RawMessage) string {
	s := string(bytes.TrimSpace(v))
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// A Shape overrides the size fields of a Config: a positive field replaces
// the config's value, zero keeps it.
type Shape struct {
	Hidden, Layers, Heads, KVHeads, Intermediate, HeadDim, MaxPositions int
}

// A ShapeError is a Shape override out of range. Field is the config.json
// key it overrides, so that a caller can name its own spelling of it (a
// flag, a spec key).
type ShapeError struct {
	Field string
	Value int
	Msg   string // what was expected
}

func (e *ShapeError) Error() string {
	return fmt.Sprintf("checkpoints: %s override %d: %s", e.Field, e.Value, e.Msg)
}

// Check checks each override on its own: 0 (keep) or a size within the
// limits (MaxHiddenSize and the others), so that an override is refused
// before a configuration is sized from it.
func (s Shape) Check() error {
	for _, o := range []struct {
		field string
		v     int
	}{
		{"hidden_size", s.Hidden}, {"num_hidden_layers", s.Layers},
		{"num_attention_heads", s.Heads}, {"num_key_value_heads", s.KVHeads},
		{"intermediate_size", s.Intermediate}, {"head_dim", s.HeadDim},
		{"max_position_embeddings", s.MaxPositions},
	} {
		if o.v < 0 {
			return &ShapeError{o.field, o.v, "want a positive size, or 0 to keep the model's"}
		}
		if o.v > 0 {
			if msg := limits[o.field].check(o.v); msg != "" {
				return &ShapeError{o.field, o.v, msg}
			}
		}
	}
	return nil
}

// Reshape applies s to c. When the hidden size or the head count changes
// and s sets no head dimension, head_dim is derived again from them; the
// key/value heads are capped at the head count unless s sets them. The
// result is not validated.
func (c *Config) Reshape(s Shape) error {
	if err := s.Check(); err != nil {
		return err
	}
	for _, o := range []struct {
		v   int
		dst *int
	}{
		{s.Hidden, &c.HiddenSize}, {s.Layers, &c.NumHiddenLayers},
		{s.Heads, &c.NumAttentionHeads}, {s.KVHeads, &c.NumKeyValueHeads},
		{s.Intermediate, &c.IntermediateSize}, {s.HeadDim, &c.HeadDim},
		{s.MaxPositions, &c.MaxPositionEmbeddings},
	} {
		if o.v > 0 {
			*o.dst = o.v
		}
	}
	if s.HeadDim == 0 && (s.Hidden > 0 || s.Heads > 0) {
		c.HeadDim = 0 // derived from the new hidden size and head count
	}
	if s.KVHeads == 0 && c.NumKeyValueHeads > c.NumAttentionHeads {
		c.NumKeyValueHeads = c.NumAttentionHeads
	}
	return nil
}

// SetSpecialTokens sets bos_token_id and eos_token_id to the given ids,
// or clears each whose ok is false.
func (c *Config) SetSpecialTokens(bos int32, hasBOS bool, eos int32, hasEOS bool) {
	c.BOSTokenIDs, c.EOSTokenIDs = nil, nil
	if hasBOS {
		c.BOSTokenIDs = []int{int(bos)}
	}
	if hasEOS {
		c.EOSTokenIDs = []int{int(eos)}
	}
}
