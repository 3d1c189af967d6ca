package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/internal/units"
)

// finetuneFixture makes a small base model and a document-mode dataset of
// Austen paragraphs with its tokenizer.
func finetuneFixture(t *testing.T, tokenizer string) (base, ds string) {
	t.Helper()
	dir := t.TempDir()
	base = filepath.Join(dir, "base")
	if _, errs, code := memtrain(t, "", "init", "--out", base, "--tokenizer", "builtin:llama2", "--hidden", "32", "--layers", "2",
		"--heads", "4", "--kv-heads", "2", "--intermediate", "64", "--seed", "3"); code != 0 {
		t.Fatal(errs)
	}
	raw, err := assets.Read(assets.Austen)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(raw, []byte("\n"))[:60]
	corpus := filepath.Join(dir, "austen.jsonl")
	os.WriteFile(corpus, bytes.Join(lines, nil), 0o644)
	ds = filepath.Join(dir, "ds")
	if _, errs, code := memtrain(t, "", "data", "prepare", "--input", corpus, "--tokenizer", tokenizer, "--out", ds,
		"--seq-len", "32", "--mode", "document", "--holdout", "0.1", "--bos", "--eos"); code != 0 {
		t.Fatal(errs)
	}
	return base, ds
}

func TestFinetuneResumeIsBitIdentical(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	runs := t.TempDir()
	args := func(out string, extra ...string) []string {
		return append([]string{"finetune", "--model", base, "--data", ds, "--out", out, "--max_steps", "6", "--batch_size", "4",
			"--micro_batch", "2", "--loss", "goldfish", "--goldfish.h", "4", "--schedule.lr", "1e-3", "--eval_every", "3"}, extra...)
	}
	a, b := filepath.Join(runs, "a"), filepath.Join(runs, "b")
	out, errs, code := memtrain(t, "", args(a)...)
	if code != 0 {
		t.Fatal(errs)
	}
	// The fraction dropped, and why it is short of 1/k (issue 33, item 11).
	if !regexp.MustCompile(`^trained 6 steps: loss [0-9.]+, dropped [0-9.]+% of targets \(goldfish: about 1 in 4 of the targets whose 4-token context is complete; a sequence's first 3 are kept\), `).MatchString(out) {
		t.Errorf("summary %q", out)
	}
	// Stopped as asked, the run says it is unfinished and how to go on;
	// resumed (stderr not a terminal), it says where it picks up (issue
	// 33, item 7).
	out, errs, code = memtrain(t, "", args(b, "--stop-after", "3")...)
	if code != 0 {
		t.Fatal(errs)
	}
	if want := "unfinished: resume with: memtrain finetune --resume " + b + "\n"; !strings.HasPrefix(out, "stopped after step 3 of 6 (--stop-after)") || !strings.HasSuffix(out, want) {
		t.Errorf("--stop-after: %q, want the stop and %q", out, want)
	}
	if _, errs, code = memtrain(t, "", args(b, "--resume", b)...); code != 0 || !strings.Contains(errs, "memtrain: resuming "+b+" from step 3 of 6\n") {
		t.Fatalf("resume: exit %d, stderr %q", code, errs)
	}
	for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
		x, err := os.ReadFile(filepath.Join(a, "checkpoints", "step-00000006", f))
		if err != nil {
			t.Fatal(err)
		}
		y, err := os.ReadFile(filepath.Join(b, "checkpoints", "step-00000006", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Errorf("%s: resumed run differs from the uninterrupted one", f)
		}
	}
	// Metrics: one line per step, schema 1, goldfish drops near 1/4.
	raw, _ := os.ReadFile(filepath.Join(a, "metrics.jsonl"))
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 6 {
		t.Fatalf("%d metrics lines", len(lines))
	}
	var m struct {
		Schema   int     `json:"schema"`
		Step     int     `json:"step"`
		Loss     float64 `json:"loss"`
		Dropped  float64 `json:"dropped_frac"`
		EvalLoss float64 `json:"eval_loss"`
	}
	json.Unmarshal([]byte(lines[5]), &m)
	if m.Schema != 1 || m.Step != 6 || !(m.Loss > 0) || !(m.Dropped >= 0.1 && m.Dropped <= 0.4) || !(m.EvalLoss > 0) {
		t.Errorf("last metrics line %s", lines[5])
	}
	if _, err := os.Stat(filepath.Join(a, "config.yaml")); err != nil {
		t.Error("no effective config saved")
	}
}

