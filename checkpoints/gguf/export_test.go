package gguf

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestPermuteByHand: two heads of four rows (one column each): in each
// head rows 0, 1 (the first half) and 2, 3 (the second) interleave to
// 0, 2, 1, 3.
func TestPermuteByHand(t *testing.T) {
	w := []float32{0, 1, 2, 3, 4, 5, 6, 7}
	got := Permute(w, 2, 1)
	if err := numtest.Equal(got, []float32{0, 2, 1, 3, 4, 6, 5, 7}); err != nil {
		t.Fatal(err)
	}
	// Two columns: rows move whole.
	w = []float32{0, 10, 1, 11, 2, 12, 3, 13}
	if err := numtest.Equal(Permute(w, 1, 2), []float32{0, 10, 2, 12, 1, 11, 3, 13}); err != nil {
		t.Fatal(err)
	}
}

// TestPermuteRoPE is why the rows are permuted: HF's rotate-half RoPE of
// W·x (dimension i paired with i + D/2) equals GGML's interleaved RoPE
// (2i paired with 2i + 1) of Permute(W)·x, dimension 2i + j of the one
// being dimension j·D/2 + i of the other, bit for bit (the same products
// and sums), so attention scores are unchanged.
func TestPermuteRoPE(t *testing.T) {
	const heads, d, cols = 3, 8, 5
	r := rand.New(rand.NewPCG(5, 6))
	w := make([]float32, heads*d*cols)
	for i := range w {
		w[i] = float32(r.NormFloat64())
	}
	x := make([]float32, cols)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	matvec := func(w []float32) []float32 {
		out := make([]float32, len(w)/cols)
		for i := range out {
			for j := range cols {
				out[i] += w[i*cols+j] * x[j]
			}
		}
		return out
	}
	const pos = 7
	theta := func(i int) (float32, float32) {
		a := pos * math.Pow(10000, -2*float64(i)/d)
		return float32(math.Cos(a)), float32(math.Sin(a))
	}
	hf := matvec(w)
	gg := matvec(Permute(w, heads, cols))
	for h := range heads {
		q, p := hf[h*d:(h+1)*d], gg[h*d:(h+1)*d]
		hfOut, ggOut := make([]float32, d), make([]float32, d)
		for i := range d / 2 {
			c, s := theta(i)
			hfOut[i] = q[i]*c - q[i+d/2]*s
			hfOut[i+d/2] = q[i+d/2]*c + q[i]*s
			ggOut[2*i] = p[2*i]*c - p[2*i+1]*s
			ggOut[2*i+1] = p[2*i+1]*c + p[2*i]*s
		}
		want := make([]float32, d)
		for i := range d / 2 {
			want[2*i], want[2*i+1] = hfOut[i], hfOut[i+d/2]
		}
		if err := numtest.Equal(ggOut, want); err != nil {
			t.Errorf("head %d: %v", h, err)
		}
	}
}

// TestRopeFactors: 1/θ^(2j/D) divided by llama.cpp's factor j is the
// engine's scaled frequency (engine/llama's InvFreq, transformers'), to
// float32 rounding; the factors span the three bands (1, 8 and between).
func TestRopeFactors(t *testing.T) {
	cfg := llama3Config(4, 2, true)
	f := RopeFactors(cfg)
	want := llama.InvFreq(cfg)
	got := make([]float64, len(f))
	bands := map[string]bool{}
	for j, fj := range f {
		got[j] = 1 / math.Pow(cfg.RopeTheta, float64(2*j)/float64(cfg.HeadDimension())) / float64(fj)
		switch fj {
		case 1:
			bands["short"] = true
		case 8:
			bands["long"] = true
		default:
			bands["between"] = true
		}
	}
	// float32 rounding of the engine's value and of the factor: 2⁻²³ each.
	if err := numtest.Close(got, want, numtest.Tol{Rel: 3 * 0x1p-24}); err != nil {
		t.Error(err)
	}
	if len(bands) != 3 {
		t.Errorf("factors %v cover bands %v, want all three", f, bands)
	}
	if RopeFactors(llama2Config(4, 4, false)) != nil {
		t.Error("rope factors without rope scaling")
	}
}

