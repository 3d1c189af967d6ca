package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/memtrain/memtrain/internal/numtest"
	"github.com/memtrain/memtrain/memorization"

	"github.com/memtrain/memtrain/experiments"
	"github.com/memtrain/memtrain/experiments/report"
)

// TestDemoQuick runs the quick demo end to end, as a user would: the
// standard arm must memorize most of its 16 passages and the goldfish arm
// almost none, with no extraction of held-out passages, and both keep the
// filler's held-out text within 10% of the base model's loss. It is one of
// .ci/run's end-to-end checks, beside TestDemoFull (about a minute on 2
// cores: a third of this package's time under go test ./...).
func TestDemoQuick(t *testing.T) {
	if os.Getenv("MEMTRAIN_E2E") == "" {
		t.Skip("an end-to-end check that .ci/run runs: set MEMTRAIN_E2E=1 to run it here")
	}
	out, _ := runDemo(t, true, 16, 0.5, 0.1)
	for _, f := range []string{"report.md", "results.csv", "plots/training-loss.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	// The report can be rewritten from the folder alone, under the
	// study's own title (issue 33, item 2).
	before, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if stdout, errs, code := memtrain(t, "", "experiment", "report", out); code != 0 || !strings.Contains(stdout, "2 runs of 2 arms") {
		t.Errorf("experiment report: exit %d, %s %s", code, stdout, errs)
	}
	after, _ := os.ReadFile(filepath.Join(out, "report.md"))
	if title, _, _ := strings.Cut(string(before), "\n"); !strings.HasPrefix(string(after), title+"\n") || strings.Contains(title, "Memorization experiment: ") {
		t.Errorf("the rewritten report's title: %q, the run's %q", strings.SplitN(string(after), "\n", 2)[0], title)
	}
}

// TestDemoFull runs the full demo (.ci/run's end-to-end step): the
// standard arm memorizes at least 90% of its 64 passages, the goldfish
// arm at most 5%, neither extracts a held-out passage, and both keep the
// filler's held-out loss within 10% of the base model's.
func TestDemoFull(t *testing.T) {
	if os.Getenv("MEMTRAIN_E2E") == "" {
		t.Skip("an end-to-end check that .ci/run runs: set MEMTRAIN_E2E=1 to run it here")
	}
	start := time.Now()
	runDemo(t, false, 64, 0.9, 0.05)
	t.Logf("the full demo took %v", time.Since(start).Round(time.Second))
}

// runDemo runs the demo (quick or full) into a fresh folder with a fresh
// base cache and checks its outcome: members evaluated of each arm, no
// held-out passage extracted, the standard arm's exact match at least
// minStandard, the goldfish arm's at most maxGoldfish, both arms' held-out
// filler loss within 10% of the base's and shown on the console. It
// returns the demo's folder and its stdout.
func runDemo(t *testing.T, quick bool, members int, minStandard, maxGoldfish float64) (string, string) {
	t.Helper()
	t.Setenv(experiments.CacheEnv, t.TempDir())
	out := filepath.Join(t.TempDir(), "demo")
	args := []string{"demo", "--out", out}
	if quick {
		args = append(args, "--quick")
	}
	stdout, errs, code := memtrain(t, "", args...)
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
		if p.Members.Documents != members || p.NonMembers.Documents != members {
			t.Errorf("%s: %d members, %d non-members evaluated, want %d", r.Arm, p.Members.Documents, p.NonMembers.Documents, members)
		}
		if p.NonMembers.Exact.Mean != 0 {
			t.Errorf("%s: held-out passages extracted: %v", r.Arm, p.NonMembers.Exact)
		}
		exact[r.Loss] = p.Members.Exact.Mean
		// Both claims: the targets are mixed into filler text, and
		// neither arm loses the filler's held-out text (issue 33, item 15).
		if r.FillerHeldout == 0 || !(r.BaseFillerHeldoutLoss > 0) {
			t.Fatalf("%s: no utility measured (%d held-out filler documents, base loss %v)", r.Arm, r.FillerHeldout, r.BaseFillerHeldoutLoss)
		}
		ratio := r.FillerHeldoutLoss / r.BaseFillerHeldoutLoss
		if !(ratio <= 1.10) {
			t.Errorf("%s: held-out filler loss %.3f, %.2f× the base's %.3f (want within 10%%)", r.Arm, r.FillerHeldoutLoss, ratio, r.BaseFillerHeldoutLoss)
		}
		t.Logf("%s: exact match %v, held-out filler loss %.3f (%.3f× the base's)", r.Arm, p.Members.Exact, r.FillerHeldoutLoss, ratio)
	}
	if !(exact["standard"] >= minStandard) || !(exact["goldfish"] <= maxGoldfish) {
		t.Errorf("exact match: standard %.3f (want ≥ %g), goldfish %.3f (want ≤ %g)", exact["standard"], minStandard, exact["goldfish"], maxGoldfish)
	}
	if n := strings.Count(stdout, "utility: held-out filler loss ÷ base's"); n != 2 {
		t.Errorf("the console shows utility for %d arms, want 2:\n%s", n, stdout)
	}
	return out, stdout
}

