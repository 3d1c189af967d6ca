package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/cuda/cudatest"
	"github.com/memtrain/memtrain/engine/launch"
)

// oversizedConfig writes a folder holding a Llama 3.1 8B config.json with
// one field set to an absurd size, beside a safetensors file of no
// tensors: a checkpoint that opens as far as comparing its tensors with
// those the config implies.
func oversizedConfig(t *testing.T, key string, value int64) string {
	t.Helper()
	p, err := checkpoints.LookupPreset("llama3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p.Config())
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = value
	if b, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "huge")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoints.ConfigFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := append(binary.LittleEndian.AppendUint64(nil, 8), "{}      "...)
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), empty, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPreflightOversizedUnderUlimit: configs and shape flags far beyond any model
// are refused in one line naming the file or flag, the field and the
// limit, before anything is sized from them — run as the built binary
// under a 4 GB address-space limit, where sizing one would die with a
// runtime fatal error or a makeslice panic.
func TestPreflightOversizedUnderUlimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("ulimit -v is the Linux shell's")
	}
	if testing.Short() {
		t.Skip("builds the memtrain binary")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build memtrain with")
	}
	bin := filepath.Join(t.TempDir(), "memtrain")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	layers := oversizedConfig(t, "num_hidden_layers", 1_000_000_000)
	hidden := oversizedConfig(t, "hidden_size", 1_000_000_000_000)
	layersFile, hiddenFile := filepath.Join(layers, "config.json"), filepath.Join(hidden, "config.json")
	out := filepath.Join(t.TempDir(), "out")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"inspect", []string{"inspect", layers},
			"memtrain: checkpoints: " + layersFile + `: field "num_hidden_layers": want at most 1024 (Llama 3.1 405B has 126), got 1000000000`},
		{"inspect hidden", []string{"inspect", hidden},
			"memtrain: checkpoints: " + hiddenFile + `: field "hidden_size": want at most 131072 (Llama 3.1 405B has 16384), got 1000000000000`},
		{"init --config", []string{"init", "--out", out, "--tokenizer", "builtin:llama2", "--config", layers},
			"memtrain: checkpoints: " + layersFile + `: field "num_hidden_layers": want at most 1024`},
		{"init --hidden", []string{"init", "--out", out, "--tokenizer", "builtin:llama2", "--hidden", "1000000000000"},
			"memtrain: init: --hidden 1000000000000: want at most 131072 (Llama 3.1 405B has 16384) (hidden_size)"},
		{"init --layers", []string{"init", "--out", out, "--tokenizer", "builtin:llama2", "--layers", "1000000000"},
			"memtrain: init: --layers 1000000000: want at most 1024 (Llama 3.1 405B has 126) (num_hidden_layers)"},
		{"init --intermediate", []string{"init", "--out", out, "--tokenizer", "builtin:llama2", "--intermediate", "1000000000000"},
			"memtrain: init: --intermediate 1000000000000: want at most 524288"},
		{"plan", []string{"plan", "--model", layers, "--gpus", "8"},
			"memtrain: plan: --model: checkpoints: " + layersFile + `: field "num_hidden_layers": want at most 1024`},
		{"plan --gpus", []string{"plan", "--model", "llama3.1-8b", "--gpus", "1000000000000"},
			"memtrain: plan: --gpus 1000000000000: want 1 to 1048576"},
		{"inspect --seq-len", []string{"inspect", "--preset", "llama3.1-405b", "--seq-len", "1000000000000"},
			"memtrain: inspect: --seq-len 1000000000000: want 1 to 16777216 (0: the default)"},
		{"inspect --seq-len beyond the model", []string{"inspect", "--preset", "llama3.1-405b", "--seq-len", "1000000"},
			"memtrain: inspect: preset llama3.1-405b: --seq-len 1000000 exceeds the model's max_position_embeddings 131072"},
		{"inspect --batch", []string{"inspect", "--preset", "llama3.1-405b", "--batch", "1000000000000"},
			"memtrain: inspect: --batch 1000000000000: want 1 to 1048576"},
	}
	for _, tt := range tests {
		cmd := exec.Command(bash, append([]string{"-c", `ulimit -v 4000000; exec "$0" "$@"`, bin}, tt.args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		errs := stderr.String()
		if code != 1 || strings.Count(errs, "\n") != 1 || !strings.HasPrefix(errs, tt.want) ||
			strings.Contains(errs, "fatal error") || strings.Contains(errs, "panic") {
			t.Errorf("%s: exit %d, stderr %q; want 1 and one line starting %q", tt.name, code, errs, tt.want)
		}
	}
}

// sparseCheckpoint writes a checkpoint of cfg whose model.safetensors is
// a sparse file: a valid header over BF16 tensors of every shape the
// config implies, and a hole where their bytes would be. It holds no
// tokenizer.
func sparseCheckpoint(t *testing.T, cfg *checkpoints.Config) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "sparse")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var off int64
	for _, s := range cfg.TensorSpecs() {
		n := 2 * s.Elements()
		header[s.Name] = map[string]any{"dtype": "BF16", "shape": s.Shape, "data_offsets": []int64{off, off + n}}
		off += n
	}
	h, err := json.Marshal(header)
	if err != nil {
		t.Fatal(err)
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	f, err := os.Create(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...)); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(8 + int64(len(h)) + off); err != nil {
		t.Skip("cannot make a large sparse file:", err)
	}
	c, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, checkpoints.ConfigFile), c, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPreflightRefusesBeforeAllocating: fine-tuning (and scoring and generating
// with) a Llama 3.1 8B checkpoint on a machine of 24 GiB is refused
// before the model loads, in one line saying what it needs, what is free
// and what would fit — in well under a second, allocating next to
// nothing, where loading it would take 64 GB.
func TestPreflightRefusesBeforeAllocating(t *testing.T) {
	p, err := checkpoints.LookupPreset("llama3.1-8b")
	if err != nil {
		t.Fatal(err)
	}
	model := sparseCheckpoint(t, p.Config())
	ck, err := checkpoints.Open(model) // a valid checkpoint: the refusal is the memory's
	if err != nil {
		t.Fatal(err)
	}
	ck.Close()
	_, ds := finetuneFixture(t, "builtin:llama2")
	docs := writeFile(t, "docs.jsonl", `{"input_ids": [1, 2, 3, 4]}`+"\n")
	t.Setenv(launch.MemoryLimitEnv, "24GiB")
	tests := []struct {
		name string
		args []string
		want []string // in order
	}{
		{"finetune", []string{"finetune", "--model", model, "--data", ds, "--out", t.TempDir(), "--max-steps", "1", "--batch-size", "4", "--micro-batch", "2"},
			[]string{"memtrain: finetune: " + model + ": not enough memory on host: training 8.03B parameters on 2 sequences of 32 tokens a pass needs 1", " GiB, but 24.0 GiB is free (MEMTRAIN_MEMORY_LIMIT); would fit: a grid of 8 ranks, each on a GPU or machine of its own, e.g. dp=1,"}},
		{"eval loss", []string{"eval", "loss", "--model", model, "--data", docs},
			[]string{"memtrain: eval loss: " + model + ": not enough memory on host: scoring 8 sequences of 2048 tokens a pass with 8.03B parameters needs ", ", but 24.0 GiB is free (MEMTRAIN_MEMORY_LIMIT); would fit: a grid of "}},
		{"generate", []string{"generate", "--model", model, "--prompt-ids", "1,2,3"},
			// The decoding's KV cache is counted with the weights.
			[]string{"memtrain: generate: " + model + ": not enough memory on host: decoding 32 new tokens after 1 prompt of 3 tokens with 8.03B parameters needs 59.8 GiB, but 24.0 GiB is free (MEMTRAIN_MEMORY_LIMIT); would fit: a grid of 4 ranks"}},
		{"eval memorization", []string{"eval", "memorization", "--model", model, "--data", ds, "--out", t.TempDir()},
			[]string{"memtrain: eval memorization: " + model + ": not enough memory on host: holding 8.03B parameters needs 59.8 GiB"}},
	}
	for _, tt := range tests {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		_, errs, code := memtrain(t, "", tt.args...)
		took := time.Since(start)
		runtime.ReadMemStats(&after)
		if code != 1 || strings.Count(errs, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want 1 and one line", tt.name, code, errs)
			continue
		}
		at := 0
		for _, s := range tt.want {
			i := strings.Index(errs[at:], s)
			if i < 0 {
				t.Errorf("%s: %q lacks %q after byte %d", tt.name, errs, s, at)
				break
			}
			at += i + len(s)
		}
		if allocated := after.TotalAlloc - before.TotalAlloc; took > time.Second || allocated > 64<<20 {
			t.Errorf("%s: refused after %v and %d bytes allocated; want well under a second and next to nothing", tt.name, took, allocated)
		}
	}
}

// TestPreflightOnAFullGPU: on GPUs the check reads each rank's
// free device memory (cuMemGetInfo; here the fake GPUs', set by
// MEMTRAIN_FAKECUDA_FREE).
func TestPreflightOnAFullGPU(t *testing.T) {
	cudatest.LibDir(t)
	base, ds := finetuneFixture(t, "builtin:llama2")
	for _, extra := range [][]string{{"--device", "cuda:3"}, {"--device", "cuda", "--parallel", "dp=2"}} {
		cmd := exec.Command(os.Args[0], append([]string{"finetune", "--model", base, "--data", ds, "--out", t.TempDir(), "--max-steps", "1"}, extra...)...)
		cmd.Env = cudatest.Env(t, "MEMTRAIN_TEST_AS_CLI=1", "MEMTRAIN_FAKECUDA_FREE=100000")
		out, err := cmd.CombinedOutput()
		ee, ok := err.(*exec.ExitError)
		want := fmt.Sprintf("memtrain: finetune: %s: not enough memory on %s: training ", base, map[bool]string{true: "cuda:3", false: "cuda:0"}[extra[1] == "cuda:3"])
		if !ok || ee.ExitCode() != 1 || !strings.HasPrefix(string(out), want) || !strings.Contains(string(out), "but 97.7 KiB is free (cuMemGetInfo)") ||
			strings.Count(string(out), "\n") != 1 {
			t.Errorf("%v: %v, output %q; want one line starting %q", extra, err, out, want)
		}
	}
}