// TestExportTensors exports a Llama 2-shaped checkpoint (GQA, untied) in
// each type and reads every tensor back: llama.cpp's names and GGML's
// dimensions, norms in F32, Q and K permuted, values exact in F32 and
// within the type's rounding otherwise; a tied model has no output tensor.
func TestExportTensors(t *testing.T) {
	cfg := llama2Config(4, 2, false)
	src := saveModel(t, cfg, 7, checkpoints.DTypeF32)
	ck, err := checkpoints.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	hf := map[string][]float32{}
	for _, s := range cfg.TensorSpecs() {
		if hf[s.Name], err = ck.Weights.ReadFloat32(s.Name); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	for _, c := range []struct {
		typ TensorType
		tol numtest.Tol // of a matrix's values; Q8_0's is its bound for |x| ≤ 0.1
	}{
		{F32, numtest.Tol{}},
		{F16, numtest.Tol{Rel: 0x1p-11, Abs: 0x1p-25}},
		{BF16, numtest.Tol{Rel: 0x1p-8}},
		{Q8_0, numtest.Tol{Abs: 0.1 / 127 * (0.5 + 127*0x1p-11)}},
	} {
		path := filepath.Join(out, c.typ.String()+".gguf")
		if err := Export(src, path, Options{Type: c.typ}); err != nil {
			t.Fatal(err)
		}
		f, err := Read(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Tensors) != len(cfg.TensorSpecs()) {
			t.Errorf("%s: %d tensors, want %d", c.typ, len(f.Tensors), len(cfg.TensorSpecs()))
		}
		for _, s := range cfg.TensorSpecs() {
			name := TensorName(s.Name)
			info, ok := f.Tensor(name)
			if !ok {
				t.Errorf("%s: no tensor %q (for %s)", c.typ, name, s.Name)
				continue
			}
			wantDims := []uint64{uint64(s.Shape[len(s.Shape)-1])}
			if len(s.Shape) == 2 {
				wantDims = append(wantDims, uint64(s.Shape[0]))
			}
			wantType := c.typ
			if len(s.Shape) == 1 {
				wantType = F32
			}
			if !slices.Equal(info.Dims, wantDims) || info.Type != wantType {
				t.Errorf("%s: %s: dims %v type %s, want %v %s", c.typ, name, info.Dims, info.Type, wantDims, wantType)
			}
			if info.Offset%Alignment != 0 || (f.DataOffset+int64(info.Offset))%Alignment != 0 {
				t.Errorf("%s: %s at data offset %d (data at %d): not %d-byte aligned", c.typ, name, info.Offset, f.DataOffset, Alignment)
			}
			got, err := f.ReadTensor(name)
			if err != nil {
				t.Fatal(err)
			}
			want := hf[s.Name]
			switch filepath.Ext(s.Name[:len(s.Name)-len(".weight")]) {
			case ".q_proj":
				want = Permute(want, cfg.NumAttentionHeads, cfg.HiddenSize)
			case ".k_proj":
				want = Permute(want, cfg.NumKeyValueHeads, cfg.HiddenSize)
			}
			tol := c.tol
			if wantType == F32 {
				tol = numtest.Tol{}
			}
			if err := numtest.Close(got, want, tol); err != nil {
				t.Errorf("%s: %s: %v", c.typ, name, err)
			}
		}
	}
	tied := llama2Config(4, 4, true)
	path := filepath.Join(out, "tied.gguf")
	if err := Export(saveModel(t, tied, 8, checkpoints.DTypeF32), path, Options{Type: F32}); err != nil {
		t.Fatal(err)
	}
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := f.Tensor("output.weight"); ok || len(f.Tensors) != len(tied.TensorSpecs()) {
		t.Errorf("tied: %d tensors with output.weight %v, want %d without", len(f.Tensors), ok, len(tied.TensorSpecs()))
	}
}

// TestExportMetadata: the llama metadata of a Llama 3-shaped export read
// back equal to its configuration, and the rope factors tensor.
func TestExportMetadata(t *testing.T) {
	cfg := llama3Config(4, 2, true)
	path := filepath.Join(t.TempDir(), "m.gguf")
	if err := Export(saveModel(t, cfg, 9, checkpoints.DTypeF32), path, Options{Type: BF16, Name: "tiny-llama3"}); err != nil {
		t.Fatal(err)
	}
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"general.architecture": "llama", "general.name": "tiny-llama3", "general.file_type": uint32(32),
		"general.alignment": uint32(32), "general.quantization_version": uint32(2),
		"llama.vocab_size": uint32(128256), "llama.context_length": uint32(512), "llama.embedding_length": uint32(64),
		"llama.block_count": uint32(2), "llama.feed_forward_length": uint32(128),
		"llama.attention.head_count": uint32(4), "llama.attention.head_count_kv": uint32(2),
		"llama.rope.dimension_count": uint32(16), "llama.rope.freq_base": float32(500000),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
	}
	for k, w := range want {
		if v, ok := f.Value(k); !ok || v != w {
			t.Errorf("%s = %v (%T), want %v (%T)", k, v, v, w, w)
		}
	}
	if f.Version != Version {
		t.Errorf("version %d", f.Version)
	}
	got, err := f.ReadTensor(RopeFactorsName)
	if err != nil {
		t.Fatal(err)
	}
	if err := numtest.Equal(got, RopeFactors(cfg)); err != nil {
		t.Errorf("%s: %v", RopeFactorsName, err)
	}
}

