package archrules

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // "LINE: FROM !-> TO"
		err  string   // a substring of the error; "" for none
	}{
		{
			name: "rules, comments and blank lines",
			doc:  "# Doc\n\n```rules\n# engine first\nengine/... !-> data/...\n\n  goldfish  !->  engine/...  \n... !-> cmd/...\n```\n",
			want: []string{"5: engine/... !-> data/...", "7: goldfish !-> engine/...", "8: ... !-> cmd/..."},
		},
		{
			name: "other blocks are not rules",
			doc:  "```go\nx !-> y\n```\n```\na !-> b\n```\n```rules\na !-> b\n```\n",
			want: []string{"8: a !-> b"},
		},
		{name: "tilde fence", doc: "~~~ rules\na !-> b\n~~~~\n", want: []string{"2: a !-> b"}},
		{name: "long fence", doc: "x\n````rules extra words\nc !-> d\n`````\n", want: []string{"3: c !-> d"}},
		// Only a fence like the opening one closes the block; any other is a
		// line that is not a rule.
		{name: "other fence inside", doc: "~~~rules\na !-> b\n```\n~~~\n", err: "line 3: rule \"```\""},
		{name: "shorter fence inside", doc: "````rules\na !-> b\n```\n````\n", err: "line 3: rule \"```\""},
		{name: "no block", doc: "# Doc\n\nengine/... !-> data/...\n", err: "no ```rules block"},
		{name: "empty block", doc: "```rules\n```\n", err: "line 1: the rules block has no rules"},
		{name: "only comments", doc: "```rules\n# a !-> b\n\n```\n", err: "has no rules"},
		{name: "not closed", doc: "x\n```rules\na !-> b\n", err: "line 2: the rules block is not closed"},
		{name: "two blocks", doc: "```rules\na !-> b\n```\n```rules\nc !-> d\n```\n", err: "line 4: a second rules block (the first is at line 1)"},
		{name: "wrong arrow", doc: "```rules\na !-> b\na -> b\n```\n", err: `line 3: rule "a -> b": want "FROM !-> TO"`},
		{name: "two arrows", doc: "```rules\na !-> b !-> c\n```\n", err: "want"},
		{name: "no left side", doc: "```rules\n!-> b\n```\n", err: "empty pattern"},
		{name: "no right side", doc: "```rules\na !->\n```\n", err: "empty pattern"},
		{name: "two words", doc: "```rules\na b !-> c\n```\n", err: `pattern "a b": spaces`},
		{name: "trailing slash", doc: "```rules\na/ !-> b\n```\n", err: "not a clean path"},
		{name: "dot slash", doc: "```rules\n./a !-> b\n```\n", err: "not a clean path"},
		{name: "absolute", doc: "```rules\n/a !-> b\n```\n", err: "not a clean path"},
		{name: "parent", doc: "```rules\na !-> ../b\n```\n", err: "not a clean path"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rules, err := Parse("DOC.md", []byte(tt.doc))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse error = %v, want one containing %q", err, tt.err)
				}
				if !strings.HasPrefix(err.Error(), "DOC.md") {
					t.Errorf("error %q does not name the document", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rules {
				if r.File != "DOC.md" {
					t.Errorf("rule %q: File = %q", r, r.File)
				}
				got = append(got, fmt.Sprintf("%d: %s", r.Line, r))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("rules = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, pkg string
		want         bool
	}{
		{"engine/...", "engine", true},
		{"engine/...", "engine/cpu", true},
		{"engine/...", "engine/comm/mpi", true},
		{"engine/...", "engines", false},
		{"engine/...", "engineer/x", false},
		{"engine/...", "data", false},
		{"engine/...", "x/engine/cpu", false},
		{"engine/comm", "engine/comm", true},
		{"engine/comm", "engine/comm/local", false},
		{"engine/comm", "engine", false},
		{"engine/.../mpi", "engine/comm/mpi", true},
		{"engine/.../mpi", "engine/comm/mpi/x", false},
		{"engine/c...", "engine/cpu", true},
		{"engine/c...", "engine/cuda/x", true},
		{"engine/c...", "engine/llama", false},
		{"...", ".", true},
		{"...", "cmd/memtrain", true},
		{"cmd/...", "cmd", true},
		{"cmd/...", "cmd/memtrain", true},
		{"a.b", "axb", false}, // the dot is literal
		{"a/", "a", false},    // invalid patterns match nothing
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.pkg); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.pkg, got, tt.want)
		}
	}
}