// TestFinetunePrintsHeldOutEvaluations: when stderr is not a terminal,
// each held-out evaluation is one plain line there, its step, loss and
// perplexity those of its metrics line.
func TestFinetunePrintsHeldOutEvaluations(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	out := filepath.Join(t.TempDir(), "run")
	_, errs, code := memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", out, "--max_steps", "5", "--batch_size", "2",
		"--micro_batch", "2", "--schedule.lr", "1e-3", "--eval_every", "2")
	if code != 0 {
		t.Fatal(errs)
	}
	raw, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	var want []string
	for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m struct {
			Step     int     `json:"step"`
			EvalLoss float64 `json:"eval_loss"`
			EvalPPL  float64 `json:"eval_perplexity"`
		}
		json.Unmarshal([]byte(l), &m)
		if m.EvalLoss > 0 {
			want = append(want, fmt.Sprintf("step %d/5: held-out loss %.4f, perplexity %s", m.Step, m.EvalLoss, units.FormatPerplexity(m.EvalPPL)))
		}
	}
	if len(want) != 3 { // steps 2, 4 and the last
		t.Fatalf("%d evaluations in metrics.jsonl, want 3", len(want))
	}
	var got []string
	for _, l := range strings.Split(errs, "\n") {
		if strings.Contains(l, "held-out") {
			got = append(got, l)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stderr evaluation lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestFinetuneSamples: samples.every generates from the configured prompts
// on its steps and at the end, prints them, and writes them to the metrics
// line of the step; on a grid they are one rank's.
func TestFinetuneSamples(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	dir := t.TempDir()
	conf := filepath.Join(dir, "run.yaml")
	os.WriteFile(conf, []byte("samples: {every: 2, prompts: [\"It is a truth\", \"Mr. Darcy\"], max_new_tokens: 5}\n"), 0o644)
	type sample struct{ Prompt, Text string }
	samplesOf := func(out string) map[int][]sample {
		raw, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
		got := map[int][]sample{}
		for _, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var m struct {
				Step    int      `json:"step"`
				Samples []sample `json:"samples"`
			}
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatal(err)
			}
			if m.Samples != nil {
				got[m.Step] = m.Samples
			}
		}
		return got
	}
	run := func(out string, extra ...string) (map[int][]sample, string) {
		args := append([]string{"finetune", "--config", conf, "--model", base, "--data", ds, "--out", out, "--max_steps", "3",
			"--batch_size", "4", "--micro_batch", "2", "--schedule.lr", "1e-3"}, extra...)
		_, errs, code := memtrain(t, "", args...)
		if code != 0 {
			t.Fatal(errs)
		}
		return samplesOf(out), errs
	}
	one, errs := run(filepath.Join(dir, "one"))
	if len(one) != 2 || len(one[2]) != 2 || len(one[3]) != 2 { // steps 2 and the last
		t.Fatalf("samples by step %+v", one)
	}
	for _, s := range append(one[2], one[3]...) {
		if s.Text == "" || (s.Prompt != "It is a truth" && s.Prompt != "Mr. Darcy") {
			t.Errorf("sample %+v", s)
		}
	}
	if want := fmt.Sprintf("step 2/3: sample %q → %q", one[2][1].Prompt, one[2][1].Text); !strings.Contains(errs, want) {
		t.Errorf("stderr lacks %s:\n%s", want, errs)
	}
	// A prompt the model cannot continue for max_new_tokens is refused
	// before the first step.
	long := filepath.Join(dir, "long")
	_, errs, code := memtrain(t, "", "finetune", "--config", conf, "--model", base, "--data", ds, "--out", long, "--max_steps", "3",
		"--batch_size", "4", "--micro_batch", "2", "--samples.max-new-tokens", "100000")
	if code == 0 || !strings.Contains(errs, "samples: prompt 1 has ") || !strings.Contains(errs, "max_position_embeddings") {
		t.Errorf("max_new_tokens past the model's positions: %d %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(long, "metrics.jsonl")); err == nil {
		if raw, _ := os.ReadFile(filepath.Join(long, "metrics.jsonl")); len(raw) > 0 {
			t.Error("a step ran before the prompts were checked")
		}
	}
	for _, g := range []string{"dp=2,y=2", "x=2,z=2"} {
		grid, _ := run(filepath.Join(dir, g), "--parallel", g)
		if !reflect.DeepEqual(grid, one) {
			t.Errorf("%s: samples %+v, one rank's %+v", g, grid, one)
		}
	}
}

func TestFinetuneErrors(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	_, ds3 := finetuneFixture(t, "builtin:llama3")
	long := filepath.Join(t.TempDir(), "long")
	if _, errs, code := memtrain(t, "", "data", "prepare", "--input", filepath.Join(filepath.Dir(ds), "austen.jsonl"),
		"--tokenizer", "builtin:llama2", "--out", long, "--seq-len", "4096", "--mode", "document"); code != 0 {
		t.Fatal(errs)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("model: x\nlearning_rate: 1\n"), 0o644)
	out := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--config", bad}, "learning_rate"},
		{[]string{"--model", base, "--data", ds3, "--out", out}, "another tokenizer"},
		{[]string{"--model", base, "--data", ds, "--out", out, "--loss", "goldfish", "--goldfish.k", "1"}, "k must be"},
		{[]string{"--model", base, "--data", ds, "--out", out, "--goldfish.strategy", "random"}, "random"},
		{[]string{"--model", base, "--data", ds, "--out", out, "--batch_size", "3", "--micro_batch", "2"}, "does not divide"},
		{[]string{"--model", base, "--out", out}, "data"},
		{[]string{"--model", base, "--data", long, "--out", out}, "max_position_embeddings"},
		// A batch the train split cannot fill, before the model loads.
		{[]string{"--model", base, "--data", ds, "--out", out, "--batch_size", "512", "--micro_batch", "8"}, "finetune: batch_size 512 is more than the "},
		// A learning rate that blows the weights up: the run stops at the
		// first non-finite loss and names the last good checkpoint.
		{[]string{"--model", base, "--data", ds, "--out", filepath.Join(out, "nan"), "--max_steps", "5", "--batch_size", "4",
			"--micro_batch", "2", "--schedule.lr", "1e30", "--schedule.min_lr", "0", "--save_every", "1", "--clip", "0"},
			"not finite (loss NaN, gradient norm NaN); stopped, last good checkpoint: " + filepath.Join(out, "nan", "checkpoints", "step-00000001")},
		// One that makes the loss shoot up, finite: the divergence watch
		// stops the run and names the last good checkpoint.
		{[]string{"--model", base, "--data", ds, "--out", filepath.Join(out, "diverge"), "--max_steps", "20", "--batch_size", "4",
			"--micro_batch", "2", "--schedule.lr", "3", "--schedule.warmup", "10", "--schedule.min_lr", "0", "--save_every", "1", "--clip", "0",
			"--divergence.factor", "2"},
			" diverged: over 2× the median "},
		{[]string{"--model", base, "--data", ds, "--out", out, "--divergence.factor", "0.5"}, "finetune: divergence: factor 0.5"},
	}
	for _, tt := range tests {
		_, errs, code := memtrain(t, "", append([]string{"finetune"}, tt.args...)...)
		if code != 1 || !strings.Contains(errs, tt.want) || strings.Count(errs, "\n") != 1 {
			t.Errorf("%v: code %d, stderr %q (want %q)", tt.args, code, errs, tt.want)
		}
	}
}

