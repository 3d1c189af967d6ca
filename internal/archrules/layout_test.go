package archrules

import (
	"os"
	"slices"
	"testing"
)

// layoutDirs are the packages that must read tensors' layouts from their
// declaration: everything above checkpoints that shards, sums, counts or
// plans a model's tensors.
var layoutDirs = []string{"engine", "finetune", "experiments", "memorization", "cmd"}

// TestNoLayoutFromNames: no non-test file of the engine, training,
// studies or CLI infers a tensor's layout from its name or rank.
func TestNoLayoutFromNames(t *testing.T) {
	m := loadModule(t, "engine/parallel", "engine/llama", "finetune")
	found, err := m.LayoutInferences(layoutDirs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
}

// loadModule loads the module this test runs in, and fails unless it read
// the packages need names: a walk that read none of them would find
// nothing wrong in them.
func loadModule(t *testing.T, need ...string) *Module {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := FindRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range need {
		if _, ok := m.Packages[d]; !ok {
			t.Fatalf("loaded %d packages under %s, but not %s", len(m.Packages), root, d)
		}
	}
	return m
}

// TestLayoutInferences: each form of inference the engine used before its
// tensors were declared is found; comments, test files, packages outside
// the scanned folders and shape checks that classify nothing are not.
func TestLayoutInferences(t *testing.T) {
	const bad = `package parallel

import "strings"

func Transposed(name string) bool { // the name-suffix guess
	return strings.HasSuffix(name, "self_attn.o_proj.weight")
}

func norm(p *P) bool { return len(p.Full) == 1 }

func f(s spec, w weight) {
	if len(s.Shape) != 2 {
	}
	switch s.Name {
	case checkpoints.LMHeadName:
	}
	if w.name == "down_proj" || checkpoints.IsAdapterName(s.Name) {
	}
	if "input_layernorm" == w.name {
	}
	_ = Transposed(s.Name)
}
`
	const good = `package cuda

import "strings"

// Transposed(name) and strings.HasSuffix(name, "o_proj.weight") were
// guesses; len(p.Full) == 1 too.
func f(q *T, base string) bool {
	/* strings.Contains(name, "layernorm") */
	return len(q.Shape) != 4 && strings.HasSuffix(base, ".cuh")
}
`
	root := writeModule(t, map[string]string{
		"go.mod":                        "module example.com/m\n\ngo 1.22\n",
		"engine/parallel/shard.go":      bad,
		"engine/parallel/shard_test.go": bad,
		"engine/cuda/kernels.go":        good,
		"checkpoints/layout.go":         bad, // the declaration's home is not scanned
	})
	m, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	found, err := m.LayoutInferences("engine")
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, f := range found {
		if f.File != "engine/parallel/shard.go" {
			t.Errorf("found in %s: %v", f.File, f)
		}
		lines = append(lines, f.Line)
	}
	if want := []int{5, 6, 9, 12, 15, 17, 19, 21}; !slices.Equal(lines, want) {
		t.Errorf("found lines %v, want %v: %v", lines, want, found)
	}
}
