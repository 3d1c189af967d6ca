package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/memtrain/memtrain/experiments"
)

// consoleStudy's arms sort by name (goldfish-k2 first) otherwise than the
// report orders them (the standard loss first).
const consoleStudy = `
name: console study
tokenizer: builtin:llama2
base:
  preset: tiny
  hidden: 16
  layers: 1
  heads: 2
  kv_heads: 2
  intermediate: 32
  max_positions: 128
  seed: 2
  pretrain:
    data: [builtin:austen]
    documents: 20
    seq_len: 32
    train: {max_steps: 2, batch_size: 2, micro_batch: 2}
targets: {data: [builtin:sotu], count: 3, holdout: 3, min_tokens: 30, max_tokens: 48, passages: true, seed: 5}
train: {max_steps: 4, batch_size: 2, micro_batch: 1, eval_every: 2, schedule: {lr: 1.0e-3}}
arms:
  - {name: standard, loss: standard}
  - {name: goldfish-k2, loss: goldfish, goldfish: {k: 2, h: 3}}
eval:
  protocols: [{name: custom, prefix: [8], suffix: 8}]
  resamples: 50
`

// TestExperimentConsoleMatchesReport: the console shows report.md's tables
// — arms in its order, every cell as it writes it — and the log's final
// training loss is the report's.
func TestExperimentConsoleMatchesReport(t *testing.T) {
	t.Setenv(experiments.CacheEnv, t.TempDir())
	dir := t.TempDir()
	spec := filepath.Join(dir, "study.yaml")
	if err := os.WriteFile(spec, []byte(consoleStudy), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	stdout, errs, code := memtrain(t, "", "experiment", "run", spec, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	md, err := os.ReadFile(filepath.Join(out, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The across-seeds tables (the per-seed ones have a seed column):
	// extraction and loss, then membership inference, each led by the arm.
	type cell struct{ label, value string }
	cells := map[string][]cell{}
	var arms []string
	var header []string
	for _, line := range strings.Split(string(md), "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| ---") {
			if !strings.HasPrefix(line, "| ---") {
				header = nil
			}
			continue
		}
		row := strings.Split(strings.Trim(line, "| "), " | ")
		switch {
		case row[0] == "arm" && len(row) > 1 && (row[1] == "documents (members / held-out)" || row[1] == "MIA AUC loss"):
			header = row
		case header != nil && len(row) == len(header):
			if !slices.Contains(arms, row[0]) {
				arms = append(arms, row[0])
			}
			for i := 1; i < len(row); i++ {
				cells[row[0]] = append(cells[row[0]], cell{header[i], row[i]})
			}
		}
	}
	if len(arms) != 2 || arms[0] != "standard" || len(cells["standard"]) < 17 {
		t.Fatalf("report arms %q, cells %q", arms, cells)
	}
	last := -1
	for _, arm := range arms {
		at := strings.Index(stdout, "\n"+arm+" (")
		if at < 0 {
			t.Errorf("arm %s not on the console:\n%s", arm, stdout)
			continue
		}
		if at < last {
			t.Errorf("arm %s printed out of the report's order:\n%s", arm, stdout)
		}
		last = at
		block := stdout[at:]
		ftl, column := "", -1
		for _, c := range cells[arm] {
			line := regexp.MustCompile(`(?m)^  ` + regexp.QuoteMeta(c.label) + ` +` + regexp.QuoteMeta(c.value) + `$`).FindString(block)
			if line == "" {
				t.Errorf("%s: console lacks %q, %q:\n%s", arm, c.label, c.value, block)
				continue
			}
			// Every value starts in one column: no label overflows it.
			at := utf8.RuneCountInString(line) - utf8.RuneCountInString(c.value)
			if column >= 0 && at != column {
				t.Errorf("%s: %q starts its value at column %d, the others at %d", arm, line, at, column)
			}
			column = at
			if c.label == "final train loss" {
				ftl, _, _ = strings.Cut(c.value, " ± ")
			}
		}
		// The cell is the mean over seeds ± their spread ("± —" with one).
		if want := "train " + arm + "-s1: done"; !regexp.MustCompile(regexp.QuoteMeta(want) + `[^\n]*final training loss ` + regexp.QuoteMeta(ftl)).MatchString(errs) {
			t.Errorf("%s: the log's final training loss is not the report's %s:\n%s", arm, ftl, errs)
		}
	}
	if long := regexp.MustCompile(`\d{5,}\.\d\d`).FindString(stdout); long != "" {
		t.Errorf("an unreadable number %s on the console:\n%s", long, stdout)
	}
}
