package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/finetune"
)

// runFolder makes a run folder whose latest checkpoint is a copy of the
// checkpoint base, and returns the run folder and that checkpoint.
func runFolder(t *testing.T, base string) (run, ck string) {
	t.Helper()
	run = filepath.Join(t.TempDir(), "run")
	ck = filepath.Join(run, finetune.CheckpointsDir, finetune.StepName(1280))
	if err := os.CopyFS(ck, os.DirFS(base)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, finetune.CheckpointsDir, finetune.LatestFile), []byte(finetune.StepName(1280)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return run, ck
}

// TestModelFromRunFolder: every command that takes a model takes a run
// folder (its latest checkpoint) or its checkpoints/latest file, and says on
// stderr which checkpoint it used; a folder of neither kind is one error
// naming it and the three accepted forms.
func TestModelFromRunFolder(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	run, ck := runFolder(t, base)
	latest := filepath.Join(run, finetune.CheckpointsDir, finetune.LatestFile)
	docs := writeFile(t, "docs.jsonl", `{"text":"It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife."}`+"\n")
	non := writeFile(t, "non.jsonl", `{"text":"However little known the feelings or views of such a man may be on his first entering a neighbourhood, this truth is so well fixed."}`+"\n")
	neither := t.TempDir()
	commands := []struct {
		name string
		args func(model string) []string
	}{
		{"eval loss", func(m string) []string { return []string{"eval", "loss", "--model", m, "--data", docs} }},
		{"generate", func(m string) []string {
			return []string{"generate", "--model", m, "--prompt-ids", "1,450,3186", "--max-new-tokens", "2"}
		}},
		{"eval memorization", func(m string) []string {
			return []string{"eval", "memorization", "--model", m, "--data", docs, "--non-members", non,
				"--protocol", "custom", "--prefix", "6", "--suffix", "4", "--out", filepath.Join(t.TempDir(), "e")}
		}},
		{"inspect", func(m string) []string { return []string{"inspect", m} }},
		{"finetune", func(m string) []string {
			return []string{"finetune", "--model", m, "--data", ds, "--out", filepath.Join(t.TempDir(), "ft"),
				"--max_steps", "1", "--batch_size", "2", "--micro_batch", "2"}
		}},
	}
	for _, c := range commands {
		for _, form := range []struct{ name, model string }{{"run folder", run}, {"latest file", latest}} {
			t.Run(c.name+"/"+form.name, func(t *testing.T) {
				_, errs, code := memtrain(t, "", c.args(form.model)...)
				if code != 0 {
					t.Fatalf("code %d: %s", code, errs)
				}
				if want := "memtrain: model: " + form.model + " → " + ck + "\n"; !strings.HasPrefix(errs, want) {
					t.Errorf("stderr %q, want it to start with %q", errs, want)
				}
			})
		}
		t.Run(c.name+"/checkpoint folder", func(t *testing.T) {
			_, errs, code := memtrain(t, "", c.args(ck)...)
			if code != 0 || strings.Contains(errs, "memtrain: model:") {
				t.Errorf("code %d, stderr %q (want no resolution line)", code, errs)
			}
		})
		// The whole line: the command's name, the model as given, what is
		// wrong, and no library package's prefix in between.
		t.Run(c.name+"/neither", func(t *testing.T) {
			_, errs, code := memtrain(t, "", c.args(neither)...)
			want := "memtrain: " + c.name + ": model " + neither + ": not a checkpoint folder (with config.json), a run folder (with checkpoints/latest) or a checkpoints/latest file\n"
			if code != 1 || errs != want {
				t.Errorf("code %d, stderr %q, want %q", code, errs, want)
			}
		})
		t.Run(c.name+"/missing", func(t *testing.T) {
			missing := filepath.Join(neither, "nosuch")
			_, errs, code := memtrain(t, "", c.args(missing)...)
			want := "memtrain: " + c.name + ": model " + missing + ": no such file or folder (want a checkpoint folder, a run folder or its checkpoints/latest file)\n"
			if code != 1 || errs != want {
				t.Errorf("code %d, stderr %q, want %q", code, errs, want)
			}
		})
	}
}
