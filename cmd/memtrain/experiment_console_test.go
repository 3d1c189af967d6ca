package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

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
	var header []string
	var rows [][]string
	for _, line := range strings.Split(string(md), "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		switch {
		case cells[0] == "arm" && len(cells) > 1 && cells[1] == "documents (members / held-out)":
			header = cells
		case header != nil && len(cells) == len(header):
			rows = append(rows, cells)
		}
	}
	if len(rows) != 2 || rows[0][0] != "standard" {
		t.Fatalf("report rows %q", rows)
	}
	last := -1
	for _, row := range rows {
		at := strings.Index(stdout, "\n"+row[0]+" (")
		if at < 0 {
			t.Errorf("arm %s not on the console:\n%s", row[0], stdout)
			continue
		}
		if at < last {
			t.Errorf("arm %s printed out of the report's order:\n%s", row[0], stdout)
		}
		last = at
		block := stdout[at:]
		for i := 1; i < len(row); i++ {
			if want := fmt.Sprintf("  %-32s %s\n", header[i], row[i]); !strings.Contains(block, want) {
				t.Errorf("%s: console lacks %q:\n%s", row[0], want, block)
			}
		}
		// The cell is the mean over seeds ± their spread ("± —" with one).
		ftl, _, _ := strings.Cut(row[slices.Index(header, "final train loss")], " ± ")
		if want := "train " + row[0] + "-s1: done"; !regexp.MustCompile(regexp.QuoteMeta(want) + `[^\n]*final training loss ` + regexp.QuoteMeta(ftl)).MatchString(errs) {
			t.Errorf("%s: the log's final training loss is not the report's %s:\n%s", row[0], ftl, errs)
		}
	}
	if long := regexp.MustCompile(`\d{5,}\.\d\d`).FindString(stdout); long != "" {
		t.Errorf("an unreadable number %s on the console:\n%s", long, stdout)
	}
}
