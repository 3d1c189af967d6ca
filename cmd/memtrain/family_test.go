package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/experiments"
)

// familyPresets are the tiny presets of the families beside Llama's:
// Mistral with a sliding window of 16 keys (shorter than the 32-token
// sequences below), Qwen2 with its q/k/v biases, Qwen3 with its head
// norms.
var familyPresets = []string{"tiny-mistral", "tiny-qwen2", "tiny-qwen3"}

// TestFamiliesFromTheCLI: a model of each family is made, fine-tuned
// (in full and with LoRA, bf16 on a grid), decoded, evaluated for
// memorization, merged and exported from the CLI, and the exported
// checkpoint is of its family: config.json in its class's layout, its
// variations' tensors under HF's names.
func TestFamiliesFromTheCLI(t *testing.T) {
	_, ds := finetuneFixture(t, "builtin:llama2")
	for _, preset := range familyPresets {
		t.Run(preset, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "base")
			run := func(args ...string) string {
				t.Helper()
				out, errs, code := memtrain(t, "", args...)
				if code != 0 {
					t.Fatalf("memtrain %s: exit %d: %s", strings.Join(args, " "), code, errs)
				}
				return out
			}
			run("init", "--out", base, "--tokenizer", "builtin:llama2", "--preset", preset, "--hidden", "32", "--layers", "2",
				"--heads", "4", "--kv-heads", "2", "--intermediate", "64", "--seed", "3")
			full, lora := filepath.Join(dir, "full"), filepath.Join(dir, "lora")
			run("finetune", "--model", base, "--data", ds, "--out", full, "--max-steps", "2", "--batch-size", "4", "--micro-batch", "2",
				"--parallel", "x=2,y=2", "--precision", "bf16", "--loss", "goldfish", "--goldfish.k", "4")
			run("finetune", "--model", base, "--data", ds, "--out", lora, "--max-steps", "2", "--batch-size", "2", "--micro-batch", "2",
				"--lora.rank", "4", "--schedule.lr", "1e-2")
			if out := run("generate", "--model", full, "--prompt-ids", "1,2,3", "--max-new-tokens", "4"); strings.TrimSpace(out) == "" {
				t.Errorf("generate printed nothing")
			}
			run("eval", "memorization", "--model", lora, "--data", ds, "--protocol", "pythia", "--prefix", "8", "--suffix", "8",
				"--limit", "2", "--out", filepath.Join(dir, "eval"))
			merged, exported := filepath.Join(dir, "merged"), filepath.Join(dir, "exported")
			run("merge", "--model", lora, "--out", merged)
			run("export", full, "--out", exported)
			want, err := checkpoints.LookupPreset(preset)
			if err != nil {
				t.Fatal(err)
			}
			for _, out := range []string{merged, exported} {
				checkFamilyCheckpoint(t, out, want.Config().Family())
			}
		})
	}
}

// checkFamilyCheckpoint checks that the HF checkpoint in dir is of family
// f: config.json's model_type and architecture, and every tensor the
// family declares, under its HF name.
func checkFamilyCheckpoint(t *testing.T, dir string, f *checkpoints.Family) {
	t.Helper()
	ck, err := checkpoints.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if got := ck.Config.Family(); got != f {
		t.Errorf("%s: family %s, want %s", dir, got.ModelType, f.ModelType)
	}
	for _, s := range ck.Config.TensorSpecs() {
		if _, err := ck.Weights.ReadFloat32(s.Name); err != nil {
			t.Errorf("%s: %v", dir, err)
		}
	}
	raw, err := os.ReadFile(filepath.Join(dir, checkpoints.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]any
	if err := json.Unmarshal(raw, &keys); err != nil {
		t.Fatal(err)
	}
	if keys["model_type"] != f.ModelType || fmt.Sprint(keys["architectures"]) != "["+f.Architecture+"]" {
		t.Errorf("%s: config.json has model_type %v, architectures %v", dir, keys["model_type"], keys["architectures"])
	}
}

// TestFamilyExperiments: a memorization study runs end to end on a base
// of each family, pretrained, trained with and without goldfish and
// evaluated.
func TestFamilyExperiments(t *testing.T) {
	t.Setenv(experiments.CacheEnv, t.TempDir())
	for _, preset := range familyPresets {
		t.Run(preset, func(t *testing.T) {
			dir := t.TempDir()
			spec := filepath.Join(dir, "study.yaml")
			study := strings.Replace(consoleStudy, "preset: tiny\n", "preset: "+preset+"\n", 1)
			if err := os.WriteFile(spec, []byte(study), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, "out")
			if _, errs, code := memtrain(t, "", "experiment", "run", spec, "--out", out); code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if _, err := os.Stat(filepath.Join(out, "report.md")); err != nil {
				t.Error(err)
			}
		})
	}
}
