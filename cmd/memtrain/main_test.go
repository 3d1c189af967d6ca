package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
)

// memtrain runs the CLI in-process and returns stdout, stderr and the exit code.
func memtrain(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

// small is a shape small enough for fast tests.
var small = []string{"--hidden", "32", "--layers", "2", "--heads", "4", "--kv-heads", "2", "--intermediate", "64"}

func initSmall(t *testing.T, extra ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ckpt")
	args := append([]string{"init", "--out", dir, "--tokenizer", "builtin:llama2", "--seed", "7"}, small...)
	out, errs, code := memtrain(t, "", append(args, extra...)...)
	if code != 0 {
		t.Fatalf("init failed (%d): %s", code, errs)
	}
	if !strings.Contains(out, "wrote "+dir) {
		t.Errorf("init output: %q", out)
	}
	return dir
}

func TestInitWritesHFCheckpoint(t *testing.T) {
	dir := initSmall(t)
	for _, f := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("missing %s: %v", f, err)
		}
	}
	cfg, err := checkpoints.ReadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.VocabSize != 32000 || cfg.HiddenSize != 32 || cfg.HeadDimension() != 8 || cfg.BOSTokenIDs[0] != 1 || cfg.EOSTokenIDs[0] != 2 {
		t.Errorf("config from tokenizer and flags wrong: %+v", cfg)
	}
	// Any plain safetensors parser must see HF names and shapes: parse the
	// file here by the format's definition alone.
	raw, err := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw)
	if (8+n)%8 != 0 {
		t.Errorf("header not 8-byte aligned: %d", n)
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+n], &header); err != nil {
		t.Fatal(err)
	}
	var meta map[string]string
	json.Unmarshal(header["__metadata__"], &meta)
	if meta["format"] != "pt" {
		t.Errorf("metadata = %v", meta)
	}
	want := map[string][]int{}
	for _, s := range cfg.TensorSpecs() {
		want[s.Name] = s.Shape
	}
	if _, ok := want["lm_head.weight"]; ok {
		t.Error("tiny shares its embeddings; no lm_head expected")
	}
	var names []string
	for name, v := range header {
		if name == "__metadata__" {
			continue
		}
		names = append(names, name)
		var e struct {
			DType   string  `json:"dtype"`
			Shape   []int   `json:"shape"`
			Offsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(v, &e); err != nil {
			t.Fatal(err)
		}
		if e.DType != "F32" || !slices.Equal(e.Shape, want[name]) {
			t.Errorf("%s: %s %v, want F32 %v", name, e.DType, e.Shape, want[name])
		}
		elems := int64(1)
		for _, d := range e.Shape {
			elems *= int64(d)
		}
		if e.Offsets[1]-e.Offsets[0] != 4*elems || 8+int64(n)+e.Offsets[1] > int64(len(raw)) {
			t.Errorf("%s: offsets %v", name, e.Offsets)
		}
	}
	if len(names) != len(want) {
		sort.Strings(names)
		t.Errorf("tensors %v, want %d", names, len(want))
	}
}

func TestInitDeterministic(t *testing.T) {
	a := initSmall(t, "--dtype", "bf16")
	b := initSmall(t, "--dtype", "bf16")
	for _, f := range []string{"model.safetensors", "config.json"} {
		x, _ := os.ReadFile(filepath.Join(a, f))
		y, _ := os.ReadFile(filepath.Join(b, f))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two inits with the same seed", f)
		}
	}
	ck, err := checkpoints.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if ck.Config.TorchDType != "bfloat16" {
		t.Errorf("torch_dtype = %s", ck.Config.TorchDType)
	}
	norm, err := ck.Weights.ReadFloat32("model.layers.1.input_layernorm.weight")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range norm {
		if v != 1 {
			t.Fatalf("norm weight %v, want 1", v)
		}
	}
	emb, err := ck.Weights.ReadFloat32(checkpoints.EmbedTokensName)
	if err != nil {
		t.Fatal(err)
	}
	var sum, sq float64
	for _, v := range emb {
		sum += float64(v)
		sq += float64(v) * float64(v)
	}
	mean := sum / float64(len(emb))
	std := (sq/float64(len(emb)) - mean*mean)
	if !(mean >= -1e-3 && mean <= 1e-3) || !(std >= 0.0195*0.0195 && std <= 0.0205*0.0205) {
		t.Errorf("embedding mean %g variance %g, want 0 and 0.02²", mean, std)
	}
}

