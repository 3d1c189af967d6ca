//go:build unix

package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestNamedPipeInputs: every input file a command reads is refused, by
// name, when it is a named pipe (or another non-regular file), instead of
// blocking for ever on the open; the test fails rather than hangs.
func TestNamedPipeInputs(t *testing.T) {
	model := initSmall(t)
	fifoIn := func(t *testing.T, dir, name string) string {
		p := filepath.Join(dir, name)
		os.Remove(p)
		if err := syscall.Mkfifo(p, 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
		return p
	}
	// withShard is a copy of the model whose weights are a named pipe.
	withShard := func(t *testing.T, dir string) string {
		ck := filepath.Join(dir, "ck")
		os.MkdirAll(ck, 0o755)
		entries, _ := os.ReadDir(model)
		for _, e := range entries {
			b, _ := os.ReadFile(filepath.Join(model, e.Name()))
			os.WriteFile(filepath.Join(ck, e.Name()), b, 0o644)
		}
		fifoIn(t, ck, "model.safetensors")
		return ck
	}
	for _, tc := range []struct {
		name string
		args func(t *testing.T, dir string) (args []string, fifo string)
	}{
		{"finetune --config", func(t *testing.T, dir string) ([]string, string) {
			p := fifoIn(t, dir, "run.yaml")
			return []string{"finetune", "--config", p}, p
		}},
		{"tokenize --input", func(t *testing.T, dir string) ([]string, string) {
			p := fifoIn(t, dir, "in.jsonl")
			return []string{"tokenize", "--tokenizer", "builtin:llama2", "--input", p}, p
		}},
		{"tokenize --tokenizer", func(t *testing.T, dir string) ([]string, string) {
			p := fifoIn(t, dir, "tokenizer.json")
			return []string{"tokenize", "--tokenizer", p}, p
		}},
		{"goldfish --input", func(t *testing.T, dir string) ([]string, string) {
			p := fifoIn(t, dir, "in.jsonl")
			return []string{"goldfish", "--input", p}, p
		}},
		{"data prepare --input", func(t *testing.T, dir string) ([]string, string) {
			p := fifoIn(t, dir, "in.jsonl")
			return []string{"data", "prepare", "--input", p, "--tokenizer", "builtin:llama2", "--out", filepath.Join(dir, "ds")}, p
		}},
		{"data inspect", func(t *testing.T, dir string) ([]string, string) {
			ds := filepath.Join(dir, "ds")
			os.MkdirAll(ds, 0o755)
			p := fifoIn(t, ds, "manifest.json")
			return []string{"data", "inspect", ds}, p
		}},
		{"plan --device-json", func(t *testing.T, dir string) ([]string, string) {
			p := fifoIn(t, dir, "dev.json")
			return []string{"plan", "--model", "tiny", "--gpus", "1", "--device-json", p}, p
		}},
		{"experiment run", func(t *testing.T, dir string) ([]string, string) {
			p := fifoIn(t, dir, "spec.yaml")
			return []string{"experiment", "run", p, "--out", filepath.Join(dir, "out")}, p
		}},
		{"init --config", func(t *testing.T, dir string) ([]string, string) {
			p := fifoIn(t, dir, "config.json")
			return []string{"init", "--config", p, "--tokenizer", "builtin:llama2", "--out", filepath.Join(dir, "m")}, p
		}},
		{"inspect, a shard", func(t *testing.T, dir string) ([]string, string) {
			ck := withShard(t, dir)
			return []string{"inspect", ck}, filepath.Join(ck, "model.safetensors")
		}},
		{"eval loss --model, a shard", func(t *testing.T, dir string) ([]string, string) {
			ck := withShard(t, dir)
			return []string{"eval", "loss", "--model", ck, "--data", filepath.Join(dir, "d.jsonl")}, filepath.Join(ck, "model.safetensors")
		}},
		{"eval loss --data", func(t *testing.T, dir string) ([]string, string) {
			p := fifoIn(t, dir, "docs.jsonl")
			return []string{"eval", "loss", "--model", model, "--data", p}, p
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, fifo := tc.args(t, t.TempDir())
			done := make(chan struct{})
			go func() {
				defer close(done)
				wantError(t, args, fifo+": not a regular file (a named pipe)")
			}()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("%v: blocked on the named pipe %s", args, fifo)
			}
		})
	}
}
