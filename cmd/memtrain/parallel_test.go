package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/numtest"
)

// metricsOf reads a run's metrics.jsonl.
func metricsOf(t *testing.T, out string) []map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var ms []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	return ms
}

// metricsColumn is one key's values over a run's metrics lines (0 where a
// line lacks it: eval_loss on a step that did not evaluate), for numtest.
func metricsColumn(ms []map[string]any, key string) []float64 {
	out := make([]float64, len(ms))
	for i, m := range ms {
		out[i], _ = m[key].(float64)
	}
	return out
}

// TestParallelFinetune: a run on a grid, stopped and resumed on another
// grid, logs one rank's metrics.
func TestParallelFinetune(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	runs := t.TempDir()
	args := func(out string, extra ...string) []string {
		return append([]string{"finetune", "--model", base, "--data", ds, "--out", out, "--max_steps", "4", "--batch_size", "4",
			"--micro_batch", "2", "--loss", "goldfish", "--goldfish.h", "4", "--schedule.lr", "1e-3", "--eval_every", "2"}, extra...)
	}
	a, b := filepath.Join(runs, "a"), filepath.Join(runs, "b")
	if _, errs, code := memtrain(t, "", args(a)...); code != 0 {
		t.Fatal(errs)
	}
	if _, errs, code := memtrain(t, "", args(b, "--parallel", "dp=2,x=2,y=2", "--stop-after", "2")...); code != 0 {
		t.Fatal(errs)
	}
	out, errs, code := memtrain(t, "", args(b, "--parallel", "y=2,z=2", "--overlap", "none", "--resume", b)...)
	if code != 0 {
		t.Fatal(errs)
	}
	if !strings.Contains(out, "trained 4 steps") {
		t.Errorf("output %q", out)
	}
	want, got := metricsOf(t, a), metricsOf(t, b)
	if len(got) != len(want) {
		t.Fatalf("%d metrics lines, want %d", len(got), len(want))
	}
	for _, k := range []string{"loss", "loss_all", "grad_norm", "eval_loss", "kept_tokens", "dropped_frac"} {
		if err := numtest.Close(metricsColumn(got, k), metricsColumn(want, k), numtest.Tol{Rel: 1e-5}); err != nil {
			t.Errorf("%s per step, grid against one rank: %v", k, err)
		}
	}
}

// TestParallelEvalAndGenerate: eval loss and generate on a grid print what
// one rank prints.
func TestParallelEvalAndGenerate(t *testing.T) {
	dir := initSmall(t)
	data := writeFile(t, "docs.jsonl", `{"text":"It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife."}
{"input_ids":[1,306,626,263,1243,4086,310,278,3186,29889]}
{"input_ids":[5]}
{"input_ids":[1,450,3186,338,263]}
`)
	var reps []finetune.LossReport
	for _, extra := range [][]string{nil, {"--parallel", "dp=2,x=2,y=2,z=2"}, {"--parallel", "dp=4,z=1", "--overlap", "oar"}} {
		out, errs, code := memtrain(t, "", append([]string{"eval", "loss", "--model", dir, "--data", data, "--json", "--batch", "1"}, extra...)...)
		if code != 0 {
			t.Fatal(errs)
		}
		var rep finetune.LossReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		reps = append(reps, rep)
	}
	docLosses := func(r finetune.LossReport) []float64 {
		out := make([]float64, len(r.PerDoc))
		for d, doc := range r.PerDoc {
			out[d] = doc.Loss
		}
		return out
	}
	for _, r := range reps[1:] {
		if r.Tokens != reps[0].Tokens || r.Documents != reps[0].Documents {
			t.Errorf("grid: %+v, one rank %+v", r, reps[0])
		}
		if err := numtest.Scalar(r.Loss, reps[0].Loss, numtest.Tol{Rel: 1e-5}); err != nil {
			t.Errorf("grid's loss against one rank's: %v", err)
		}
		if err := numtest.Close(docLosses(r), docLosses(reps[0]), numtest.Tol{Rel: 1e-5}); err != nil {
			t.Errorf("per-document losses, grid against one rank: %v", err)
		}
	}
	gen := func(extra ...string) string {
		out, errs, code := memtrain(t, "", append([]string{"generate", "--model", dir, "--prompt-ids", "1,450,3186", "--prompt", "Emma Woodhouse",
			"--max-new-tokens", "8", "--json"}, extra...)...)
		if code != 0 {
			t.Fatal(errs)
		}
		return out
	}
	if one, grid := gen(), gen("--parallel", "x=2,y=2,z=2"); grid != one {
		t.Errorf("grid generated\n%s\none rank\n%s", grid, one)
	}
}

func TestParallelErrors(t *testing.T) {
	dir := initSmall(t)
	base, ds := finetuneFixture(t, "builtin:llama2")
	out := t.TempDir()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"generate", "--model", dir, "--prompt-ids", "1", "--parallel", "x=3"}, "X=3 does not divide hidden_size 32"},
		{[]string{"generate", "--model", dir, "--prompt-ids", "1", "--parallel", "y=4"}, "Y=4 does not divide num_key_value_heads 2"},
		{[]string{"generate", "--model", dir, "--prompt-ids", "1", "--parallel", "w=2"}, `unknown axis "w"`},
		{[]string{"generate", "--model", dir, "--prompt-ids", "1", "--parallel", "x=0"}, "N ≥ 1"},
		{[]string{"generate", "--model", dir, "--prompt-ids", "1", "--parallel", "x=2,x=2"}, "x given twice"},
		{[]string{"generate", "--model", dir, "--prompt-ids", "1", "--parallel", "x=2", "--overlap", "fast"}, `unknown "fast"`},
		{[]string{"eval", "loss", "--model", dir, "--data", "x.jsonl", "--parallel", "z=3"}, "Z=3 does not divide"},
		{[]string{"finetune", "--model", base, "--data", ds, "--out", out, "--batch_size", "4", "--micro_batch", "2", "--parallel", "dp=4"},
			"micro_batch 2 does not split over the 4 data×Z ranks"},
	} {
		_, errs, code := memtrain(t, "", tt.args...)
		if code != 1 || !strings.Contains(errs, tt.want) {
			t.Errorf("%v: code %d, stderr %q (want %q)", tt.args, code, errs, tt.want)
		}
	}
}