// writeModule writes files (slash-separated names relative to the root) into
// a new temporary directory and returns it.
func writeModule(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, src := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// TestCheck runs the checker over a module that breaks its rules, and
// proves that it finds every forbidden import and nothing else.
func TestCheck(t *testing.T) {
	root := writeModule(t, map[string]string{
		"go.mod": "module example.com/m // a comment\n\ngo 1.26\n",
		"ARCH.md": "```rules\n" +
			"engine/... !-> data/...\n" + // line 2
			"goldfish/... !-> engine/...\n" + // line 3
			"... !-> cmd/...\n" + // line 4
			"engine/comm !-> engine/cpu\n" + // line 5
			"```\n",
		"engine/engine.go":      "package engine\n\nimport (\n\t\"fmt\"\n\t\"example.com/m/data\"\n)\n",
		"engine/engine_test.go": "package engine\n\nimport _ \"example.com/m/data\"\n", // tests may
		// Files behind build tags are checked too.
		"engine/comm/mpi.go": "//go:build mpi\n\npackage comm\n\nimport \"C\"\nimport d \"example.com/m/data/store\"\n",
		// engine/comm's subpackages may import engine/cpu; engine/comm may not.
		"engine/comm/local/local.go": "package local\n\nimport \"example.com/m/engine/cpu\"\n",
		"engine/comm/comm.go":        "package comm\n\nimport \"example.com/m/engine/cpu\"\n",
		"engine/cpu/cpu.go":          "package cpu\n\nimport \"example.com/mother/data\"\n", // another module
		"goldfish/goldfish.go":       "package goldfish\n\nimport (\n\t\"example.com/m/engine\"\n\t\"example.com/m/cmd/tool\"\n)\n",
		"data/data.go":               "package data\n",
		"data/store/store.go":        "package store\n",
		"cmd/tool/main.go":           "package main\n\nimport \"example.com/m/goldfish\"\n",
		"gen.go":                     "//go:build ignore\n\npackage main\n\nimport \"example.com/m/cmd/tool\"\n",
		// Not part of the module's packages: skipped.
		"engine/testdata/x.go":        "package x\n\nimport \"example.com/m/data\"\n",
		"engine/.hidden/x.go":         "package x\n\nimport \"example.com/m/data\"\n",
		"engine/_old/x.go":            "package x\n\nimport \"example.com/m/data\"\n",
		"engine/_x.go":                "package engine\n\nimport \"example.com/m/data\"\n",
		"engine/nested/go.mod":        "module example.com/nested\n",
		"engine/nested/nested.go":     "package nested\n\nimport \"example.com/m/data\"\n",
		"engine/notgo/README.txt":     "import \"example.com/m/data\"\n",
		"engine/notgo/x.go.orig":      "package x\n\nimport \"example.com/m/data\"\n",
		"goldfish/goldfish_x_test.go": "package goldfish_test\n\nimport \"example.com/m/engine\"\n",
	})
	src, err := os.ReadFile(filepath.Join(root, "ARCH.md"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Parse("ARCH.md", src)
	if err != nil {
		t.Fatal(err)
	}
	m, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	if m.Path != "example.com/m" {
		t.Errorf("module path = %q, want example.com/m", m.Path)
	}
	var got []string
	for _, v := range m.Check(rules) {
		got = append(got, v.String())
	}
	want := []string{
		`engine/comm/comm.go: imports example.com/m/engine/cpu, which rule "engine/comm !-> engine/cpu" (ARCH.md line 5) forbids`,
		`engine/comm/mpi.go: imports example.com/m/data/store, which rule "engine/... !-> data/..." (ARCH.md line 2) forbids`,
		`engine/engine.go: imports example.com/m/data, which rule "engine/... !-> data/..." (ARCH.md line 2) forbids`,
		`gen.go: imports example.com/m/cmd/tool, which rule "... !-> cmd/..." (ARCH.md line 4) forbids`,
		`goldfish/goldfish.go: imports example.com/m/cmd/tool, which rule "... !-> cmd/..." (ARCH.md line 4) forbids`,
		`goldfish/goldfish.go: imports example.com/m/engine, which rule "goldfish/... !-> engine/..." (ARCH.md line 3) forbids`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if u := m.Unmatched(rules); len(u) != 0 {
		t.Errorf("Unmatched = %q, want none", u)
	}

	// Once the imports are gone, the same rules pass.
	for _, name := range []string{"engine/engine.go", "engine/comm/mpi.go", "engine/comm/comm.go", "goldfish/goldfish.go", "gen.go"} {
		if err := os.Remove(filepath.Join(root, filepath.FromSlash(name))); err != nil {
			t.Fatal(err)
		}
	}
	if m, err = Load(root); err != nil {
		t.Fatal(err)
	}
	if vs := m.Check(rules); len(vs) != 0 {
		t.Errorf("after the fix, violations = %v", vs)
	}
}

func TestUnmatched(t *testing.T) {
	root := writeModule(t, map[string]string{
		"go.mod":          "module \"example.com/m\"\n",
		"engine/e.go":     "package engine\n",
		"engine/cpu/c.go": "package cpu\n",
	})
	m, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := Parse("A.md", []byte("```rules\nengine/... !-> engine/cpu\nengin/... !-> engine\nengine !-> example.com/m/engine/cpu\n```\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`A.md line 3: pattern "engin/..." of rule "engin/... !-> engine" matches no package of example.com/m`,
		`A.md line 4: pattern "example.com/m/engine/cpu" of rule "engine !-> example.com/m/engine/cpu" matches no package of example.com/m`,
	}
	if got := m.Unmatched(rules); !slices.Equal(got, want) {
		t.Errorf("Unmatched =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		err   string
	}{
		{"no go.mod", map[string]string{"a/a.go": "package a\n"}, "reading the module path"},
		{"no module line", map[string]string{"go.mod": "go 1.26\n"}, "no module line"},
		{"bad Go", map[string]string{"go.mod": "module m\n", "a/a.go": "package a\nimport (\n"}, "parsing imports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(writeModule(t, tt.files))
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("Load error = %v, want one containing %q", err, tt.err)
			}
		})
	}
}

func TestFindRoot(t *testing.T) {
	root := writeModule(t, map[string]string{
		"go.mod":          "module m\n",
		"a/b/c/x.go":      "package c\n",
		"a/sub/go.mod":    "module sub\n",
		"a/sub/d/e/x.go":  "package e\n",
		"a/b/notes/x.txt": "",
	})
	tests := []struct{ dir, want string }{
		{".", "."},
		{"a/b/c", "."},
		{"a/b/notes", "."},
		{"a/sub/d/e", "a/sub"}, // the nearest go.mod
	}
	for _, tt := range tests {
		got, err := FindRoot(filepath.Join(root, filepath.FromSlash(tt.dir)))
		if err != nil {
			t.Errorf("FindRoot(%s): %v", tt.dir, err)
			continue
		}
		if want := filepath.Join(root, filepath.FromSlash(tt.want)); got != want {
			t.Errorf("FindRoot(%s) = %s, want %s", tt.dir, got, want)
		}
	}
}
