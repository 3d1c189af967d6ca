package llama

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/internal/numtest"
)

// loraGoldenCases are the adapters scripts/fixtures/make_lora_golden.py
// wrote with PyTorch in float64, each in PEFT's format over a base
// checkpoint of its own (testdata/golden/lora-*/README.md).
var loraGoldenCases = []string{"lora-gqa", "lora-rslora-bf16"}

// TestLoRAGoldenAgainstPyTorch loads each PEFT adapter written by the
// Python reference and checks the logits, the loss and every adapter
// gradient (base frozen) against it, with and without recomputation,
// and with the base held as stored (bf16 stays bf16) where the backend
// can.
func TestLoRAGoldenAgainstPyTorch(t *testing.T) {
	type variant struct {
		recompute Recompute
		base      engine.DType
	}
	for _, name := range loraGoldenCases {
		var variants []variant
		for _, r := range recomputeModes {
			variants = append(variants, variant{r, engine.F32})
			if strings.Contains(name, "bf16") {
				variants = append(variants, variant{r, engine.BF16})
			}
		}
		for _, v := range variants {
			recompute := v.recompute
			t.Run(fmt.Sprintf("%s/recompute=%v/base=%v", name, v.recompute, v.base), func(t *testing.T) {
				dir := filepath.Join("testdata", "golden", name)
				ck, err := checkpoints.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				defer ck.Close()
				ad, err := checkpoints.OpenAdapter(filepath.Join(dir, "adapter"), ck.Config)
				if err != nil {
					t.Fatal(err)
				}
				defer ad.Close()
				m, batch, exp := loadGolden(t, name, Options{Recompute: recompute, LoRA: ad.Config, BaseDType: v.base})
				if got := m.Layers[0].Q.Value.DType(); got != v.base {
					t.Fatalf("base held as %v, want %v", got, v.base)
				}
				defer m.Free()
				if err := m.LoadAdapters(ad.Weights); err != nil {
					t.Fatal(err)
				}
				logits, err := m.Logits(batch)
				if err != nil {
					t.Fatal(err)
				}
				want, err := exp.ReadFloat32("logits")
				if err != nil {
					t.Fatal(err)
				}
				if err := numtest.Close(logits, want, goldenTol); err != nil {
					t.Errorf("logits: %v", err)
				}
				if len(m.Trainable()) != len(ad.Weights.Tensors()) {
					t.Fatalf("%d trainable tensors, the adapter has %d", len(m.Trainable()), len(ad.Weights.Tensors()))
				}
				checkGoldenStep(t, m, batch, exp)
			})
		}
	}
}

// TestLoRAMergeGolden merges each adapter into its base through the
// streaming export and checks every merged weight within 1 ulp of the
// reference's float64 W + s·B·A rounded once to the checkpoint's dtype
// (bf16 rounded once, not through float32), and every other weight
// unchanged.
func TestLoRAMergeGolden(t *testing.T) {
	for _, name := range loraGoldenCases {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", "golden", name)
			base, err := checkpoints.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer base.Close()
			ad, err := checkpoints.OpenAdapter(filepath.Join(dir, "adapter"), base.Config)
			if err != nil {
				t.Fatal(err)
			}
			defer ad.Close()
			dtype := checkpoints.DTypeF32
			if base.Config.TorchDType == "bfloat16" {
				dtype = checkpoints.DTypeBF16
			}
			out := filepath.Join(t.TempDir(), "merged")
			if err := checkpoints.Export(dir, out, checkpoints.ExportOptions{DType: dtype, Adapter: ad}); err != nil {
				t.Fatal(err)
			}
			merged, err := checkpoints.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			defer merged.Close()
			exp, err := checkpoints.OpenFile(filepath.Join(dir, "expected.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			defer exp.Close()
			adapted := 0
			for _, s := range base.Config.TensorSpecs() {
				got, err := merged.Weights.ReadFloat32(s.Name)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := exp.Tensor("merged/" + s.Name); !ok {
					want, err := base.Weights.ReadFloat32(s.Name)
					if err != nil {
						t.Fatal(err)
					}
					if err := numtest.Equal(got, want); err != nil {
						t.Fatalf("%s, not adapted, against the base's: %v", s.Name, err)
					}
					continue
				}
				want, err := exp.ReadFloat32("merged/" + s.Name)
				if err != nil {
					t.Fatal(err)
				}
				adapted++
				// One ulp of the stored dtype: a float32 ulp, or a bf16 one
				// (2¹⁶ float32 ulps).
				maxULP := 1.0
				if dtype == checkpoints.DTypeBF16 {
					maxULP = 1 << 16
				}
				if err := numtest.CloseULP(got, want, maxULP); err != nil {
					t.Fatalf("%s merged against the reference: %v", s.Name, err)
				}
			}
			if adapted != len(ad.Weights.Tensors())/2 {
				t.Errorf("%d merged weights checked, the adapter adapts %d", adapted, len(ad.Weights.Tensors())/2)
			}
		})
	}
}

// TestLoadInBlocks: a model loaded a few rows at a time (as large
// matrices are) holds the weights of one loaded whole, in f32 and bf16.
func TestLoadInBlocks(t *testing.T) {
	dir := filepath.Join("testdata", "golden", "lora-rslora-bf16")
	ck, err := checkpoints.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	ad := &checkpoints.AdapterConfig{PEFTType: "LORA", R: 2, LoRAAlpha: 4, TargetModules: []string{"q_proj"}}
	for _, opt := range []Options{{}, {LoRA: ad, BaseDType: engine.BF16}} {
		whole, err := Load(newBackend(1), ck, opt)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := New(newBackend(1), ck.Config, opt)
		if err != nil {
			t.Fatal(err)
		}
		blocks.loadChunkLimit = 7
		if err := blocks.LoadWeights(ck.Weights); err != nil {
			t.Fatal(err)
		}
		for i, p := range whole.Params() {
			if err := numtest.Equal(download(blocks, blocks.Params()[i].Value), download(whole, p.Value)); err != nil {
				t.Errorf("%v: %s loaded in blocks: %v", opt.BaseDType, p.Name, err)
			}
		}
		whole.Free()
		blocks.Free()
	}
}