// TestMain lets the crash test run this test binary as memtrain itself.
func TestMain(m *testing.M) {
	if os.Getenv("MEMTRAIN_TEST_AS_CLI") == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestFinetuneSurvivesSIGKILLDuringSave kills a run by SIGKILL while it
// writes a checkpoint, resumes it from what is on disk, and checks that the
// final weights equal an uninterrupted run's bit for bit.
func TestFinetuneSurvivesSIGKILLDuringSave(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs SIGKILL")
	}
	base, ds := finetuneFixture(t, "builtin:llama2")
	runs := t.TempDir()
	args := func(out string, extra ...string) []string {
		return append([]string{"finetune", "--model", base, "--data", ds, "--out", out, "--max_steps", "6", "--batch_size", "4",
			"--micro_batch", "2", "--loss", "goldfish", "--goldfish.h", "4", "--schedule.lr", "1e-3", "--save_every", "2"}, extra...)
	}
	a, b := filepath.Join(runs, "a"), filepath.Join(runs, "b")
	if _, errs, code := memtrain(t, "", args(a)...); code != 0 {
		t.Fatal(errs)
	}
	cmd := exec.Command(os.Args[0], args(b)...)
	cmd.Env = append(os.Environ(), "MEMTRAIN_TEST_AS_CLI=1", killInSaveEnv+"=4")
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("run was not killed: %v\n%s", err, out)
	}
	latest, err := os.ReadFile(filepath.Join(b, "checkpoints", "latest"))
	if err != nil || strings.TrimSpace(string(latest)) != "step-00000002" {
		t.Fatalf("after the kill, latest = %q (%v), want step-00000002", latest, err)
	}
	if _, errs, code := memtrain(t, "", args(b, "--resume", b)...); code != 0 {
		t.Fatal(errs)
	}
	for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
		x, _ := os.ReadFile(filepath.Join(a, "checkpoints", "step-00000006", f))
		y, _ := os.ReadFile(filepath.Join(b, "checkpoints", "step-00000006", f))
		if len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("%s: the run resumed after SIGKILL differs from the uninterrupted one", f)
		}
	}
}

