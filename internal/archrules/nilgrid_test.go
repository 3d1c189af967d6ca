package archrules

import (
	"slices"
	"testing"
)

// gridDirs are the packages that run a model on a grid and must meet one
// always: the model, the launcher, training and the studies.
var gridDirs = []string{"engine/llama", "engine/launch", "finetune", "experiments"}

// TestNoNilGrids: no non-test file of the model, training or the studies
// tests for a nil grid.
func TestNoNilGrids(t *testing.T) {
	m := loadModule(t, gridDirs...)
	found, err := m.NilGrids(gridDirs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
}

// TestNilGrids: each form of the nil tests the model and training made
// before one rank was the grid of one rank is found; comments, test
// files, packages outside the scanned folders and other nil tests are
// not.
func TestNilGrids(t *testing.T) {
	const bad = `package llama

func f(m *Model, opt Options, g *parallel.Grid) {
	if opt.Parallel != nil {
	}
	if m.Options.Parallel == nil && rows > 1 {
	}
	if g := m.Grid(); g != nil {
	}
	lead := g == nil || g.Rank() == 0
	switch {
	case g == nil:
	}
	if nil != grid {
	}
	_ = sv.m.Grid() == nil
}
`
	const good = `package llama

// if g != nil { err = g.Agree(b, err) } was the stanza.
func f(m *Model, gw *gradWork, gx comm.Comm) {
	/* m.Grid() == nil */
	if gw != nil || gx == nil || m.zg != nil || ws.g != nil {
	}
	if m.Grid().World.Size() == 1 {
	}
}
`
	root := writeModule(t, map[string]string{
		"go.mod":                     "module example.com/m\n\ngo 1.22\n",
		"engine/llama/model.go":      bad,
		"engine/llama/model_test.go": bad,
		"engine/llama/grid.go":       good,
		"engine/parallel/grid.go":    bad, // OrOne's home is not scanned
	})
	m, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	found, err := m.NilGrids("engine/llama")
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, f := range found {
		if f.File != "engine/llama/model.go" {
			t.Errorf("found in %s: %v", f.File, f)
		}
		lines = append(lines, f.Line)
	}
	if want := []int{4, 6, 8, 10, 12, 14, 16}; !slices.Equal(lines, want) {
		t.Errorf("found lines %v, want %v: %v", lines, want, found)
	}
}
