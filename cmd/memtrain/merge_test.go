package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMerge: a LoRA run's RUN/final evaluates on its base (named by the
// adapter), merges into an HF checkpoint that gives the same held-out
// loss, and exports the same way from the run folder; bad uses fail in
// one line.
func TestMerge(t *testing.T) {
	dir, tok := t.TempDir(), byteTokenizer(t)
	base, ds := smallModelAndData(t, dir, tok, "0.2")
	run := filepath.Join(dir, "run")
	if _, errs, code := memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", run, "--max-steps", "6", "--batch-size", "4",
		"--micro-batch", "2", "--schedule.lr", "3e-2", "--lora.rank", "4", "--lora.targets", "all-linear"); code != 0 {
		t.Fatal(errs)
	}
	loss := func(model string, extra ...string) string {
		t.Helper()
		out, errs, code := memtrain(t, "", append([]string{"eval", "loss", "--model", model, "--data", ds}, extra...)...)
		if code != 0 {
			t.Fatal(errs)
		}
		return strings.Fields(out)[1]
	}
	adapted := loss(filepath.Join(run, "final"))
	if b := loss(base); b == adapted {
		t.Fatalf("the adapter changed nothing: loss %s on the base too", b)
	}
	if got := loss(base, "--adapter", filepath.Join(run, "final")); got != adapted {
		t.Errorf("--model base --adapter run/final: loss %s, want %s", got, adapted)
	}
	if out, errs, code := memtrain(t, "", "inspect", filepath.Join(run, "final")); code != 0 || !strings.Contains(out, "LoRA fine-tune           r 4, alpha 8 on q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj") {
		t.Errorf("inspect of the adapter: exit %d, %s%s", code, out, errs)
	}
	merged := filepath.Join(dir, "merged")
	out, errs, code := memtrain(t, "", "merge", "--adapter", filepath.Join(run, "final"), "--out", merged)
	// Issue 33, item 9: the line names what was written, not the base as
	// the thing merged into.
	if want := "wrote " + merged + " (F32): the base "; code != 0 || !strings.HasPrefix(out, want) || !strings.Contains(out, "; the base is unchanged\n") {
		t.Fatalf("merge: exit %d, %q%s, want %q…", code, out, errs, want)
	}
	if got := loss(merged); got != adapted {
		t.Errorf("merged model: loss %s, the adapter on its base %s", got, adapted)
	}
	exported := filepath.Join(dir, "exported")
	if _, errs, code := memtrain(t, "", "export", run, "--out", exported); code != 0 {
		t.Fatal(errs)
	}
	if got := loss(exported); got != adapted {
		t.Errorf("exported LoRA run: loss %s, want %s", got, adapted)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"merge", "--out", filepath.Join(dir, "x")}, "--adapter"},
		{[]string{"merge", "--model", base, "--out", filepath.Join(dir, "x")}, "no adapter"},
		{[]string{"merge", "--model", base, "--adapter", ds, "--out", filepath.Join(dir, "x")}, "not a PEFT adapter folder"},
		{[]string{"merge", "--adapter", filepath.Join(run, "final"), "--out", merged}, "memtrain: merge: " + merged + " exists and is not empty: export into a new folder\n"},
		{[]string{"merge", "--adapter", filepath.Join(run, "final"), "--out", filepath.Join(dir, "x"), "--dtype", "f16"}, "--dtype"},
		{[]string{"finetune", "--model", filepath.Join(run, "final"), "--data", ds, "--out", filepath.Join(dir, "r2")}, "lora.init"},
	} {
		_, errs, code := memtrain(t, "", tc.args...)
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 1 {
			t.Errorf("%v: exit %d, %q (want an error with %q)", tc.args, code, errs, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x")); err == nil {
		t.Error("a failed merge left its output folder")
	}
}