// TestFinetuneUnderLauncher: a build without MPI started as one of
// several processes refuses to run the job in every process.
func TestFinetuneUnderLauncher(t *testing.T) {
	if launch.MPIBuilt {
		t.Skip("an MPI build would initialise MPI: scripts/mpi-test.sh runs it under mpirun")
	}
	base, ds := finetuneFixture(t, "builtin:llama2")
	t.Setenv("OMPI_COMM_WORLD_SIZE", "2")
	for _, extra := range [][]string{nil, {"--parallel", "dp=2"}} {
		args := append([]string{"finetune", "--model", base, "--data", ds, "--out", t.TempDir(), "--max_steps", "1"}, extra...)
		_, errs, code := memtrain(t, "", args...)
		if code == 0 || !strings.Contains(errs, "mpirun or srun started 2 processes") {
			t.Errorf("%v: status %d, stderr %q", extra, code, errs)
		}
	}
}

// TestFinetuneFlagSpellings: flags are kebab-case in the help, the YAML
// spelling is an alias, a file may use either, and an unknown flag names
// the nearest known one.
func TestFinetuneFlagSpellings(t *testing.T) {
	help, _, code := memtrain(t, "", "finetune", "--help")
	if code != 0 {
		t.Fatal(help)
	}
	for _, line := range strings.Split(help, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "--") && strings.Contains(f[0], "_") {
			t.Errorf("help shows a snake_case flag: %q", line)
		}
	}
	for _, want := range []string{"--max-steps int", "--goldfish.k int", "--optimizer.weight-decay float", "--loss loss", "--goldfish.strategy strategy", "--eval-batch int"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q", want)
		}
	}
	base, ds := finetuneFixture(t, "builtin:llama2")
	dir := t.TempDir()
	for _, tc := range []struct{ name, flag string }{{"kebab", "--max-steps"}, {"snake", "--max_steps"}} {
		out := filepath.Join(dir, tc.name)
		stdout, errs, code := memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", out, tc.flag, "3", "--batch_size", "2", "--micro-batch", "2")
		if code != 0 || !strings.Contains(stdout, "trained 3 steps") {
			t.Errorf("%s 3: exit %d, %s %s", tc.flag, code, stdout, errs)
		}
	}
	cfg := filepath.Join(dir, "run.yaml")
	os.WriteFile(cfg, []byte("max-steps: 2\nbatch_size: 2\nmicro-batch: 2\nschedule: {min-lr: 0}\n"), 0o644)
	if stdout, errs, code := memtrain(t, "", "finetune", "--config", cfg, "--model", base, "--data", ds, "--out", filepath.Join(dir, "file")); code != 0 || !strings.Contains(stdout, "trained 2 steps") {
		t.Errorf("a file in both spellings: exit %d, %s %s", code, stdout, errs)
	}
	os.WriteFile(cfg, []byte("max_steps: 2\nschedule:\n  lr: 1e-3\n  warmpu: 2\n"), 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lr", "1e-3"}, "memtrain: unknown flag --lr; did you mean --schedule.lr?"},
		{[]string{"--max-step", "3"}, "memtrain: unknown flag --max-step; did you mean --max-steps?"},
		{[]string{"--goldfish_k", "3"}, "memtrain: unknown flag --goldfish_k; did you mean --goldfish.k?"},
		{[]string{"--config", cfg}, "memtrain: finetune: " + cfg + `:4:3: schedule: unknown key "warmpu" (did you mean warmup?)`},
		{[]string{"--loss", "goldfsh"}, `unknown loss "goldfsh" (want standard or goldfish)`},
	} {
		_, errs, code := memtrain(t, "", append([]string{"finetune", "--model", base, "--data", ds, "--out", filepath.Join(dir, "x")}, tc.args...)...)
		if code == 0 || !strings.Contains(errs, tc.want) || strings.Count(strings.TrimSpace(errs), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q; want one line with %q", tc.args, code, errs, tc.want)
		}
	}
}

