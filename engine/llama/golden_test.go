package llama

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
)

// goldenCases are the fixtures scripts/fixtures/make_llama_golden.py wrote
// with PyTorch in float64 (see testdata/golden/README.md).
var goldenCases = []string{"gqa-llama3rope", "mha-tied", "bf16-gqa"}

type goldenInputs struct {
	IDs     [][]int32   `json:"ids"`
	Targets [][]int32   `json:"targets"`
	Weights [][]float32 `json:"weights"`
}

func loadGolden(t *testing.T, name string, opt Options) (*Model, Batch, *checkpoints.File) {
	t.Helper()
	dir := filepath.Join("testdata", "golden", name)
	ck, err := checkpoints.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := Load(newBackend(2), ck, opt)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "inputs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var in goldenInputs
	if err := json.Unmarshal(raw, &in); err != nil {
		t.Fatal(err)
	}
	batch := Batch{B: len(in.IDs), T: len(in.IDs[0])}
	for i := range in.IDs {
		batch.IDs = append(batch.IDs, in.IDs[i]...)
		batch.Targets = append(batch.Targets, in.Targets[i]...)
		batch.Weights = append(batch.Weights, in.Weights[i]...)
	}
	exp, err := checkpoints.OpenFile(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Close() })
	return m, batch, exp
}

// closeTo checks |got − want| ≤ tol·max|want| elementwise, the issue's
// per-tensor bar.
func closeTo(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	scale := 0.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(float64(w)))
	}
	worst, at := 0.0, 0
	for i := range got {
		if d := math.Abs(float64(got[i]) - float64(want[i])); d > worst || math.IsNaN(d) {
			worst, at = d, i
		}
	}
	if !(worst <= tol*scale) {
		t.Errorf("%s: max |Δ| = %.3g at %d (got %g, want %g) > %.0e·max|want| = %.3g", what, worst, at, got[at], want[at], tol, tol*scale)
	}
}

func TestGoldenAgainstPyTorch(t *testing.T) {
	for _, name := range goldenCases {
		for _, recompute := range []bool{false, true} {
			t.Run(name+map[bool]string{false: "", true: "/recompute"}[recompute], func(t *testing.T) {
				m, batch, exp := loadGolden(t, name, Options{Recompute: recompute})
				defer m.Free()
				logits, err := m.Logits(batch)
				if err != nil {
					t.Fatal(err)
				}
				want, err := exp.ReadFloat32("logits")
				if err != nil {
					t.Fatal(err)
				}
				closeTo(t, "logits", logits, want, 1e-4)

				checkGoldenStep(t, m, batch, exp)
			})
		}
	}
}

func TestGoldenGeneration(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			m, _, _ := loadGolden(t, name, Options{})
			defer m.Free()
			raw, err := os.ReadFile(filepath.Join("testdata", "golden", name, "generate.json"))
			if err != nil {
				t.Fatal(err)
			}
			var g struct {
				Prompts      [][]int32 `json:"prompts"`
				MaxNewTokens int       `json:"max_new_tokens"`
				Outputs      [][]int32 `json:"outputs"`
			}
			if err := json.Unmarshal(raw, &g); err != nil {
				t.Fatal(err)
			}
			got, err := m.Generate(g.Prompts, GenerateOptions{MaxNewTokens: g.MaxNewTokens})
			if err != nil {
				t.Fatal(err)
			}
			for i := range g.Outputs {
				if !slices.Equal(got[i], g.Outputs[i]) {
					t.Errorf("prompt %d: got %v, want %v", i, got[i], g.Outputs[i])
				}
			}
		})
	}
}

// checkGoldenStep runs a training pass of batch and checks its loss
// (1e-5 relative) and the gradient of every trainable parameter (1e-4·max)
// against the fixture's expected.safetensors ("loss", "grad/NAME").
func checkGoldenStep(t *testing.T, m *Model, batch Batch, exp *checkpoints.File) {
	t.Helper()
	m.ZeroGrads()
	loss, err := m.ForwardBackward(batch, 1)
	if err != nil {
		t.Fatal(err)
	}
	wantLoss, err := exp.ReadFloat32("loss")
	if err != nil {
		t.Fatal(err)
	}
	if got := loss.Mean(); math.Abs(got-float64(wantLoss[0])) > 1e-5*math.Abs(float64(wantLoss[0])) {
		t.Errorf("loss = %.8g, want %.8g", got, wantLoss[0])
	}
	// The fixture's gradients are of the mean loss; ours of the sum
	// scaled by 1: divide by the total weight.
	for _, p := range m.Trainable() {
		got := download(m, p.Grad)
		for i := range got {
			got[i] /= float32(loss.Weight)
		}
		want, err := exp.ReadFloat32("grad/" + p.Name)
		if err != nil {
			t.Fatal(err)
		}
		closeTo(t, "grad "+p.Name, got, want, 1e-4)
	}
}
