package checkpoints

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data/tokenizer"
	"github.com/memtrain/memtrain/internal/numtest"
)

func tinyConfig(tie bool) *Config {
	c := &Config{
		HiddenSize: 16, IntermediateSize: 32, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 64, VocabSize: 50, TieWordEmbeddings: tie,
		BOSTokenIDs: []int{1}, EOSTokenIDs: []int{2}, TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.02,
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

func TestSaveOpenRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tie   bool
		dtype DType
		shard int64
	}{
		{"f32", false, DTypeF32, 0},
		{"f32-tied", true, DTypeF32, 0},
		{"bf16-sharded", false, DTypeBF16, 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tinyConfig(tc.tie)
			dir := filepath.Join(t.TempDir(), "ck")
			weights := RandomWeights(cfg, 3)
			files := map[string][]byte{tokenizer.FileName: []byte(`{"model":{}}`)}
			if err := Save(dir, cfg, weights, SaveOptions{DType: tc.dtype, MaxShardBytes: tc.shard, Files: files}); err != nil {
				t.Fatal(err)
			}
			ck, err := Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.Config.TorchDType != tc.dtype.TorchName() {
				t.Errorf("torch_dtype %s", ck.Config.TorchDType)
			}
			if tc.shard > 0 && len(ck.Weights.Files()) < 2 {
				t.Errorf("expected shards, got %v", ck.Weights.Files())
			}
			if ck.TokenizerPath() == "" {
				t.Error("tokenizer.json not written")
			}
			got, err := ck.ReadAll()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(weights) {
				t.Fatalf("%d tensors read, %d saved", len(got), len(weights))
			}
			for i, w := range weights {
				want := w.Data
				if tc.dtype == DTypeBF16 {
					want = make([]float32, len(w.Data))
					for j, v := range w.Data {
						want[j] = BF16ToFloat32(Float32ToBF16(v))
					}
				}
				if err := numtest.Equal(got[i].Data, want); err != nil {
					t.Fatalf("%s: %v", w.Name, err)
				}
			}
		})
	}
}

func TestRandomWeightsDeterministic(t *testing.T) {
	cfg := tinyConfig(false)
	a, b, c := RandomWeights(cfg, 1), RandomWeights(cfg, 1), RandomWeights(cfg, 2)
	differ := false
	for i := range a {
		if err := numtest.Equal(b[i].Data, a[i].Data); err != nil {
			t.Errorf("%s: the same seed gives other weights: %v", a[i].Name, err)
		}
		for j := range a[i].Data {
			differ = differ || a[i].Data[j] != c[i].Data[j]
		}
	}
	if !differ {
		t.Error("another seed gives the same weights")
	}
}

func TestOpenRejectsWrongTensors(t *testing.T) {
	cfg := tinyConfig(false)
	weights := RandomWeights(cfg, 1)
	write := func(t *testing.T, tensors []Tensor, c *Config) string {
		dir := t.TempDir()
		if _, err := WriteSet(dir, tensors, WriteOptions{DType: DTypeF32}); err != nil {
			t.Fatal(err)
		}
		b, _ := c.MarshalJSON()
		os.WriteFile(filepath.Join(dir, ConfigFile), b, 0o644)
		return dir
	}
	drop := func(name string) []Tensor {
		var out []Tensor
		for _, w := range weights {
			if w.Name != name {
				out = append(out, w)
			}
		}
		return out
	}
	t.Run("missing", func(t *testing.T) {
		_, err := Open(write(t, drop("model.layers.1.mlp.up_proj.weight"), cfg))
		if err == nil || !strings.Contains(err.Error(), `missing tensor "model.layers.1.mlp.up_proj.weight"`) {
			t.Errorf("%v", err)
		}
	})
	t.Run("unexpected", func(t *testing.T) {
		extra := append(append([]Tensor(nil), weights...), Tensor{Name: "model.layers.9.mlp.up_proj.weight", Shape: []int{1}, Data: []float32{0}})
		_, err := Open(write(t, extra, cfg))
		if err == nil || !strings.Contains(err.Error(), "model.layers.9") || !strings.Contains(err.Error(), "model.safetensors") {
			t.Errorf("%v", err)
		}
	})
	t.Run("shape", func(t *testing.T) {
		other := cfg.Clone()
		other.IntermediateSize = 24
		_, err := Open(write(t, weights, other))
		if err == nil || !strings.Contains(err.Error(), "shape [32 16]") || !strings.Contains(err.Error(), "want [24 16]") {
			t.Errorf("%v", err)
		}
	})
	t.Run("rotary buffers and tied head are tolerated", func(t *testing.T) {
		tied := tinyConfig(true)
		ts := append(RandomWeights(tied, 1),
			Tensor{Name: "model.layers.0.self_attn.rotary_emb.inv_freq", Shape: []int{2}, Data: []float32{1, 0.1}},
			Tensor{Name: LMHeadName, Shape: []int{50, 16}, Data: make([]float32, 800)})
		ck, err := Open(write(t, ts, tied))
		if err != nil {
			t.Fatal(err)
		}
		ck.Close()
	})
}

func TestSaveRejectsWrongTensors(t *testing.T) {
	cfg := tinyConfig(false)
	w := RandomWeights(cfg, 1)
	dir := t.TempDir()
	if err := Save(dir, cfg, w[1:], SaveOptions{DType: DTypeF32}); err == nil {
		t.Error("saved with a tensor missing")
	}
	w[0].Shape = []int{49, 16}
	if err := Save(dir, cfg, w, SaveOptions{DType: DTypeF32}); err == nil || !strings.Contains(err.Error(), EmbedTokensName) {
		t.Errorf("%v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ConfigFile)); err == nil {
		t.Error("a failed save left a config.json")
	}
}

// TestOpenTorchCheckpoints opens the HF-layout folders that PyTorch wrote
// (scripts/fixtures/make_safetensors_fixtures.py) as whole checkpoints: the
// config parses, every tensor the config implies is there with its shape,
// and the bf16 shards hold PyTorch's rounding of the f32 weights, which our
// rounding reproduces bit for bit.
func TestOpenTorchCheckpoints(t *testing.T) {
	f32, err := Open(filepath.Join("testdata", "torch-tiny-llama"))
	if err != nil {
		t.Fatal(err)
	}
	defer f32.Close()
	bf16, err := Open(filepath.Join("testdata", "torch-tiny-llama-bf16-sharded"))
	if err != nil {
		t.Fatal(err)
	}
	defer bf16.Close()
	if c := f32.Config; c.RopeScaling == nil || c.RopeScaling.Factor != 32 || c.HeadDimension() != 4 || c.TieWordEmbeddings {
		t.Errorf("config %+v", c)
	}
	if len(bf16.Weights.Files()) != 2 {
		t.Errorf("want 2 shards, got %v", bf16.Weights.Files())
	}
	a, err := f32.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	b, err := bf16.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(f32.Config.TensorSpecs()) {
		t.Fatalf("%d tensors", len(a))
	}
	for i := range a {
		want := make([]float32, len(a[i].Data))
		for j, v := range a[i].Data {
			want[j] = BF16ToFloat32(Float32ToBF16(v))
		}
		if err := numtest.Equal(b[i].Data, want); err != nil {
			t.Fatalf("%s: torch's bf16 against our rounding of its float32: %v", a[i].Name, err)
		}
	}
}