func TestExperimentErrors(t *testing.T) {
	t.Setenv(experiments.CacheEnv, t.TempDir())
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

// gridStudy is a tiny study whose batches split over four data·Z ranks.
const gridStudy = `
name: grid study
tokenizer: builtin:llama2
base:
  preset: tiny
  hidden: 16
  layers: 2
  heads: 2
  kv_heads: 2
  intermediate: 32
  max_positions: 64
  seed: 3
  pretrain:
    data: [builtin:austen]
    documents: 24
    seq_len: 32
    train: {max_steps: 3, batch_size: 4, micro_batch: 4, schedule: {lr: 3.0e-3}}
targets: {data: [builtin:sotu], count: 4, holdout: 4, min_tokens: 30, max_tokens: 48, passages: true, seed: 5}
train: {max_steps: 60, batch_size: 4, micro_batch: 4, eval_every: 30, schedule: {lr: 2.0e-2, min_lr: 1.0e-3}}
arms:
  - {name: standard, loss: standard}
  - {name: goldfish, loss: goldfish, goldfish: {k: 2, h: 3}}
eval:
  protocols: [{name: custom, prefix: [8], suffix: 8}]
  resamples: 50
`

// TestExperimentParallel: a study on a grid (dp=2, z=2: every batch split
// over four ranks, every weight over two) gives one rank's results.
func TestExperimentParallel(t *testing.T) {
	t.Setenv(experiments.CacheEnv, t.TempDir())
	dir := t.TempDir()
	spec := filepath.Join(dir, "grid.yaml")
	if err := os.WriteFile(spec, []byte(gridStudy), 0o644); err != nil {
		t.Fatal(err)
	}
	results := map[string][]report.ArmResult{}
	for _, grid := range []string{"", "dp=2,z=2"} {
		out := filepath.Join(dir, "out"+grid)
		args := []string{"experiment", "run", spec, "--out", out}
		if grid != "" {
			args = append(args, "--parallel", grid)
		}
		if _, errs, code := memtrain(t, "", args...); code != 0 {
			t.Fatalf("--parallel %q: exit %d: %s", grid, code, errs)
		}
		res, err := report.Load(out)
		if err != nil || len(res) != 2 {
			t.Fatalf("--parallel %q: %d results, %v", grid, len(res), err)
		}
		results[grid] = res
	}
	for i, want := range results[""] {
		got := results["dp=2,z=2"][i]
		for _, c := range []struct {
			name string
			g, w float64
		}{
			{"held-out loss", got.HeldoutLoss, want.HeldoutLoss},
			{"base held-out loss", got.BaseHeldoutLoss, want.BaseHeldoutLoss},
			{"final training loss", got.FinalTrainLoss, want.FinalTrainLoss},
		} {
			if c.w == 0 {
				t.Errorf("%s: %s 0 on one rank", want.Arm, c.name)
			}
			if err := numtest.Scalar(c.g, c.w, numtest.Tol{Rel: 1e-5}); err != nil {
				t.Errorf("%s: %s on the grid against one rank: %v", want.Arm, c.name, err)
			}
		}
		gs, ws := got.Evals[0].Summary, want.Evals[0].Summary
		if len(gs.Prefixes) != len(ws.Prefixes) {
			t.Fatalf("%s: %d prefixes on the grid, %d on one rank", want.Arm, len(gs.Prefixes), len(ws.Prefixes))
		}
		for k := range ws.Prefixes {
			for _, side := range []struct {
				name string
				g, w memorization.Group
			}{{"members", gs.Prefixes[k].Members, ws.Prefixes[k].Members}, {"non-members", gs.Prefixes[k].NonMembers, ws.Prefixes[k].NonMembers}} {
				g, w := side.g, side.w
				if g.Exact != w.Exact || g.TokenMatch != w.TokenMatch || g.PrefixMatch != w.PrefixMatch || g.RougeLTokens != w.RougeLTokens {
					t.Errorf("%s %s: extraction %+v on the grid, %+v on one rank", want.Arm, side.name, g, w)
				}
				if err := numtest.Scalar(g.Loss.Mean, w.Loss.Mean, numtest.Tol{Rel: 1e-5}); err != nil {
					t.Errorf("%s %s: loss on the grid against one rank: %v", want.Arm, side.name, err)
				}
			}
		}
		if err := numtest.Scalar(gs.MIA.LossAUC, ws.MIA.LossAUC, numtest.Tol{Rel: 1e-5}); err != nil {
			t.Errorf("%s: loss AUC on the grid against one rank: %v", want.Arm, err)
		}
		t.Logf("%s: exact match %.3f, token match %.3f, held-out loss %.5f (grid %.5f)", want.Arm,
			ws.Prefixes[0].Members.Exact.Mean, ws.Prefixes[0].Members.TokenMatch.Mean, want.HeldoutLoss, got.HeldoutLoss)
	}
}

// TestExperimentSignal: SIGTERM stops a study at a training step with a
// checkpoint, exits 143 naming the command that continues it, and that
// command finishes it with one rank's results.
func TestExperimentSignal(t *testing.T) {
	t.Setenv(experiments.CacheEnv, t.TempDir())
	if runtime.GOOS == "windows" {
		t.Skip("signals")
	}
	dir := t.TempDir()
	spec := filepath.Join(dir, "grid.yaml")
	os.WriteFile(spec, []byte(strings.Replace(gridStudy, "max_steps: 60,", "max_steps: 80,", 1)), 0o644)
	out := filepath.Join(dir, "out")
	cmd, stderr := child(t, "experiment", "run", spec, "--out", out)
	train := filepath.Join(out, "arms", "standard-s1", "train")
	waitFor(t, "the standard arm's third step", func() bool { return metricsLines(train) >= 3 })
	cmd.Process.Signal(syscall.SIGTERM)
	if st := exitStatus(cmd.Wait()); st != 143 {
		t.Fatalf("exit %d, want 143: %s", st, stderr)
	}
	want := "continue with: memtrain experiment run " + spec + " --out " + out
	if !strings.Contains(stderr.String(), "stopped in train standard-s1 after step") || !strings.HasSuffix(strings.TrimSpace(stderr.String()), want) {
		t.Errorf("stderr %q, want the stop and %q", stderr, want)
	}
	steps := metricsLines(train)
	if _, err := os.Stat(filepath.Join(train, "checkpoints", fmt.Sprintf("step-%08d", steps))); err != nil {
		t.Errorf("no checkpoint of the last logged step %d: %v", steps, err)
	}
	if _, errs, code := memtrain(t, "", "experiment", "run", spec, "--out", out); code != 0 {
		t.Fatalf("continuing: exit %d: %s", code, errs)
	}
	if res, err := report.Load(out); err != nil || len(res) != 2 || res[0].Steps != 80 {
		t.Errorf("after continuing: %d results, %v", len(res), err)
	}
}

// TestResumeCommand: the line that continues a study runs as printed:
// boolean flags without a value word (issue 33, item 1: "--quick true"
// gave unknown command "true"), words with spaces or quotes quoted.
func TestResumeCommand(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--quick", "--out", "q"}, "memtrain demo --quick --out quick"},
		{[]string{"demo", "--quick=false", "--out", "q"}, "memtrain demo --quick=false --out quick"},
		{[]string{"experiment", "run", "my study.yaml", "--strict", "--threads", "2", "--out", "q"}, "memtrain experiment run --strict --threads 2 'my study.yaml' --out quick"},
		{[]string{"experiment", "run", "it's.yaml", "--out", "q"}, `memtrain experiment run 'it'\''s.yaml' --out quick`},
	} {
		cmd, rest, err := newRootCmd().Find(c.args)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Fatal(err)
		}
		if got := resumeCommand(cmd, "quick"); got != c.want {
			t.Errorf("%v: %q, want %q", c.args, got, c.want)
		}
	}
}