// TestTokenizerArrays checks both tokenizer kinds' arrays at known ids.
func TestTokenizerArrays(t *testing.T) {
	get := func(t *testing.T, cfg *checkpoints.Config) map[string]any {
		kvs, err := TokenizerMetadata(saveModel(t, cfg, 1, checkpoints.DTypeF32), cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]any{}
		for _, kv := range kvs {
			m[kv.Key] = kv.Value
		}
		return m
	}
	t.Run("llama2", func(t *testing.T) {
		// vocab_size past the tokenizer's: the extra ids are padding
		cfg := llama2Config(4, 4, true)
		cfg.VocabSize = 32003
		m := get(t, cfg)
		tokens := m["tokenizer.ggml.tokens"].([]string)
		types := m["tokenizer.ggml.token_type"].([]int32)
		scores := m["tokenizer.ggml.scores"].([]float32)
		if m["tokenizer.ggml.model"] != "llama" || len(tokens) != 32003 || len(types) != 32003 || len(scores) != 32003 {
			t.Fatalf("model %v, %d tokens, %d types, %d scores", m["tokenizer.ggml.model"], len(tokens), len(types), len(scores))
		}
		// the first merge of Llama 2's tokenizer.json is "▁ t" (id 260): score 0; the next, "e r" (id 261), −1
		for id, w := range map[int]struct {
			tok   string
			typ   int32
			score float32
		}{0: {"<unk>", 2, 0}, 1: {"<s>", 3, 0}, 2: {"</s>", 3, 0}, 13: {"<0x0A>", 6, 0},
			260: {"▁t", 1, 0}, 261: {"er", 1, -1}, 32002: {"[PAD32002]", 5, 0}} {
			if tokens[id] != w.tok || types[id] != w.typ || scores[id] != w.score {
				t.Errorf("id %d: %q type %d score %g, want %q %d %g", id, tokens[id], types[id], scores[id], w.tok, w.typ, w.score)
			}
		}
		for k, w := range map[string]any{"tokenizer.ggml.bos_token_id": uint32(1), "tokenizer.ggml.eos_token_id": uint32(2),
			"tokenizer.ggml.unknown_token_id": uint32(0), "tokenizer.ggml.add_bos_token": true, "tokenizer.ggml.add_eos_token": false} {
			if m[k] != w {
				t.Errorf("%s = %v, want %v", k, m[k], w)
			}
		}
		if _, ok := m["tokenizer.ggml.merges"]; ok {
			t.Error("SentencePiece tokenizer with merges")
		}
	})
	t.Run("larger than the model", func(t *testing.T) {
		cfg := llama2Config(4, 4, true)
		cfg.VocabSize = 1000
		_, err := TokenizerMetadata(saveModel(t, cfg, 1, checkpoints.DTypeF32), cfg)
		if err == nil || !strings.Contains(err.Error(), "32000 tokens, more than the model's vocab_size 1000") {
			t.Errorf("error %v, want the tokenizer refused as larger than the vocabulary", err)
		}
	})
	t.Run("llama3", func(t *testing.T) {
		m := get(t, llama3Config(4, 2, true))
		tokens := m["tokenizer.ggml.tokens"].([]string)
		types := m["tokenizer.ggml.token_type"].([]int32)
		merges := m["tokenizer.ggml.merges"].([]string)
		if m["tokenizer.ggml.model"] != "gpt2" || m["tokenizer.ggml.pre"] != "llama-bpe" || len(tokens) != 128256 || len(merges) != 280147 {
			t.Fatalf("model %v pre %v, %d tokens, %d merges", m["tokenizer.ggml.model"], m["tokenizer.ggml.pre"], len(tokens), len(merges))
		}
		if merges[0] != "Ġ Ġ" || merges[len(merges)-1] != "éĶ ¦" {
			t.Errorf("merges %q … %q, want \"Ġ Ġ\" … \"éĶ ¦\" (tokenizer.json's first and last)", merges[0], merges[len(merges)-1])
		}
		for id, w := range map[int]struct {
			tok string
			typ int32
		}{0: {"!", 1}, 279: {"Ġthe", 1}, 128000: {"<|begin_of_text|>", 3}, 128009: {"<|eot_id|>", 3}} {
			if tokens[id] != w.tok || types[id] != w.typ {
				t.Errorf("id %d: %q type %d, want %q %d", id, tokens[id], types[id], w.tok, w.typ)
			}
		}
		if _, ok := m["tokenizer.ggml.scores"]; ok {
			t.Error("byte-level tokenizer with scores")
		}
		for k, w := range map[string]any{"tokenizer.ggml.bos_token_id": uint32(128000), "tokenizer.ggml.eos_token_id": uint32(128001),
			"tokenizer.ggml.add_bos_token": true, "tokenizer.ggml.add_eos_token": false} {
			if m[k] != w {
				t.Errorf("%s = %v, want %v", k, m[k], w)
			}
		}
		if tmpl, _ := m["tokenizer.chat_template"].(string); len(tmpl) < 100 {
			t.Errorf("chat template %q", tmpl)
		}
	})
}

