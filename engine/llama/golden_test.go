package llama

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/internal/numtest"
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
	return loadFixture(t, filepath.Join("testdata", "golden", name), opt)
}

// loadFixture loads the model of a fixture folder (golden's layout) on one
// rank, its batch and its expected values.
func loadFixture(t *testing.T, dir string, opt Options) (*Model, Batch, *checkpoints.File) {
	t.Helper()
	ck, err := checkpoints.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	m, err := Load(newBackend(2), ck, opt)
	if err != nil {
		t.Fatal(err)
	}
	return m, fixtureBatch(t, dir), fixtureExpected(t, dir)
}

// fixtureBatch is a fixture's inputs.json as one batch.
func fixtureBatch(t *testing.T, dir string) Batch {
	t.Helper()
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
	return batch
}

// fixtureExpected opens a fixture's expected.safetensors, closed when the
// test ends.
func fixtureExpected(t *testing.T, dir string) *checkpoints.File {
	t.Helper()
	exp, err := checkpoints.OpenFile(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Close() })
	return exp
}

// goldenTol is the per-tensor bar against PyTorch: |got − want|
// ≤ 1e-4·max|want| elementwise.
var goldenTol = numtest.Tol{Max: 1e-4}

func TestGoldenAgainstPyTorch(t *testing.T) {
	for _, name := range goldenCases {
		for _, recompute := range recomputeModes {
			t.Run(name+"/recompute="+recompute.String(), func(t *testing.T) {
				checkFixture(t, filepath.Join("testdata", "golden", name), Options{Recompute: recompute})
			})
		}
	}
}

func TestGoldenGeneration(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			m, _, _ := loadGolden(t, name, Options{})
			defer m.Free()
			checkFixtureGeneration(t, m, filepath.Join("testdata", "golden", name))
		})
	}
}

// checkFixtureGeneration decodes a fixture's prompts greedily with the
// KV cache and checks the ids against its generate.json, which the
// reference made by recomputing the whole sequence at every step.
func checkFixtureGeneration(t *testing.T, m *Model, dir string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "generate.json"))
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
	if len(got) != len(g.Outputs) {
		t.Fatalf("%d outputs, want %d", len(got), len(g.Outputs))
	}
	for i := range g.Outputs {
		if !slices.Equal(got[i], g.Outputs[i]) {
			t.Errorf("prompt %d: got %v, want %v", i, got[i], g.Outputs[i])
		}
	}
}

// checkFixture loads the model of a fixture folder with opt and checks
// its logits (goldenTol) and a training pass (checkGoldenStep) against
// the fixture's.
func checkFixture(t *testing.T, dir string, opt Options) {
	t.Helper()
	m, batch, exp := loadFixture(t, dir, opt)
	defer m.Free()
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
	checkGoldenStep(t, m, batch, exp)
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
	if err := numtest.Scalar(loss.Mean(), float64(wantLoss[0]), numtest.Tol{Rel: 1e-5}); err != nil {
		t.Errorf("loss: %v", err)
	}
	// The fixture's gradients are of the mean loss; ours of the sum
	// scaled by 1: divide by the total weight. The fixture's set of
	// gradients and the model's trainable parameters must be the same.
	got, want := map[string][]float32{}, map[string][]float32{}
	for _, p := range m.Trainable() {
		g := download(m, p.Grad)
		for i := range g {
			g[i] /= float32(loss.Weight)
		}
		got[p.Name] = g
	}
	for _, ti := range exp.Tensors() {
		name, ok := strings.CutPrefix(ti.Name, "grad/")
		if !ok {
			continue
		}
		w, err := exp.ReadFloat32(ti.Name)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = w
	}
	if err := numtest.EachClose(got, want, goldenTol); err != nil {
		t.Errorf("gradients: %v", err)
	}
}