func TestInitRefusesToOverwrite(t *testing.T) {
	dir := initSmall(t)
	_, errs, code := memtrain(t, "", append([]string{"init", "--out", dir, "--tokenizer", "builtin:llama2"}, small...)...)
	if code != 1 || !strings.Contains(errs, "--force") {
		t.Errorf("overwrite: code %d, %q", code, errs)
	}
}

func TestInspect(t *testing.T) {
	dir := initSmall(t)
	out, errs, code := memtrain(t, "", "inspect", dir, "--json", "--batch", "2", "--seq-len", "16")
	if code != 0 {
		t.Fatal(errs)
	}
	var rep finetune.ModelReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	// embed 32000×32, 2 layers × (q 32×32, k,v 16×32, o 32×32, 3 × 64×32, 2 norms), final norm.
	wantTotal := int64(32000*32 + 2*(32*32+2*16*32+32*32+3*64*32+2*32) + 32)
	if rep.Params.Total != wantTotal || rep.Params.Embedding != 32000*32 {
		t.Errorf("params %+v, want total %d", rep.Params, wantTotal)
	}
	// The weights as the engine holds them: with the RoPE table, head_dim/2 = 4 floats.
	if rep.Training.Weights != 4*wantTotal+4*4 || rep.Training.Gradients != 4*wantTotal || rep.Training.OptimizerState != 8*wantTotal {
		t.Errorf("training memory %+v", rep.Training)
	}
	if rep.Stored == nil || rep.Stored.Bytes["F32"] != 4*wantTotal || len(rep.Stored.Files) != 1 {
		t.Errorf("stored %+v", rep.Stored)
	}
	if rep.Tokenizer == nil || rep.Tokenizer.VocabSize != 32000 {
		t.Errorf("tokenizer %+v", rep.Tokenizer)
	}
	out, errs, code = memtrain(t, "", "inspect", dir)
	if code != 0 || !strings.Contains(out, "non-embedding") || !strings.Contains(out, "optimizer") {
		t.Errorf("table output (%d, %s):\n%s", code, errs, out)
	}
}

func TestInspectPresets(t *testing.T) {
	out, errs, code := memtrain(t, "", "inspect", "--preset", "llama3.1-405b", "--json", "--precision", "bf16")
	if code != 0 {
		t.Fatal(errs)
	}
	var rep finetune.ModelReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Params.Total != 405_853_388_800 {
		t.Errorf("405B params = %d", rep.Params.Total)
	}
	// bf16 mixed: 4 bytes of master weight, 4 of gradient and 8 of
	// moments a parameter, 2 more for a matrix's bf16 copy.
	if st := rep.Training.Weights + rep.Training.Gradients + rep.Training.OptimizerState; st <= 16*rep.Params.Total || st >= 18*rep.Params.Total {
		t.Errorf("bf16 state bytes %+v", rep.Training)
	}
	if tr := rep.Training; tr.ActivationsRecompute >= tr.ActivationsSelective || tr.ActivationsSelective >= tr.Activations {
		t.Errorf("recomputation should save memory, full more than selective: %+v", rep.Training)
	}
}

// TestInspectLoRAPrecision: a LoRA fine-tune is sized, and said to be
// sized, at --precision, as the full fine-tune is: with bf16 the base is
// held in bf16 (the small preset is stored in f32) and the adapters have
// bf16 copies, as llama.Memory counts them.
func TestInspectLoRAPrecision(t *testing.T) {
	var params [2]int64
	for i, p := range []string{"f32", "bf16"} {
		out, errs, code := memtrain(t, "", "inspect", "--preset", "small", "--lora", "8", "--precision", p, "--json")
		if code != 0 {
			t.Fatal(errs)
		}
		var rep finetune.ModelReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.LoRA == nil || !strings.HasPrefix(rep.LoRA.Precision, p) || rep.LoRA.Precision != rep.Training.Precision || rep.LoRA.BaseDType != p {
			t.Fatalf("--precision %s: LoRA %+v, full fine-tune at %q", p, rep.LoRA, rep.Training.Precision)
		}
		params[i] = rep.LoRA.Params
		out, errs, code = memtrain(t, "", "inspect", "--preset", "small", "--lora", "8", "--precision", p)
		copies := strings.Contains(out, "adapters f32 with gradients and bf16 copies")
		if code != 0 || !strings.Contains(out, "AdamW, "+rep.LoRA.Precision) || copies != (p == "bf16") {
			t.Errorf("--precision %s: table (%d, %s):\n%s", p, code, errs, out)
		}
	}
	if !(params[1] < params[0]) {
		t.Errorf("LoRA weights: %d bytes in bf16, %d in f32; want the bf16 base smaller", params[1], params[0])
	}
}

