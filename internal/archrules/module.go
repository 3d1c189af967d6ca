package archrules

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Module is the import graph of a Go module's non-test files.
type Module struct {
	Root string // the directory holding go.mod
	Path string // the module path
	// Packages maps each package directory, slash-separated and relative to
	// Root ("." for Root itself), to its non-test files.
	Packages map[string][]File
}

// File is one non-test Go file and its imports.
type File struct {
	Name    string   // slash-separated, relative to the module root
	Imports []string // import paths as written, in source order
}

// Violation is an import that a rule forbids.
type Violation struct {
	File   string // slash-separated, relative to the module root
	Import string // the import path as written
	Rule   Rule
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: imports %s, which rule %q (%s line %d) forbids", v.File, v.Import, v.Rule.String(), v.Rule.File, v.Rule.Line)
}

// FindRoot returns the nearest directory at or above dir that holds a go.mod.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("finding the module root: %w", err)
	}
	for d := dir; ; {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("finding the module root: %w", err)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.mod in %s or any directory above it", dir)
		}
		d = parent
	}
}

// Load parses the imports of every non-test Go file of the module rooted at
// root. Build constraints are ignored on purpose: every file is read, so
// that files behind tags (mpi, ignore, other platforms) obey the rules too.
// Like the go command, it skips testdata and directories whose names start
// with . or _, and nested modules, which are not part of this one.
func Load(root string) (*Module, error) {
	modPath, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	m := &Module{Root: root, Path: modPath, Packages: map[string][]File{}}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p == root {
				return nil
			}
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") ||
			strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("parsing imports: %w", err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		file := File{Name: filepath.ToSlash(rel)}
		for _, spec := range f.Imports {
			imp, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: import %s: %w", file.Name, spec.Path.Value, err)
			}
			file.Imports = append(file.Imports, imp)
		}
		pkg := path.Dir(file.Name)
		m.Packages[pkg] = append(m.Packages[pkg], file)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("loading module %s: %w", root, err)
	}
	return m, nil
}

// modulePath reads the module path from a go.mod file.
func modulePath(gomod string) (string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return "", fmt.Errorf("reading the module path: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "module")
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		rest, _, _ = strings.Cut(rest, "//")
		p := strings.TrimSpace(rest)
		if u, err := strconv.Unquote(p); err == nil {
			p = u
		}
		if p != "" {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: no module line", gomod)
}

// rel returns an import path relative to the module root, and false for
// paths outside the module (the standard library, dependencies, "C").
func (m *Module) rel(imp string) (string, bool) {
	if imp == m.Path {
		return ".", true
	}
	r, ok := strings.CutPrefix(imp, m.Path+"/")
	return r, ok
}

// Check returns every import that a rule forbids, sorted by file, with one
// violation per import and rule.
func (m *Module) Check(rules []Rule) []Violation {
	var vs []Violation
	for pkg, files := range m.Packages {
		for _, f := range files {
			for _, imp := range f.Imports {
				r, ok := m.rel(imp)
				if !ok {
					continue
				}
				for _, rule := range rules {
					if rule.Forbids(pkg, r) {
						vs = append(vs, Violation{File: f.Name, Import: imp, Rule: rule})
					}
				}
			}
		}
	}
	slices.SortFunc(vs, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.File, b.File), cmp.Compare(a.Import, b.Import), cmp.Compare(a.Rule.Line, b.Rule.Line))
	})
	return vs
}

// Unmatched returns, for each rule, the patterns that match no package of
// the module: a misspelt or stale pattern would make its rule check nothing.
func (m *Module) Unmatched(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		for _, p := range []struct {
			pattern string
			re      *regexp.Regexp
		}{{r.From, r.from}, {r.To, r.to}} {
			if !m.matchesAny(p.re) {
				out = append(out, fmt.Sprintf("%s line %d: pattern %q of rule %q matches no package of %s", r.File, r.Line, p.pattern, r.String(), m.Path))
			}
		}
	}
	return out
}

func (m *Module) matchesAny(re *regexp.Regexp) bool {
	for pkg := range m.Packages {
		if re.MatchString(pkg) {
			return true
		}
	}
	return false
}
