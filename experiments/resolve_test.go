package experiments

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/finetune"
)

// TestRunnerBaseFromRunFolder: a base `model:` may be a run folder or its
// checkpoints/latest file; the runner resolves it to the latest checkpoint
// and logs which, before its checks (here a strict one that stops the
// study before training).
func TestRunnerBaseFromRunFolder(t *testing.T) {
	cfg, files := tinyBaseConfig(t)
	run := filepath.Join(t.TempDir(), "run")
	ck := filepath.Join(run, finetune.CheckpointsDir, finetune.StepName(7))
	if err := checkpoints.Save(ck, cfg, checkpoints.RandomWeights(cfg, 1), checkpoints.SaveOptions{Files: files}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, finetune.CheckpointsDir, finetune.LatestFile), []byte(finetune.StepName(7)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The pretrained preset becomes the run folder's checkpoint; a protocol
	// too long for the targets stops the strict study before training.
	from := tinyStudy[strings.Index(tinyStudy, "base:\n"):strings.Index(tinyStudy, "targets:")]
	for _, model := range []string{run, filepath.Join(run, finetune.CheckpointsDir, finetune.LatestFile)} {
		t.Run(filepath.Base(model), func(t *testing.T) {
			spec := strings.Replace(tinyStudy, from, "base: {model: "+model+"}\n", 1)
			spec = strings.Replace(spec, "{name: custom, prefix: [8], suffix: 8}", "{name: custom, prefix: [30], suffix: 10}", 1)
			_, log, err := runStudy(t, spec, filepath.Join(t.TempDir(), "study"), true)
			if err == nil || !strings.Contains(err.Error(), "too short for custom(prefix 30, suffix 10)") {
				t.Fatalf("error %v, want the strict check's", err)
			}
			if want := "model: " + model + " → " + ck + "\n"; !strings.Contains(log, want) {
				t.Errorf("log %q lacks %q", log, want)
			}
		})
	}
}

// TestRunnerBaseFromHubCache: a base `model:` that names no path beside
// the spec but a Hugging Face model (NAMESPACE/NAME) is the model's
// snapshot in the local cache (huggingface_hub's layout), as for the
// commands' --model; a model not cached is an error saying so, before
// anything trains.
func TestRunnerBaseFromHubCache(t *testing.T) {
	cfg, files := tinyBaseConfig(t)
	cache := t.TempDir()
	t.Setenv("HF_HUB_CACHE", cache)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	repo := filepath.Join(cache, "models--acme--tiny")
	snapshot := filepath.Join(repo, "snapshots", commit)
	if err := checkpoints.Save(snapshot, cfg, checkpoints.RandomWeights(cfg, 1), checkpoints.SaveOptions{Files: files}); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(repo, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commit), 0o644); err != nil {
		t.Fatal(err)
	}
	from := tinyStudy[strings.Index(tinyStudy, "base:\n"):strings.Index(tinyStudy, "targets:")]
	spec := strings.Replace(tinyStudy, from, "base: {model: acme/tiny}\n", 1)
	spec = strings.Replace(spec, "{name: custom, prefix: [8], suffix: 8}", "{name: custom, prefix: [30], suffix: 10}", 1)
	_, log, err := runStudy(t, spec, filepath.Join(t.TempDir(), "study"), true)
	if err == nil || !strings.Contains(err.Error(), "too short for custom(prefix 30, suffix 10)") {
		t.Fatalf("error %v, want the strict check's", err)
	}
	if want := "model: acme/tiny → " + snapshot + "\n"; !strings.Contains(log, want) {
		t.Errorf("log %q lacks %q", log, want)
	}
	other := strings.Replace(tinyStudy, from, "base: {model: acme/other}\n", 1)
	if _, err := ParseSpec([]byte(other), ""); err == nil || !strings.Contains(err.Error(), "acme/other") || !strings.Contains(err.Error(), "not in the cache") {
		t.Errorf("a model not cached: %v", err)
	}
}

// tinyBaseConfig is tinyStudy's preset base as the runner shapes it, with
// the tokenizer files a checkpoint of it carries.
func tinyBaseConfig(t *testing.T) (*checkpoints.Config, map[string][]byte) {
	t.Helper()
	tok, files, err := data.OpenTokenizer("builtin:llama2")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseSpec([]byte(tinyStudy), "")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := (&Runner{Spec: s, tok: tok}).baseConfig(s.Base)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, files
}