// TestInspectIsTheEngines: inspect's fine-tuning memory, at both
// precisions and with and without recomputation, is the engine's
// accounting of what one rank allocates (llama.Itemize), which the llama
// tests check against the backends' allocation counters.
func TestInspectIsTheEngines(t *testing.T) {
	p, err := checkpoints.LookupPreset("llama3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	cfg := p.Config()
	for _, c := range []struct {
		flag string
		act  engine.DType
	}{{"f32", engine.F32}, {"bf16", engine.BF16}} {
		out, errs, code := memtrain(t, "", "inspect", "--preset", "llama3.1-8b", "--precision", c.flag, "--seq-len", "8192", "--json")
		if code != 0 {
			t.Fatal(errs)
		}
		var rep finetune.ModelReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		w := llama.Work{Train: true, Moments: 2, Batch: 1, SeqLen: 8192, Micro: 1, Activations: c.act}
		it := llama.Itemize(cfg, w)
		w.Recompute = llama.RecomputeSelective
		sel := llama.Itemize(cfg, w)
		w.Recompute = llama.RecomputeFull
		rec := llama.Itemize(cfg, w)
		tr := rep.Training
		if tr.Weights != it.Weights || tr.Gradients != it.Gradients || tr.OptimizerState != it.Optimizer ||
			tr.Activations != it.Activations || tr.ActivationsRecompute != rec.Activations ||
			tr.ActivationsSelective != sel.Activations || tr.TotalSelective != sel.Total() ||
			tr.Total != llama.Memory(cfg, w).Total()-rec.Activations+it.Activations || tr.TotalRecompute != llama.Memory(cfg, w).Total() {
			t.Errorf("%s: inspect %+v, the engine %+v / recomputing %+v", c.flag, tr, it, rec)
		}
	}
}

func TestTokenizeRoundTrip(t *testing.T) {
	in := `{"text":"Hello world"}` + "\n\n" + `{"text":"It is a truth universally acknowledged."}` + "\n"
	out, errs, code := memtrain(t, in, "tokenize", "--tokenizer", "builtin:llama3", "--special")
	if code != 0 {
		t.Fatal(errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || lines[0] != `{"ids":[128000,9906,1917]}` {
		t.Fatalf("encode output:\n%s", out)
	}
	dec, errs, code := memtrain(t, out, "tokenize", "--tokenizer", "builtin:llama3", "--decode", "--skip-special")
	if code != 0 {
		t.Fatal(errs)
	}
	want := `{"text":"Hello world"}` + "\n" + `{"text":"It is a truth universally acknowledged."}` + "\n"
	if dec != want {
		t.Errorf("decode:\n%s\nwant\n%s", dec, want)
	}
}

func TestTokenizeFromCheckpointFolder(t *testing.T) {
	dir := initSmall(t)
	input := filepath.Join(t.TempDir(), "in.jsonl")
	os.WriteFile(input, []byte(`{"body":"Hello <s> world"}`+"\n"), 0o644)
	out, errs, code := memtrain(t, "", "tokenize", "--tokenizer", dir, "--input", input, "--field", "body")
	if code != 0 || out != `{"ids":[15043,29871,1,29871,3186]}`+"\n" {
		t.Errorf("(%d %s) %s", code, errs, out)
	}
	out, _, _ = memtrain(t, "", "tokenize", "--tokenizer", dir, "--input", input, "--field", "body", "--split-special")
	if out != `{"ids":[15043,529,29879,29958,3186]}`+"\n" {
		t.Errorf("split special: %s", out)
	}
}

// TestErrors checks that bad input gives one line on stderr naming what is
// wrong, and exit code 1.
func TestErrors(t *testing.T) {
	good := initSmall(t)
	copyDir := func(t *testing.T) string {
		dst := filepath.Join(t.TempDir(), "c")
		os.MkdirAll(dst, 0o755)
		entries, _ := os.ReadDir(good)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(good, e.Name()))
			os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
		}
		return dst
	}
	editConfig := func(t *testing.T, dir string, fn func(m map[string]any)) {
		b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
		var m map[string]any
		json.Unmarshal(b, &m)
		fn(m)
		b, _ = json.Marshal(m)
		os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644)
	}
	tests := []struct {
		name  string
		setup func(t *testing.T) []string
		want  []string
	}{
		{"truncated safetensors", func(t *testing.T) []string {
			d := copyDir(t)
			p := filepath.Join(d, "model.safetensors")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
			return []string{"inspect", d}
		}, []string{"model.safetensors"}},
		{"header offsets out of range", func(t *testing.T) []string {
			d := copyDir(t)
			p := filepath.Join(d, "model.safetensors")
			b, _ := os.ReadFile(p)
			n := binary.LittleEndian.Uint64(b)
			hdr := strings.Replace(string(b[8:8+n]), `"data_offsets":[0,`, `"data_offsets":[99999999,`, 1)
			out := append(binary.LittleEndian.AppendUint64(nil, uint64(len(hdr))), hdr...)
			os.WriteFile(p, append(out, b[8+n:]...), 0o644)
			return []string{"inspect", d}
		}, []string{"model.safetensors"}},
		{"unknown dtype", func(t *testing.T) []string {
			d := copyDir(t)
			p := filepath.Join(d, "model.safetensors")
			b, _ := os.ReadFile(p)
			b = bytes.Replace(b, []byte(`"dtype":"F32"`), []byte(`"dtype":"Q4K"`), 1)
			os.WriteFile(p, b, 0o644)
			return []string{"inspect", d}
		}, []string{"model.safetensors", "Q4K"}},
		{"missing config key", func(t *testing.T) []string {
			d := copyDir(t)
			editConfig(t, d, func(m map[string]any) { delete(m, "hidden_size") })
			return []string{"inspect", d}
		}, []string{"config.json", "hidden_size", "missing"}},
		{"shape disagrees with config", func(t *testing.T) []string {
			d := copyDir(t)
			editConfig(t, d, func(m map[string]any) { m["intermediate_size"] = 48 })
			return []string{"inspect", d}
		}, []string{"model.safetensors", "mlp.", "shape"}},
		{"unsupported tokenizer model", func(t *testing.T) []string {
			p := filepath.Join(t.TempDir(), "tokenizer.json")
			os.WriteFile(p, []byte(`{"model":{"type":"Unigram","vocab":[["a",0]]}}`), 0o644)
			return []string{"tokenize", "--tokenizer", p}
		}, []string{"tokenizer.json", "Unigram"}},
		{"tokenizer file missing", func(t *testing.T) []string {
			return []string{"tokenize", "--tokenizer", filepath.Join(t.TempDir(), "nope.json")}
		}, []string{"nope.json"}},
		{"invalid JSONL", func(t *testing.T) []string {
			p := filepath.Join(t.TempDir(), "bad.jsonl")
			os.WriteFile(p, []byte("{\"text\":\"a\"}\n{oops\n"), 0o644)
			return []string{"tokenize", "--tokenizer", "builtin:llama2", "--input", p}
		}, []string{"bad.jsonl:2", "invalid JSON"}},
		{"id outside vocab", func(t *testing.T) []string {
			p := filepath.Join(t.TempDir(), "ids.jsonl")
			os.WriteFile(p, []byte(`{"ids":[1,32000]}`+"\n"), 0o644)
			return []string{"tokenize", "--tokenizer", "builtin:llama2", "--input", p, "--decode"}
		}, []string{"ids.jsonl:1", "32000"}},
		{"unknown preset", func(t *testing.T) []string { return []string{"inspect", "--preset", "tinyy"} },
			[]string{`memtrain: inspect: --preset: unknown preset "tinyy" (want one of `, `; did you mean "tiny"?)`}},
		{"unknown flag", func(t *testing.T) []string { return []string{"inspect", "--bogus"} }, []string{"bogus"}},
		{"bad grid of heads", func(t *testing.T) []string {
			return []string{"init", "--out", filepath.Join(t.TempDir(), "x"), "--tokenizer", "builtin:llama2", "--heads", "4", "--kv-heads", "3"}
		}, []string{"num_key_value_heads"}},
		{"bad shard size", func(t *testing.T) []string {
			return []string{"init", "--out", filepath.Join(t.TempDir(), "x"), "--tokenizer", "builtin:llama2", "--max-shard-size", "-5GB"}
		}, []string{"--max-shard-size", `"-5GB"`}},
		{"too big for init", func(t *testing.T) []string {
			return []string{"init", "--out", filepath.Join(t.TempDir(), "x"), "--tokenizer", "builtin:llama3", "--preset", "llama3.1-8b"}
		}, []string{"inspect --preset"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errs, code := memtrain(t, "", tt.setup(t)...)
			if code != 1 {
				t.Fatalf("exit code %d, stdout %q", code, out)
			}
			if strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, "memtrain: ") {
				t.Errorf("stderr is not one line: %q", errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q does not mention %q", errs, w)
				}
			}
		})
	}
}

func TestVersion(t *testing.T) {
	out, _, code := memtrain(t, "", "version")
	if code != 0 || !strings.HasPrefix(out, "memtrain "+version) {
		t.Errorf("%d %q", code, out)
	}
}
