package checkpoints

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/memtrain/memtrain/internal/atomicfile"
	"github.com/memtrain/memtrain/internal/inputfile"
)

// The files of a PEFT LoRA adapter folder, as peft's save_pretrained
// writes them.
const (
	AdapterConfigFile  = "adapter_config.json"
	AdapterWeightsFile = "adapter_model.safetensors"
)

// MaxLoRARank bounds an adapter's rank: far above any published use, low
// enough that no adapter of a valid model can overflow a count.
const MaxLoRARank = 4096

// loraModules are the projections a LoRA adapter may target: PEFT's
// target_modules names and their paths inside a decoder layer, in the
// order of a layer's state dict.
var loraModules = []struct{ name, path string }{
	{"q_proj", "self_attn.q_proj"},
	{"k_proj", "self_attn.k_proj"},
	{"v_proj", "self_attn.v_proj"},
	{"o_proj", "self_attn.o_proj"},
	{"gate_proj", "mlp.gate_proj"},
	{"up_proj", "mlp.up_proj"},
	{"down_proj", "mlp.down_proj"},
}

// LoRAModules lists the module names a LoRA adapter may target, in a
// layer's order.
func LoRAModules() []string {
	out := make([]string, len(loraModules))
	for i, m := range loraModules {
		out[i] = m.name
	}
	return out
}

// LoRAModulePath is the HF path of a target module inside a layer, e.g.
// "self_attn.q_proj" for "q_proj" (LayerTensorName's module).
func LoRAModulePath(module string) (string, bool) {
	for _, m := range loraModules {
		if m.name == module {
			return m.path, true
		}
	}
	return "", false
}

// LoRATensorName is the name PEFT saves an adapter matrix under, e.g.
// LoRATensorName(3, "q_proj", "A") =
// "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight".
// which is "A" or "B".
func LoRATensorName(layer int, module, which string) string {
	path, ok := LoRAModulePath(module)
	if !ok {
		panic(fmt.Sprintf("checkpoints: %q is not a LoRA target module", module))
	}
	return fmt.Sprintf("base_model.model.model.layers.%d.%s.lora_%s.weight", layer, path, which)
}

// AdapterConfig is a PEFT LoRA adapter's adapter_config.json: the keys
// memtrain reads and writes. Keys PEFT writes that change nothing for a
// plain LoRA (revision, inference_mode, …) are kept on write and checked
// on read where they would change the model.
type AdapterConfig struct {
	PEFTType            string   `json:"peft_type"`
	TaskType            string   `json:"task_type"`
	R                   int      `json:"r"`
	LoRAAlpha           float64  `json:"lora_alpha"`
	LoRADropout         float64  `json:"lora_dropout"`
	TargetModules       []string `json:"target_modules"`
	Bias                string   `json:"bias"`
	UseRSLoRA           bool     `json:"use_rslora"`
	FanInFanOut         bool     `json:"fan_in_fan_out"`
	BaseModelNameOrPath string   `json:"base_model_name_or_path"`
	InferenceMode       bool     `json:"inference_mode"`
	InitLoRAWeights     bool     `json:"init_lora_weights"`
}

// Scale is the factor of the adapter's product, s in W + s·B·A:
// lora_alpha / r, or lora_alpha / √r with rsLoRA.
func (a *AdapterConfig) Scale() float64 {
	if a.UseRSLoRA {
		return a.LoRAAlpha / math.Sqrt(float64(a.R))
	}
	return a.LoRAAlpha / float64(a.R)
}

// Targets reports whether the adapter targets module.
func (a *AdapterConfig) Targets(module string) bool {
	return slices.Contains(a.TargetModules, module)
}

