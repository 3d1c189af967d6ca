// Package report reads an experiment's results folder and writes its
// report: report.md (the setup, one table per protocol and prefix length,
// the plots), results.csv (every number) and plots/*.png (gonum/plot).
// It owns the result schema the runner of package experiments writes
// (ArmResult, one result.json per finished arm and seed) and the folder's
// layout (results.go), so that a report can be redrawn from a folder alone,
// without the runner, a spec or a model: Write(dir, Options{}).
package report