// TestExportAdapter: a base with a LoRA adapter exports as the HF export
// of the same merge (checkpoints.Export with the adapter), permuted.
func TestExportAdapter(t *testing.T) {
	cfg := llama2Config(4, 2, true)
	src := saveModel(t, cfg, 10, checkpoints.DTypeF32)
	ac := &checkpoints.AdapterConfig{PEFTType: "LORA", TaskType: "CAUSAL_LM", R: 2, LoRAAlpha: 4,
		TargetModules: []string{"q_proj", "k_proj", "down_proj"}, Bias: "none", BaseModelNameOrPath: src}
	r := rand.New(rand.NewPCG(11, 12))
	var tensors []checkpoints.Tensor
	for _, s := range cfg.AdapterTensorSpecs(ac) {
		data := make([]float32, s.Elements())
		for j := range data {
			data[j] = float32(r.NormFloat64() * 0.1)
		}
		tensors = append(tensors, checkpoints.Tensor{Name: s.Name, Shape: s.Shape, Data: data})
	}
	adDir := t.TempDir()
	if err := checkpoints.SaveAdapter(adDir, cfg, ac, tensors); err != nil {
		t.Fatal(err)
	}
	ad, err := checkpoints.OpenAdapter(adDir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ad.Close()
	merged := filepath.Join(t.TempDir(), "merged")
	if err := checkpoints.Export(src, merged, checkpoints.ExportOptions{DType: checkpoints.DTypeF32, Adapter: ad}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "a.gguf")
	if err := Export(src, path, Options{Type: F32, Adapter: ad}); err != nil {
		t.Fatal(err)
	}
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoints.Open(merged)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, name := range []string{"self_attn.q_proj", "self_attn.k_proj", "mlp.down_proj", "self_attn.v_proj"} {
		hf := checkpoints.LayerTensorName(1, name)
		want, err := ck.Weights.ReadFloat32(hf)
		if err != nil {
			t.Fatal(err)
		}
		switch name {
		case "self_attn.q_proj":
			want = Permute(want, cfg.NumAttentionHeads, cfg.HiddenSize)
		case "self_attn.k_proj":
			want = Permute(want, cfg.NumKeyValueHeads, cfg.HiddenSize)
		}
		got, err := f.ReadTensor(TensorName(hf))
		if err != nil {
			t.Fatal(err)
		}
		if err := numtest.Equal(got, want); err != nil {
			t.Errorf("%s: %v", hf, err)
		}
	}
}

// TestWriteAtomic: a write that fails part way leaves no file (and no
// temporary file) behind, and a file already at the path as it was.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "m.gguf")
	tensors := []TensorInfo{{Name: "a", Dims: []uint64{32}, Type: F32}, {Name: "b", Dims: []uint64{32}, Type: F32}}
	boom := errors.New("boom")
	fail := func(i int, w io.Writer) error {
		if i == 1 {
			return boom
		}
		_, err := w.Write(make([]byte, 128))
		return err
	}
	check := func(want []byte) {
		t.Helper()
		entries, _ := os.ReadDir(dir)
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		got, err := os.ReadFile(path)
		switch {
		case want == nil && !errors.Is(err, os.ErrNotExist):
			t.Errorf("after a failed write: %s exists (%v)", path, err)
		case want != nil && string(got) != string(want):
			t.Errorf("after a failed write: the file changed")
		}
		if len(names) != map[bool]int{true: 0, false: 1}[want == nil] {
			t.Errorf("folder holds %v", names)
		}
	}
	if err := WriteFile(path, nil, tensors, fail); !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	check(nil)
	// A short tensor is refused too.
	short := func(i int, w io.Writer) error { _, err := w.Write(make([]byte, 100)); return err }
	if err := WriteFile(path, nil, tensors, short); err == nil {
		t.Fatal("a tensor of 100 bytes written for 128")
	}
	check(nil)
	old := []byte("previous")
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, nil, tensors, fail); !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	check(old)
	// And an export that fails (a checkpoint without a tokenizer) leaves
	// nothing.
	cfg := llama2Config(4, 4, true)
	src := t.TempDir()
	if err := checkpoints.Save(src, cfg, checkpoints.RandomWeights(cfg, 1), checkpoints.SaveOptions{DType: checkpoints.DTypeF32}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "x.gguf")
	if err := Export(src, out, Options{Type: F32}); err == nil {
		t.Fatal("exported a checkpoint without a tokenizer")
	}
	if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("failed export left %s", out)
	}
}

