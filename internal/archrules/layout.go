package archrules

import (
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// A tensor's layout — its role and how the 4D grid splits it — is declared
// once, in its family's table in checkpoints (checkpoints/layout.go), and
// everything else reads the checkpoints.Role and checkpoints.Split a
// TensorSpec or an engine.Param carries. LayoutInferences finds the code
// that guesses a layout instead: from a tensor's name (a suffix such as
// "o_proj.weight", a comparison with a module's name) or from its rank
// (a Param's or a spec's one dimension taken to mean "a norm").

// A SourceLine is a line of non-test Go source that one of a check's forms
// matches.
type SourceLine struct {
	File string // slash-separated, relative to the module root
	Line int
	Text string // the line, trimmed
	Why  string // the form's reason
}

// A LayoutInference is a line of non-test Go source that infers a tensor's
// layout from its name or rank.
type LayoutInference struct{ SourceLine }

func (l LayoutInference) String() string {
	return fmt.Sprintf("%s:%d: %s (%s): read the declared checkpoints.Role or Split instead", l.File, l.Line, l.Text, l.Why)
}

// layoutForms are the forms of inference, matched on source lines whose
// comments are blanked.
var layoutForms = []lineForm{
	{regexp.MustCompile(`\bTransposed\(`), "a split guessed from a name"},
	{regexp.MustCompile(`strings\.(HasSuffix|HasPrefix|Contains|TrimSuffix|TrimPrefix|CutSuffix|CutPrefix|Cut|Index|LastIndex|Split)\([^)]*"[^"]*(proj|norm|embed|lm_head|layers)`),
		"a tensor classified by a piece of its name"},
	{regexp.MustCompile(`(==|!=|case)\s*"[^"]*(_proj|layernorm|embed_tokens|lm_head)`), "a tensor classified by its module's name"},
	{regexp.MustCompile(`"[^"]*(_proj|layernorm|embed_tokens|lm_head)[^"]*"\s*(==|!=)`), "a tensor classified by its module's name"},
	{regexp.MustCompile(`(==|!=|case)\s*checkpoints\.(EmbedTokensName|FinalNormName|LMHeadName)\b`), "a tensor classified by its name"},
	{regexp.MustCompile(`\bIsAdapterName\(`), "an adapter recognised by its name"},
	{regexp.MustCompile(`len\([][A-Za-z0-9_.]*\.(Full|Shape)\)\s*(==|!=|<=|>=|<|>)\s*[12]\b`), "a layout guessed from a tensor's rank"},
}

// LayoutInferences lists the lines of m's non-test Go files, in the
// packages under dirs (slash-separated, relative to the module root:
// "engine" covers engine/...), that infer a tensor's layout from its name
// or rank. Comments are not read.
func (m *Module) LayoutInferences(dirs ...string) ([]LayoutInference, error) {
	found, err := m.matchLines(dirs, layoutForms)
	if err != nil {
		return nil, err
	}
	out := make([]LayoutInference, len(found))
	for i, l := range found {
		out[i] = LayoutInference{l}
	}
	return out, nil
}

// A lineForm is a pattern of source lines that a check refuses, and why.
type lineForm struct {
	re  *regexp.Regexp
	why string
}

// matchLines lists the lines of m's non-test Go files, in the packages
// under dirs, that match one of forms (the first that matches gives the
// reason), sorted by file and line. Comments are not read.
func (m *Module) matchLines(dirs []string, forms []lineForm) ([]SourceLine, error) {
	var out []SourceLine
	for pkg, files := range m.Packages {
		if !slices.ContainsFunc(dirs, func(d string) bool { return pkg == d || strings.HasPrefix(pkg, d+"/") }) {
			continue
		}
		for _, f := range files {
			found, err := matchFile(m.Root, f.Name, forms)
			if err != nil {
				return nil, err
			}
			out = append(out, found...)
		}
	}
	slices.SortFunc(out, func(a, b SourceLine) int {
		if c := strings.Compare(a.File, b.File); c != 0 {
			return c
		}
		return a.Line - b.Line
	})
	return out, nil
}

// matchFile scans one file.
func matchFile(root, name string, forms []lineForm) ([]SourceLine, error) {
	src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		return nil, fmt.Errorf("archrules: %w", err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("archrules: %w", err)
	}
	// Blank the comments, keeping the lines.
	for _, g := range f.Comments {
		for i := fset.Position(g.Pos()).Offset; i < fset.Position(g.End()).Offset; i++ {
			if src[i] != '\n' {
				src[i] = ' '
			}
		}
	}
	var out []SourceLine
	for i, line := range bytes.Split(src, []byte("\n")) {
		for _, form := range forms {
			if form.re.Match(line) {
				out = append(out, SourceLine{File: name, Line: i + 1, Text: string(bytes.TrimSpace(line)), Why: form.why})
				break
			}
		}
	}
	return out, nil
}
