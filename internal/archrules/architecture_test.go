package archrules

import (
	"os"
	"path/filepath"
	"testing"
)

// TestArchitecture checks this module against the import rules of its
// ARCHITECTURE.md.
func TestArchitecture(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root, err := FindRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	const doc = "ARCHITECTURE.md"
	src, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Parse(doc, src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	// A walk that started in the wrong place, or skipped everything, would
	// find no violations; this package must be among those it read.
	if _, ok := m.Packages["internal/archrules"]; !ok {
		t.Fatalf("loaded %d packages under %s, but not internal/archrules", len(m.Packages), root)
	}
	for _, u := range m.Unmatched(rules) {
		t.Error(u)
	}
	for _, v := range m.Check(rules) {
		t.Error(v)
	}
	t.Logf("%d rules, %d packages", len(rules), len(m.Packages))
}
