package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/checkpoints/gguf"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestExport: `memtrain export` of a run trained on a grid (its latest
// checkpoint, sharded over the grid), and the grid run's own RUN/final,
// equal, tensor for tensor, the HF checkpoint that the same run on one
// rank exported when it finished (RUN/final), within the grid's 1e-5
// (with SGD, whose update does not amplify the grid's rounding of
// near-zero gradients as AdamW's first steps do); the plain safetensors
// reader loads it by HF names, split into files by --max-shard-size, in
// bf16 with --dtype bf16; and the flag errors are one line each.
func TestExport(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	runs := t.TempDir()
	args := func(out string, extra ...string) []string {
		return append([]string{"finetune", "--model", base, "--data", ds, "--out", out, "--max_steps", "2", "--batch_size", "4",
			"--micro_batch", "4", "--schedule.lr", "1e-2", "--optimizer.name", "sgd"}, extra...)
	}
	one, grid := filepath.Join(runs, "one"), filepath.Join(runs, "grid")
	if _, errs, code := memtrain(t, "", args(one)...); code != 0 {
		t.Fatal(errs)
	}
	if _, errs, code := memtrain(t, "", args(grid, "--parallel", "dp=2,x=2,y=2")...); code != 0 {
		t.Fatal(errs)
	}
	if _, err := os.Stat(filepath.Join(grid, "checkpoints", "step-00000002", "model.rank-00000-of-00004.safetensors")); err != nil {
		t.Fatalf("the grid run's checkpoint is not sharded: %v", err)
	}
	out := filepath.Join(runs, "hf")
	stdout, errs, code := memtrain(t, "", "export", grid, "--out", out, "--max_shard_size", "20KB")
	if code != 0 {
		t.Fatal(errs)
	}
	if !strings.Contains(stdout, "exported") || !strings.Contains(errs, "model: "+grid+" → ") {
		t.Errorf("stdout %q, stderr %q", stdout, errs)
	}
	for _, f := range []string{"config.json", "tokenizer.json", checkpoints.SafetensorsIndexFile, "model-00001-of-"} {
		matches, _ := filepath.Glob(filepath.Join(out, f+"*"))
		if len(matches) == 0 {
			t.Errorf("export lacks %s", f)
		}
	}
	for _, exported := range []string{out, filepath.Join(grid, "final")} {
		compareExports(t, filepath.Join(one, "final"), exported)
	}

	// bf16, one file.
	out16 := filepath.Join(runs, "hf16")
	if _, errs, code := memtrain(t, "", "export", filepath.Join(one, "checkpoints", "step-00000002"), "--out", out16, "--dtype", "bf16", "--max-shard-size", "0"); code != 0 {
		t.Fatal(errs)
	}
	f, err := checkpoints.OpenFile(filepath.Join(out16, checkpoints.SafetensorsFile))
	if err != nil {
		t.Fatal(err)
	}
	if s := f.Tensors(); len(s) == 0 || s[0].DType != checkpoints.DTypeBF16 {
		t.Errorf("bf16 export: %+v", s)
	}
	f.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"export", grid}, "--out"},
		{[]string{"export", filepath.Join(grid, "checkpoints", "step-00000002"), "--out", out}, "not empty"},
		{[]string{"export", grid, "--out", filepath.Join(runs, "x"), "--dtype", "f16"}, "--dtype"},
		{[]string{"export", grid, "--out", filepath.Join(runs, "x"), "--max-shard-size", "lots"}, "--max-shard-size"},
		{[]string{"export", filepath.Join(runs, "none"), "--out", filepath.Join(runs, "x")}, "no such file"},
	} {
		_, errs, code := memtrain(t, "", tc.args...)
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%v: exit %d, %q (want one line with %q)", tc.args, code, errs, tc.want)
		}
	}
}

// compareExports checks that the HF checkpoint exported holds the tensors
// of want by HF name and shape, in float32, within 1e-5 relative.
func compareExports(t *testing.T, want, exported string) {
	t.Helper()
	a, err := checkpoints.Open(want)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := checkpoints.Open(exported)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, spec := range a.Config.TensorSpecs() {
		ia, _ := a.Weights.Tensor(spec.Name)
		ib, ok := b.Weights.Tensor(spec.Name)
		if !ok || !slices.Equal(ib.Shape, ia.Shape) || ib.DType != checkpoints.DTypeF32 {
			t.Errorf("%s: %s: %+v, one rank's %+v", exported, spec.Name, ib, ia)
			continue
		}
		x, _ := a.Weights.ReadFloat32(spec.Name)
		y, _ := b.Weights.ReadFloat32(spec.Name)
		if err := numtest.CloseL2(y, x, 1e-5); err != nil {
			t.Errorf("%s: %s: the grid run's export against the one-rank run's: %v", exported, spec.Name, err)
		}
	}
}

// TestExportGGUF: export --format gguf of a LoRA run (its latest
// checkpoint: the base with the adapter merged) writes the same file as
// the base with --adapter RUN/final; the file is a GGUF of the requested
// type (checkpoints/gguf's tests run such files in llama.cpp); bad flags
// fail in one line.
func TestExportGGUF(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	dir := t.TempDir()
	run := filepath.Join(dir, "run")
	if _, errs, code := memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", run, "--max-steps", "2", "--batch-size", "4",
		"--micro-batch", "4", "--schedule.lr", "3e-2", "--lora.rank", "4"); code != 0 {
		t.Fatal(errs)
	}
	// one file name, the model's general.name
	fromRun, fromBase := filepath.Join(dir, "a", "model.gguf"), filepath.Join(dir, "b", "model.gguf")
	os.Mkdir(filepath.Join(dir, "a"), 0o755)
	os.Mkdir(filepath.Join(dir, "b"), 0o755)
	stdout, errs, code := memtrain(t, "", "export", run, "--format", "gguf", "--dtype", "q8_0", "--out", fromRun)
	if code != 0 || !strings.Contains(stdout, "GGUF, Q8_0") || !strings.Contains(stdout, "merged in") {
		t.Fatalf("exit %d: %s%s", code, stdout, errs)
	}
	if _, errs, code := memtrain(t, "", "export", base, "--adapter", filepath.Join(run, "final"), "--format", "gguf", "--dtype", "Q8_0", "--out", fromBase); code != 0 {
		t.Fatal(errs)
	}
	a, errA := os.ReadFile(fromRun)
	b, errB := os.ReadFile(fromBase)
	if errA != nil || errB != nil || string(a) != string(b) {
		t.Errorf("the run's export and the base's with its final adapter differ (%v, %v)", errA, errB)
	}
	f, err := gguf.Read(fromRun)
	if err != nil {
		t.Fatal(err)
	}
	if ft, _ := f.Value("general.file_type"); ft != uint32(7) {
		t.Errorf("general.file_type %v, want 7 (Q8_0)", ft)
	}
	if q, ok := f.Tensor("blk.0.attn_q.weight"); !ok || q.Type != gguf.Q8_0 {
		t.Errorf("blk.0.attn_q.weight: %+v", q)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"export", base, "--format", "onnx", "--out", filepath.Join(dir, "x")}, "--format"},
		{[]string{"export", base, "--format", "gguf", "--dtype", "q4_0", "--out", filepath.Join(dir, "x")}, "--dtype"},
		{[]string{"export", base, "--dtype", "q8_0", "--out", filepath.Join(dir, "x")}, "--dtype"},
	} {
		_, errs, code := memtrain(t, "", tc.args...)
		if code != 1 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") > 0 {
			t.Errorf("%v: exit %d, %q (want one line with %q)", tc.args, code, errs, tc.want)
		}
	}
}