// flipByte flips one bit of the file at path, at offset at.
func flipByte(t *testing.T, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
}

// TestFinetuneResumeSkipsDamagedCheckpoint: --resume passes over a
// damaged latest checkpoint (a flipped bit, a truncated file) for the
// newest intact one, with one warning line naming the bad file, and the
// run still ends bit-identical to an uninterrupted one; with every
// checkpoint damaged it fails naming each.
func TestFinetuneResumeSkipsDamagedCheckpoint(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	runs := t.TempDir()
	args := func(out string, extra ...string) []string {
		return append([]string{"finetune", "--model", base, "--data", ds, "--out", out, "--max_steps", "6", "--batch_size", "4",
			"--micro_batch", "2", "--schedule.lr", "1e-3", "--save_every", "2", "--keep", "0"}, extra...)
	}
	a := filepath.Join(runs, "a")
	if _, errs, code := memtrain(t, "", args(a)...); code != 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		name, file, want string
		damage           func(path string)
	}{
		{"bit flip", "model.safetensors", "SHA-256 differs", func(p string) { flipByte(t, p, 4096) }},
		{"truncated", "optimizer.safetensors", "truncated", func(p string) { os.Truncate(p, 1000) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := filepath.Join(runs, tc.name)
			if _, errs, code := memtrain(t, "", args(b, "--stop-after", "4")...); code != 0 {
				t.Fatal(errs)
			}
			bad := filepath.Join(b, "checkpoints", "step-00000004")
			tc.damage(filepath.Join(bad, tc.file))
			_, errs, code := memtrain(t, "", args(b, "--resume", b)...)
			if code != 0 {
				t.Fatal(errs)
			}
			want := "memtrain: warning: finetune: " + bad + ": " + tc.file + ": "
			// The damaged checkpoint's warning, then the metrics of steps
			// 3 and 4, redone from step 2, said to be dropped, and where
			// the run picks up.
			redone := "memtrain: warning: finetune: " + filepath.Join(b, "metrics.jsonl") + ": dropped the metrics of steps 3–4, redone from the checkpoint of step 2 (kept in metrics.jsonl.dropped)\n" +
				"memtrain: resuming " + b + " from step 2 of 6\n"
			if !strings.HasPrefix(errs, want) || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "resuming from step-00000002") || strings.Count(errs, "\n") != 3 || !strings.HasSuffix(errs, redone) {
				t.Errorf("stderr %q, want the warning line %q… and %q", errs, want, redone)
			}
			for _, f := range []string{"model.safetensors", "optimizer.safetensors"} {
				x, _ := os.ReadFile(filepath.Join(a, "checkpoints", "step-00000006", f))
				y, _ := os.ReadFile(filepath.Join(b, "checkpoints", "step-00000006", f))
				if len(x) == 0 || !bytes.Equal(x, y) {
					t.Errorf("%s: the run resumed from step 2 differs from the uninterrupted one", f)
				}
			}
		})
	}
	// Every checkpoint damaged: the error names each and its bad file.
	c := filepath.Join(runs, "c")
	if _, errs, code := memtrain(t, "", args(c, "--stop-after", "4")...); code != 0 {
		t.Fatal(errs)
	}
	flipByte(t, filepath.Join(c, "checkpoints", "step-00000004", "model.safetensors"), 4096)
	os.Remove(filepath.Join(c, "checkpoints", "step-00000002", "trainer_state.json"))
	_, errs, code := memtrain(t, "", args(c, "--resume", c)...)
	if code != 1 || !strings.Contains(errs, "no intact checkpoint") || !strings.Contains(errs, "step-00000004: model.safetensors: SHA-256 differs") ||
		!strings.Contains(errs, "step-00000002: trainer_state.json: missing") || strings.Count(errs, "\n") != 1 {
		t.Errorf("every checkpoint damaged: exit %d, stderr %q", code, errs)
	}
}

