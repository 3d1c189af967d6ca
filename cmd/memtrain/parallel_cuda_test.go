package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data/assets"
	"github.com/memtrain/memtrain/engine/cuda"
	"github.com/memtrain/memtrain/engine/cuda/cudatest"
	"github.com/memtrain/memtrain/internal/numtest"
)

// The grid on GPUs runs here on engine/cuda's fake CUDA libraries
// (cudatest), in a child process.

// memtrainOnFake runs memtrain in a child process on the fake GPUs. It
// returns standard error and the exit code, and the number of kernels the
// fake GPUs ran, which the fake traces to standard error.
func memtrainOnFake(t *testing.T, args ...string) (stderr string, code, kernels int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = cudatest.Env(t, "MEMTRAIN_TEST_AS_CLI=1", "MEMTRAIN_FAKECUDA_TRACE=1")
	var errb strings.Builder
	cmd.Stderr = &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatal(err)
	}
	var rest strings.Builder
	for _, line := range strings.SplitAfter(errb.String(), "\n") {
		if strings.HasPrefix(line, "fakecuda: launch ") {
			kernels++
		} else {
			rest.WriteString(line)
		}
	}
	return rest.String(), code, kernels
}

// byteTokenizer writes a folder holding a byte-fallback BPE tokenizer with
// no merges: <unk>, <s>, </s>, the 256 bytes and "▁", 260 tokens. The
// fake GPUs are slow, and a model of Llama 2's 32000 tokens would spend
// seconds a step in its embedding and head alone.
func byteTokenizer(t *testing.T) string {
	t.Helper()
	vocab := map[string]int{"<unk>": 0, "<s>": 1, "</s>": 2}
	for b := range 256 {
		vocab[fmt.Sprintf("<0x%02X>", b)] = len(vocab)
	}
	vocab["▁"] = len(vocab)
	var added []map[string]any
	for id, content := range []string{"<unk>", "<s>", "</s>"} {
		added = append(added, map[string]any{"id": id, "content": content, "special": true})
	}
	tok := map[string]any{
		"added_tokens": added,
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"model": map[string]any{"type": "BPE", "unk_token": "<unk>", "byte_fallback": true, "vocab": vocab, "merges": []string{}},
	}
	dir := t.TempDir()
	raw, err := json.Marshal(tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"bos_token": "<s>", "eos_token": "</s>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// smallModelAndData makes, in dir, a small random model (base, with the
// tokenizer folder tok) and a dataset (ds) of 40 Austen paragraphs of 32
// tokens, holdout the held-out fraction.
func smallModelAndData(t *testing.T, dir, tok, holdout string) (base, ds string) {
	t.Helper()
	base, ds = filepath.Join(dir, "base"), filepath.Join(dir, "ds")
	if _, errs, code := memtrain(t, "", append([]string{"init", "--out", base, "--tokenizer", tok, "--seed", "3"}, small...)...); code != 0 {
		t.Fatal(errs)
	}
	raw, err := assets.Read(assets.Austen)
	if err != nil {
		t.Fatal(err)
	}
	corpus := writeFile(t, "austen.jsonl", string(bytes.Join(bytes.SplitAfter(raw, []byte("\n"))[:40], nil)))
	if _, errs, code := memtrain(t, "", "data", "prepare", "--input", corpus, "--tokenizer", tok, "--out", ds,
		"--seq-len", "32", "--mode", "document", "--holdout", holdout, "--bos", "--eos"); code != 0 {
		t.Fatal(errs)
	}
	return base, ds
}

// TestParallelCUDAFinetuneEmulated: finetune on grids of four fake GPUs,
// one a rank with NCCL communicators, logs one CPU rank's metrics within
// 1e-5; and a grid larger than the GPUs there are is refused in one line.
func TestParallelCUDAFinetuneEmulated(t *testing.T) {
	cudatest.LibDir(t)
	dir, tok := t.TempDir(), byteTokenizer(t)
	base, ds := smallModelAndData(t, dir, tok, "0.1")
	runs := t.TempDir()
	args := func(out string, extra ...string) []string {
		return append([]string{"finetune", "--model", base, "--data", ds, "--out", out, "--max_steps", "2", "--batch_size", "4",
			"--micro_batch", "2", "--loss", "goldfish", "--goldfish.h", "4", "--schedule.lr", "1e-3", "--eval_every", "2"}, extra...)
	}
	one := filepath.Join(runs, "cpu")
	if _, errs, code := memtrain(t, "", args(one)...); code != 0 {
		t.Fatal(errs)
	}
	want := metricsOf(t, one)
	for _, extra := range [][]string{
		{"--device", "cuda", "--parallel", "dp=2,x=2"},
		{"--device", "cuda:4", "--parallel", "y=2,z=2", "--overlap", "none"}, // GPUs 4 to 7
	} {
		out := filepath.Join(runs, strings.Join(extra, ""))
		errs, code, kernels := memtrainOnFake(t, args(out, extra...)...)
		if code != 0 || kernels == 0 {
			t.Fatalf("%v: exit %d, %d kernels on the fake GPUs: %s", extra, code, kernels, errs)
		}
		got := metricsOf(t, out)
		if len(got) != len(want) {
			t.Fatalf("%v: %d metrics lines, want %d", extra, len(got), len(want))
		}
		for _, k := range []string{"loss", "loss_all", "grad_norm", "eval_loss", "kept_tokens"} {
			if err := numtest.Close(metricsColumn(got, k), metricsColumn(want, k), numtest.Tol{Rel: 1e-5}); err != nil {
				t.Errorf("%v: %s per step against one CPU rank: %v", extra, k, err)
			}
		}
	}

	// LoRA on the fake GPUs, over data and Z ranks: the same metrics as
	// on one CPU rank, with a float32 base and with a bf16 base held in
	// bf16 (the GEMM widens it; data ranks alone: Z gathers f32 blocks).
	base16 := filepath.Join(dir, "base16")
	if _, errs, code := memtrain(t, "", append([]string{"init", "--out", base16, "--tokenizer", tok, "--seed", "3", "--dtype", "bf16"}, small...)...); code != 0 {
		t.Fatal(errs)
	}
	lora := []string{"--lora.rank", "4", "--lora.targets", "all-linear", "--lora.dropout", "0.1", "--schedule.lr", "1e-2"}
	for _, c := range []struct {
		base string
		grid []string
	}{{base, []string{"--parallel", "z=2"}}, {base16, []string{"--parallel", "dp=2"}}} {
		name := filepath.Base(c.base) + strings.Join(c.grid, "")
		cpuArgs := append(args(filepath.Join(runs, "lora-cpu-"+name), lora...), "--model", c.base)
		if _, errs, code := memtrain(t, "", cpuArgs...); code != 0 {
			t.Fatal(errs)
		}
		want := metricsOf(t, filepath.Join(runs, "lora-cpu-"+name))
		out := filepath.Join(runs, "lora-cuda-"+name)
		gpuArgs := append(append(args(out, lora...), "--model", c.base, "--device", "cuda"), c.grid...)
		errs, code, kernels := memtrainOnFake(t, gpuArgs...)
		if code != 0 || kernels == 0 {
			t.Fatalf("lora %s: exit %d, %d kernels: %s", name, code, kernels, errs)
		}
		got := metricsOf(t, out)
		if len(got) != len(want) {
			t.Fatalf("lora %s: %d metrics lines, want %d", name, len(got), len(want))
		}
		for _, k := range []string{"loss", "grad_norm", "eval_loss"} {
			if err := numtest.Close(metricsColumn(got, k), metricsColumn(want, k), numtest.Tol{Rel: 1e-5}); err != nil {
				t.Errorf("lora %s: %s per step against one CPU rank: %v", name, k, err)
			}
		}
		if _, err := os.Stat(filepath.Join(out, "final", "adapter_model.safetensors")); err != nil {
			t.Errorf("lora %s: %v", name, err)
		}
	}

	errs, code, _ := memtrainOnFake(t, args(filepath.Join(runs, "big"), "--device", "cuda:6", "--parallel", "dp=2,x=2")...)
	if wantErr := "memtrain: finetune: --parallel dp=2,x=2: 4 ranks, one a GPU (cuda:6 to cuda:9), but 8 CUDA device(s) found\n"; code != 1 || errs != wantErr {
		t.Errorf("a grid larger than the GPUs: exit %d, stderr %q; want 1, %q", code, errs, wantErr)
	}
}

// Without CUDA, a grid on GPUs fails in one line saying what was looked
// for, before anything is loaded.
func TestParallelCUDAWithoutGPU(t *testing.T) {
	if n, err := cuda.DeviceCount(""); err == nil {
		t.Skipf("%d CUDA device(s) here", n)
	}
	base, ds := finetuneFixture(t, "builtin:llama2")
	_, errs, code := memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", t.TempDir(), "--max_steps", "1",
		"--device", "cuda", "--parallel", "dp=2")
	if lines := strings.Split(strings.TrimSpace(errs), "\n"); code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], "memtrain: finetune: cuda: ") {
		t.Errorf("exit %d, stderr %q; want one line from the CUDA loader", code, errs)
	}
}
