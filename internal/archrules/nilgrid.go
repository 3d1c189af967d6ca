package archrules

import (
	"fmt"
	"regexp"
)

// One rank is the grid of one rank (parallel.One): a model's grid and a
// run's are never nil, and the code behind them takes the same path on
// one rank as on many, with nothing to exchange. parallel.OrOne is the one
// place where nil still means one rank, for the entry points that accept
// it. NilGrids finds the code that tests for a nil grid instead: a grid,
// a model's Grid() or Options.Parallel compared with nil.

// A NilGrid is a line of non-test Go source that compares a grid with nil.
type NilGrid struct{ SourceLine }

func (n NilGrid) String() string {
	return fmt.Sprintf("%s:%d: %s (%s): one rank is the grid of one rank (parallel.One, parallel.OrOne at an entry point)", n.File, n.Line, n.Text, n.Why)
}

// nilGridForms are the comparisons, matched on source lines whose
// comments are blanked. A grid is named g or grid wherever these packages
// hold one, so a variable of that name compared with nil is one.
var nilGridForms = []lineForm{
	{regexp.MustCompile(`\.Parallel\s*(==|!=)\s*nil\b|\bnil\s*(==|!=)\s*[\w.]*\.Parallel\b`), "Options.Parallel compared with nil"},
	{regexp.MustCompile(`\bGrid\(\)\s*(==|!=)\s*nil\b|\bnil\s*(==|!=)\s*[\w.]*\.Grid\(\)`), "a model's Grid() compared with nil"},
	{regexp.MustCompile(`(^|[^\w.])(g|grid)\s*(==|!=)\s*nil\b|\bnil\s*(==|!=)\s*(g|grid)\b`), "a grid compared with nil"},
}

// NilGrids lists the lines of m's non-test Go files, in the packages
// under dirs, that compare a grid with nil. Comments are not read.
func (m *Module) NilGrids(dirs ...string) ([]NilGrid, error) {
	found, err := m.matchLines(dirs, nilGridForms)
	if err != nil {
		return nil, err
	}
	out := make([]NilGrid, len(found))
	for i, l := range found {
		out[i] = NilGrid{l}
	}
	return out, nil
}
