package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/experiments"
	"github.com/memtrain/memtrain/experiments/report"
)

// TestDemoQuick runs the quick demo end to end, as a user would: the
// standard arm must memorize most of its 16 passages and the goldfish arm
// almost none, with no extraction of held-out passages.
func TestDemoQuick(t *testing.T) {
	out := filepath.Join(t.TempDir(), "demo")
	stdout, errs, code := memtrain(t, "", "demo", "--quick", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(stdout, "report: "+filepath.Join(out, "report.md")) {
		t.Errorf("output:\n%s", stdout)
	}
	results, err := report.Load(out)
	if err != nil || len(results) != 2 {
		t.Fatalf("%d results: %v", len(results), err)
	}
	exact := map[string]float64{}
	for _, r := range results {
		p := r.Evals[0].Summary.Prefixes[0]
		if p.Members.Documents != 16 || p.NonMembers.Documents != 16 {
			t.Errorf("%s: %d members, %d non-members evaluated", r.Arm, p.Members.Documents, p.NonMembers.Documents)
		}
		if p.NonMembers.Exact.Mean != 0 {
			t.Errorf("%s: held-out passages extracted: %v", r.Arm, p.NonMembers.Exact)
		}
		exact[r.Loss] = p.Members.Exact.Mean
		t.Logf("%s: exact match %v, held-out loss %.3f", r.Arm, p.Members.Exact, r.HeldoutLoss)
	}
	if exact["standard"] < 0.5 || exact["goldfish"] > 0.1 {
		t.Errorf("exact match: standard %.3f (want ≥ 0.5), goldfish %.3f (want ≤ 0.1)", exact["standard"], exact["goldfish"])
	}
	for _, f := range []string{"report.md", "results.csv", "plots/training-loss.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	// The report can be rewritten from the folder alone.
	if stdout, errs, code := memtrain(t, "", "experiment", "report", out); code != 0 || !strings.Contains(stdout, "2 runs of 2 arms") {
		t.Errorf("experiment report: exit %d, %s %s", code, stdout, errs)
	}
}

func TestExperimentErrors(t *testing.T) {
	dir := t.TempDir()
	good := string(experiments.DemoSpecYAML(true))
	for _, tc := range []struct{ from, to, want string }{
		{"k: 4", "k: 1", "arms[1] (goldfish-k4): goldfish: k must be ≥ 2, got 1"},
		{"data: [builtin:sotu]", "data: [missing.jsonl]", "targets: data: stat " + filepath.Join(dir, "missing.jsonl")},
		{"{name: goldfish, suffix: 50}", "{name: custom, prefix: [90], suffix: 50}", "32 of 32 documents are too short for custom(prefix 90, suffix 50)"},
	} {
		path := filepath.Join(dir, "spec.yaml")
		os.WriteFile(path, []byte(strings.Replace(good, tc.from, tc.to, 1)), 0o644)
		out := filepath.Join(dir, "out")
		_, errs, code := memtrain(t, "", "experiment", "run", path, "--out", out, "--strict")
		// Progress lines may come first; the error is the last line.
		lines := strings.Split(strings.TrimSpace(errs), "\n")
		if last := lines[len(lines)-1]; code != 1 || !strings.HasPrefix(last, "memtrain: ") || !strings.Contains(last, tc.want) {
			t.Errorf("%s → %s: exit %d, %q; want a last line with %q", tc.from, tc.to, code, errs, tc.want)
		}
		if _, err := os.Stat(filepath.Join(out, "data", "train")); err == nil {
			t.Errorf("%s → %s: the dataset was written", tc.from, tc.to)
		}
		if _, err := os.Stat(filepath.Join(out, "base")); err == nil {
			t.Errorf("%s → %s: a base model was made", tc.from, tc.to)
		}
		os.RemoveAll(out)
	}
	if _, errs, code := memtrain(t, "", "experiment", "report", filepath.Join(dir, "nothing")); code != 1 || errs == "" {
		t.Errorf("report of nothing: exit %d %q", code, errs)
	}
}