// Validate checks what memtrain can apply: a plain LoRA on the
// projections, no bias, no fan-in-fan-out layout.
func (a *AdapterConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &ConfigError{File: AdapterConfigFile, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case a.PEFTType != "LORA":
		return bad("peft_type", "%q: want \"LORA\"", a.PEFTType)
	case a.TaskType != "" && a.TaskType != "CAUSAL_LM":
		return bad("task_type", "%q: want \"CAUSAL_LM\"", a.TaskType)
	case a.R < 1 || a.R > MaxLoRARank:
		return bad("r", "%d: want a rank from 1 to %d", a.R, MaxLoRARank)
	case math.IsNaN(a.LoRAAlpha) || math.IsInf(a.LoRAAlpha, 0) || a.LoRAAlpha <= 0:
		return bad("lora_alpha", "%v: want a positive number", a.LoRAAlpha)
	case !(a.LoRADropout >= 0 && a.LoRADropout < 1):
		return bad("lora_dropout", "%v: want a probability in [0, 1)", a.LoRADropout)
	case a.Bias != "" && a.Bias != "none":
		return bad("bias", "%q: memtrain's adapters have no bias terms (want \"none\")", a.Bias)
	case a.FanInFanOut:
		return bad("fan_in_fan_out", "true: Llama's projections are nn.Linear (want false)")
	case len(a.TargetModules) == 0:
		return bad("target_modules", "empty: want some of %s", strings.Join(LoRAModules(), ", "))
	}
	seen := map[string]bool{}
	for _, m := range a.TargetModules {
		if _, ok := LoRAModulePath(m); !ok {
			return bad("target_modules", "%q: want some of %s", m, strings.Join(LoRAModules(), ", "))
		}
		if seen[m] {
			return bad("target_modules", "%q listed twice", m)
		}
		seen[m] = true
	}
	return nil
}

// ParseAdapterConfig reads adapter_config.json's bytes (path names the
// file in errors). target_modules may be a list or PEFT's shorthand
// "all-linear"; a regular expression, layer selections and per-module
// ranks or alphas are refused, as are modules to save besides the
// adapter: memtrain would not apply them.
func ParseAdapterConfig(path string, raw []byte) (*AdapterConfig, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil, fmt.Errorf("checkpoints: %s: %w", path, err)
	}
	bad := func(field, format string, args ...any) error {
		return &ConfigError{File: path, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	empty := func(v json.RawMessage) bool {
		s := string(bytes.TrimSpace(v))
		return s == "null" || s == "{}" || s == "[]" || s == "false"
	}
	// Settings that would change the model memtrain builds. (Settings of
	// initialisation alone, such as loftq_config, do not: the saved
	// weights are what counts.)
	for _, k := range []string{"modules_to_save", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern", "use_dora"} {
		if v, ok := keys[k]; ok && !empty(v) {
			return nil, bad(k, "%s: memtrain applies a plain LoRA (want null or empty)", bytes.TrimSpace(v))
		}
	}
	if v, ok := keys["target_modules"]; ok {
		var s string
		if json.Unmarshal(v, &s) == nil {
			if s != "all-linear" {
				return nil, bad("target_modules", "%q: a pattern; want a list of module names or \"all-linear\"", s)
			}
			list, _ := json.Marshal(LoRAModules())
			keys["target_modules"] = list
			raw, _ = json.Marshal(keys)
		}
	}
	var a AdapterConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&a); err != nil {
		var te *json.UnmarshalTypeError
		if ok := asTypeError(err, &te); ok {
			return nil, bad(te.Field, "%s: want %s", te.Value, te.Type)
		}
		return nil, fmt.Errorf("checkpoints: %s: %w", path, err)
	}
	if err := a.Validate(); err != nil {
		if ce, ok := err.(*ConfigError); ok {
			ce.File = path
		}
		return nil, err
	}
	return &a, nil
}

func asTypeError(err error, te **json.UnmarshalTypeError) bool {
	t, ok := err.(*json.UnmarshalTypeError)
	if ok {
		*te = t
	}
	return ok
}