// TestMetadataRoundTrip writes every value type and reads it back, with
// tensors at aligned offsets.
func TestMetadataRoundTrip(t *testing.T) {
	kvs := []KV{
		{"u8", uint8(200)}, {"i8", int8(-100)}, {"u16", uint16(60000)}, {"i16", int16(-30000)},
		{"u32", uint32(4e9)}, {"i32", int32(-2e9)}, {"f32", float32(1.5)}, {"b", true}, {"s", "héllo"},
		{"u64", uint64(1 << 60)}, {"i64", int64(-1 << 60)}, {"f64", math.Pi},
		{"as", []string{"a", "", "ccc"}}, {"ai32", []int32{1, -2, 3}}, {"af32", []float32{0.5, -1}}, {"ab", []bool{true, false}},
		{"general.alignment", uint32(64)},
	}
	tensors := []TensorInfo{{Name: "x", Dims: []uint64{3}, Type: F32}, {Name: "y", Dims: []uint64{32, 2}, Type: Q8_0}, {Name: "z", Dims: []uint64{5}, Type: BF16}}
	path := filepath.Join(t.TempDir(), "kv.gguf")
	vals := [][]float32{{1, 2, 3}, make([]float32, 64), {1, 2, 3, 4, 5}}
	for i := range vals[1] {
		vals[1][i] = float32(i) / 8
	}
	err := WriteFile(path, kvs, tensors, func(i int, w io.Writer) error {
		b, err := Encode(nil, tensors[i].Type, vals[i])
		if err == nil {
			_, err = w.Write(b)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Alignment != 64 || f.DataOffset%64 != 0 {
		t.Errorf("alignment %d, data at %d", f.Alignment, f.DataOffset)
	}
	if len(f.KVs) != len(kvs) {
		t.Fatalf("%d values, want %d", len(f.KVs), len(kvs))
	}
	for i, kv := range kvs {
		if got := f.KVs[i]; got.Key != kv.Key || fmt.Sprintf("%T %v", got.Value, got.Value) != fmt.Sprintf("%T %v", kv.Value, kv.Value) {
			t.Errorf("kv %d: %s = %T %v, want %s = %T %v", i, got.Key, got.Value, got.Value, kv.Key, kv.Value, kv.Value)
		}
	}
	for i, ti := range tensors {
		info, _ := f.Tensor(ti.Name)
		if info.Offset%64 != 0 {
			t.Errorf("%s at %d: not 64-byte aligned", ti.Name, info.Offset)
		}
		got, err := f.ReadTensor(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		if err := numtest.Close(got, vals[i], numtest.Tol{Abs: 1.0 / 127 * 4}); err != nil {
			t.Errorf("%s: %v", ti.Name, err)
		}
	}
	if err := WriteFile(path, []KV{{"bad", struct{}{}}}, nil, nil); err == nil {
		t.Error("wrote a struct value")
	}
}

// TestPlanTypes: under Q8_0 a matrix whose rows are not whole blocks of 32
// is F16, as llama.cpp's converter falls back; vectors are F32 in every
// type; Q and K are permuted by their own head counts.
func TestPlanTypes(t *testing.T) {
	cfg := llama2Config(4, 2, false)
	cfg.HiddenSize, cfg.HeadDim, cfg.IntermediateSize = 48, 12, 96 // rows of 48: not whole blocks; down_proj's of 96 are
	want := map[string]TensorType{"token_embd.weight": F16, "blk.0.attn_q.weight": F16, "blk.0.ffn_down.weight": Q8_0,
		"blk.0.attn_norm.weight": F32, "output_norm.weight": F32, "output.weight": F16}
	heads := map[string]int{"blk.1.attn_q.weight": 4, "blk.1.attn_k.weight": 2, "blk.1.attn_v.weight": 0}
	for _, ot := range plan(cfg, Q8_0) {
		if w, ok := want[ot.info.Name]; ok && ot.info.Type != w {
			t.Errorf("%s: %s, want %s", ot.info.Name, ot.info.Type, w)
		}
		if h, ok := heads[ot.info.Name]; ok && ot.heads != h {
			t.Errorf("%s: permuted by %d heads, want %d", ot.info.Name, ot.heads, h)
		}
	}
	for _, ot := range plan(cfg, BF16) {
		if len(ot.info.Dims) == 1 && ot.info.Type != F32 || len(ot.info.Dims) == 2 && ot.info.Type != BF16 {
			t.Errorf("BF16 export: %s %v is %s", ot.info.Name, ot.info.Dims, ot.info.Type)
		}
	}
}

// TestExportRefusesExisting: an existing file is not replaced (an earlier
// export, or a file that is not one), and stays as it was.
func TestExportRefusesExisting(t *testing.T) {
	src := saveModel(t, llama2Config(4, 2, false), 7, checkpoints.DTypeF32)
	out := filepath.Join(t.TempDir(), "m.gguf")
	if err := os.WriteFile(out, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Export(src, out, Options{Type: F32})
	if err == nil || !strings.Contains(err.Error(), out+" exists") {
		t.Fatalf("export over an existing file: %v, want a refusal naming it", err)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != "mine" {
		t.Errorf("the existing file became %q (%v)", b, err)
	}
}
