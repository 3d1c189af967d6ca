package enginetest

import (
	"testing"

	"github.com/memtrain/memtrain/engine"
)

// TestMisuseCases checks the table itself: unique names, each case with
// a method, and every class of misuse covered.
func TestMisuseCases(t *testing.T) {
	names := MisuseCases()
	if len(names) != len(misuseCases) {
		t.Fatalf("MisuseCases() lists %d names for %d cases", len(names), len(misuseCases))
	}
	seen := map[string]bool{}
	classes := map[engine.MisuseClass]bool{}
	for _, c := range misuseCases {
		if c.name == "" || seen[c.name] {
			t.Errorf("case name %q is empty or repeated", c.name)
		}
		seen[c.name] = true
		if c.op == "" || c.call == nil {
			t.Errorf("case %s has no method or no call", c.name)
		}
		classes[c.class] = true
	}
	for _, c := range []engine.MisuseClass{engine.MisuseShape, engine.MisuseDType, engine.MisuseAlias, engine.MisuseRange, engine.MisuseTensor} {
		if !classes[c] {
			t.Errorf("no case of class %v", c)
		}
	}
}