// AdapterTensorSpecs lists the adapter matrices a LoRA adapter of a on a
// model of c holds, in PEFT's state-dict order: lora_A [r, in] then
// lora_B [out, r] of each target of each layer. Adapters are
// SplitReplicated: the engine keeps them whole on every rank, and sums
// their gradients over the ranks that split their target's input and
// output, as the target's declared Split says (engine/llama's lora.go).
func (c *Config) AdapterTensorSpecs(a *AdapterConfig) []TensorSpec {
	shapes := map[string][]int{}
	for _, s := range c.TensorSpecs() {
		shapes[s.Name] = s.Shape
	}
	var specs []TensorSpec
	for l := 0; l < c.NumHiddenLayers; l++ {
		for _, m := range loraModules {
			if !a.Targets(m.name) {
				continue
			}
			w := shapes[LayerTensorName(l, m.path)] // [out, in]
			specs = append(specs,
				TensorSpec{Name: LoRATensorName(l, m.name, "A"), Shape: []int{a.R, w[1]}, Role: RoleLoRAA, Split: SplitReplicated, Layer: l},
				TensorSpec{Name: LoRATensorName(l, m.name, "B"), Shape: []int{w[0], a.R}, Role: RoleLoRAB, Split: SplitReplicated, Layer: l})
		}
	}
	return specs
}

// AdapterParams counts an adapter's parameters on a model of c.
func (c *Config) AdapterParams(a *AdapterConfig) int64 {
	var n int64
	for _, s := range c.AdapterTensorSpecs(a) {
		n += s.Elements()
	}
	return n
}

// An Adapter is an opened PEFT LoRA adapter folder: its configuration and
// its weights, checked against the model it adapts.
type Adapter struct {
	Dir     string
	Config  *AdapterConfig
	Weights *File
}

// OpenAdapter reads dir's adapter_config.json and adapter_model.safetensors
// and checks that the weights are exactly the matrices the configuration
// implies on a model of cfg, with their shapes.
func OpenAdapter(dir string, cfg *Config) (*Adapter, error) {
	path := filepath.Join(dir, AdapterConfigFile)
	raw, err := inputfile.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("checkpoints: %s: not a PEFT adapter folder (no %s)", dir, AdapterConfigFile)
		}
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	ac, err := ParseAdapterConfig(path, raw)
	if err != nil {
		return nil, err
	}
	wpath := filepath.Join(dir, AdapterWeightsFile)
	if _, err := os.Stat(wpath); err != nil && isFileAt(filepath.Join(dir, SafetensorsFile)) {
		// A LoRA run's training checkpoint: its model.safetensors holds
		// the adapter, whole, by PEFT name.
		wpath = filepath.Join(dir, SafetensorsFile)
	}
	if _, err := inputfile.Stat(wpath); err != nil {
		if _, binErr := os.Stat(filepath.Join(dir, "adapter_model.bin")); binErr == nil {
			return nil, fmt.Errorf("checkpoints: %s: the adapter is a pickled adapter_model.bin; memtrain reads %s (save it with safe_serialization=True)", dir, AdapterWeightsFile)
		}
		return nil, fmt.Errorf("checkpoints: %w", err)
	}
	f, err := OpenFile(wpath)
	if err != nil {
		return nil, err
	}
	if err := checkAdapterTensors(wpath, cfg, ac, f); err != nil {
		f.Close()
		return nil, err
	}
	return &Adapter{Dir: dir, Config: ac, Weights: f}, nil
}

func checkAdapterTensors(path string, cfg *Config, ac *AdapterConfig, f *File) error {
	specs := cfg.AdapterTensorSpecs(ac)
	want := map[string]bool{}
	for _, s := range specs {
		want[s.Name] = true
		info, ok := f.Tensor(s.Name)
		if !ok {
			return fmt.Errorf("checkpoints: %s: tensor %q missing (the adapter targets %s on %d layers)", path, s.Name, strings.Join(ac.TargetModules, ", "), cfg.NumHiddenLayers)
		}
		if !slices.Equal(info.Shape, s.Shape) {
			return fmt.Errorf("checkpoints: %s: tensor %q: shape %v, want %v (r = %d on this model)", path, s.Name, info.Shape, s.Shape, ac.R)
		}
	}
	for _, info := range f.Tensors() {
		if !want[info.Name] {
			return fmt.Errorf("checkpoints: %s: unexpected tensor %q (not a LoRA matrix of the adapter's targets on this model)", path, info.Name)
		}
	}
	return nil
}