// TestInspectVerify: inspect --verify prints OK with the file count for an
// intact training checkpoint, and fails naming the bad file otherwise.
func TestInspectVerify(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	run := filepath.Join(t.TempDir(), "run")
	if _, errs, code := memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", run, "--max_steps", "1", "--batch_size", "2", "--micro_batch", "2"); code != 0 {
		t.Fatal(errs)
	}
	ck := filepath.Join(run, "checkpoints", "step-00000001")
	// config.json, model.safetensors, optimizer.safetensors, trainer_state.json, the two tokenizer files.
	out, errs, code := memtrain(t, "", "inspect", ck, "--verify")
	if code != 0 || out != ck+": OK, 6 files verified (step 1)\n" {
		t.Errorf("intact: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, tc := range []struct {
		file, want string
		damage     func(path string)
	}{
		{"model.safetensors", "SHA-256 differs from checkpoint.json's (corrupt)", func(p string) { flipByte(t, p, 100) }},
		{"tokenizer.json", "missing", func(p string) { os.Remove(p) }},
	} {
		tc.damage(filepath.Join(ck, tc.file))
		out, errs, code := memtrain(t, "", "inspect", ck, "--verify")
		if want := "memtrain: finetune: " + ck + ": " + tc.file + ": " + tc.want + "\n"; code != 1 || out != "" || errs != want {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %q", tc.file, code, out, errs, want)
		}
	}
	if _, errs, code := memtrain(t, "", "inspect", "--preset", "tiny", "--verify"); code != 1 || !strings.Contains(errs, "--verify checks a checkpoint folder") {
		t.Errorf("--verify with a preset: exit %d, %q", code, errs)
	}
}

// TestFinetuneExtractionFlags: the extraction block's keys are flags;
// its measurements reach the metrics lines of their steps and stderr.
func TestFinetuneExtractionFlags(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	out := filepath.Join(t.TempDir(), "run")
	_, errs, code := memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", out, "--max_steps", "3", "--batch_size", "4",
		"--micro_batch", "2", "--schedule.lr", "1e-3", "--extraction.every", "2", "--extraction.data", ds, "--extraction.protocol", "custom",
		"--extraction.prefix", "8", "--extraction.suffix", "8", "--extraction.limit", "4")
	if code != 0 {
		t.Fatal(errs)
	}
	if !strings.Contains(errs, "step 2/3: extraction custom-8-8: members exact match ") || !strings.Contains(errs, "step 3/3: extraction") {
		t.Errorf("stderr lacks the extraction lines:\n%s", errs)
	}
	raw, _ := os.ReadFile(filepath.Join(out, "metrics.jsonl"))
	for i, l := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var m struct {
			Extraction *struct {
				Members, NonMembers *struct{ Documents int }
			} `json:"extraction"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if (m.Extraction != nil) != (i >= 1) || m.Extraction != nil && (m.Extraction.Members.Documents != 4) {
			t.Errorf("line %d: %s", i+1, l)
		}
	}
	_, errs, code = memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", filepath.Join(t.TempDir(), "bad"), "--max_steps", "3",
		"--extraction.every", "2")
	if code == 0 || !strings.Contains(errs, "extraction: every is 2 but data is empty") {
		t.Errorf("every without data: %d %s", code, errs)
	}
}