// Close releases the adapter's weights.
func (a *Adapter) Close() error { return a.Weights.Close() }

// SaveAdapter writes a PEFT adapter folder: adapter_model.safetensors
// (float32, PEFT's names) and then adapter_config.json, each atomically,
// so that a folder with a config always holds its weights. The tensors
// must be exactly those of cfg.AdapterTensorSpecs(ac).
func SaveAdapter(dir string, cfg *Config, ac *AdapterConfig, tensors []Tensor) error {
	if err := ac.Validate(); err != nil {
		return err
	}
	specs := cfg.AdapterTensorSpecs(ac)
	if len(tensors) != len(specs) {
		return fmt.Errorf("checkpoints: %s: %d adapter tensors given, the adapter implies %d", dir, len(tensors), len(specs))
	}
	for i, s := range specs {
		if tensors[i].Name != s.Name || !slices.Equal(tensors[i].Shape, s.Shape) {
			return fmt.Errorf("checkpoints: %s: adapter tensor %d is %q %v, want %q %v", dir, i, tensors[i].Name, tensors[i].Shape, s.Name, s.Shape)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("checkpoints: %w", err)
	}
	if err := WriteFile(filepath.Join(dir, AdapterWeightsFile), tensors, DTypeF32, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	b, err := AdapterConfigJSON(ac)
	if err != nil {
		return fmt.Errorf("checkpoints: %s: %w", dir, err)
	}
	return atomicfile.WriteFile(filepath.Join(dir, AdapterConfigFile), b)
}

// AdapterConfigJSON is adapter_config.json's bytes for ac, with the keys
// PEFT expects beside memtrain's at their plain-LoRA values.
func AdapterConfigJSON(ac *AdapterConfig) ([]byte, error) {
	out := *ac
	out.InferenceMode = true // as PEFT's save_pretrained writes it
	if out.PEFTType == "" {
		out.PEFTType = "LORA"
	}
	if out.TaskType == "" {
		out.TaskType = "CAUSAL_LM"
	}
	if out.Bias == "" {
		out.Bias = "none"
	}
	b, err := json.MarshalIndent(adapterConfigFile{AdapterConfig: out}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// adapterConfigFile is adapter_config.json as written: the AdapterConfig
// and the keys PEFT expects beside it, at their plain-LoRA values.
type adapterConfigFile struct {
	AdapterConfig
	ModulesToSave     []string           `json:"modules_to_save"`
	LayersToTransform []int              `json:"layers_to_transform"`
	RankPattern       map[string]int     `json:"rank_pattern"`
	AlphaPattern      map[string]float64 `json:"alpha_pattern"`
	Revision          *string            `json:"revision"`
	UseDoRA           bool               `json:"use_dora"`
}

func (f adapterConfigFile) MarshalJSON() ([]byte, error) {
	type plain adapterConfigFile // no MarshalJSON: the default encoding
	p := plain(f)
	if p.RankPattern == nil {
		p.RankPattern = map[string]int{}
	}
	if p.AlphaPattern == nil {
		p.AlphaPattern = map[string]float64{}
	}
	return json.Marshal(p)
}

// IsAdapterName reports whether name is a PEFT adapter tensor's name
// (LoRATensorName's form) rather than a model weight's.
func IsAdapterName(name string) bool { return strings.HasPrefix(name, "base_model.model.") }

func isFileAt(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular()
}

// AdapterBase reads the base_model_name_or_path of the adapter folder dir.
func AdapterBase(dir string) (string, error) {
	path := filepath.Join(dir, AdapterConfigFile)
	raw, err := inputfile.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("checkpoints: %w", err)
	}
	ac, err := ParseAdapterConfig(path, raw)
	if err != nil {
		return "", err
	}
	return ac.BaseModelNameOrPath, nil
}
