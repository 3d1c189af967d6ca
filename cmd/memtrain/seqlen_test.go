package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data"
)

// TestDefaultSeqLen: every command that needs a sequence length and is not
// given one takes memtrain's one rule (checkpoints.Config.DefaultSeqLen):
// the model's max_position_embeddings capped at 2048 — for plan, inspect and
// bench step as for eval loss (TestEvalLossDataset), and for data prepare
// the model whose folder holds the tokenizer, else the cap.
func TestDefaultSeqLen(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short") // a model with a 256-token context
	if _, errs, code := memtrain(t, "", "init", "--out", short, "--tokenizer", "builtin:llama2", "--hidden", "32", "--layers", "1",
		"--heads", "2", "--kv-heads", "2", "--intermediate", "64"); code != 0 {
		t.Fatal(errs)
	}
	setMaxPositions(t, short, 256)
	corpus := writeFile(t, "docs.jsonl", strings.Repeat(`{"text":"It is a truth universally acknowledged."}`+"\n", 4))

	jsonSeqLen := func(t *testing.T, args ...string) int {
		t.Helper()
		out, errs, code := memtrain(t, "", args...)
		if code != 0 {
			t.Fatalf("%v: %s", args, errs)
		}
		// bench step prints progress lines before its JSON line; plan
		// and inspect print one JSON document (inspect's length is its
		// training estimate's).
		if args[0] == "bench" {
			out = out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]
		}
		var r struct {
			SeqLen   int `json:"seq_len"`
			Training struct {
				SeqLen int `json:"seq_len"`
			} `json:"training_memory"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
		return r.SeqLen + r.Training.SeqLen
	}
	prepared := func(t *testing.T, tokenizer string) int {
		t.Helper()
		out := filepath.Join(t.TempDir(), "ds")
		if _, errs, code := memtrain(t, "", "data", "prepare", "--input", corpus, "--tokenizer", tokenizer, "--out", out); code != 0 {
			t.Fatal(errs)
		}
		s, err := data.OpenStore(out)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		return s.Manifest().Settings.SeqLen
	}
	for _, tc := range []struct {
		name string
		got  func(t *testing.T) int
		want int
	}{
		{"plan, a long-context preset", func(t *testing.T) int {
			return jsonSeqLen(t, "plan", "--model", "llama3.1-8b", "--gpus", "8", "--json")
		}, 2048},
		{"plan, a short model", func(t *testing.T) int {
			return jsonSeqLen(t, "plan", "--model", short, "--gpus", "1", "--json")
		}, 256},
		{"inspect, a short model", func(t *testing.T) int {
			return jsonSeqLen(t, "inspect", short, "--json")
		}, 256},
		{"bench step", func(t *testing.T) int {
			return jsonSeqLen(t, "bench", "step", "--preset", "tiny", "--batch", "1", "--steps", "1", "--threads", "1")
		}, 2048},
		{"data prepare, the tokenizer's model", func(t *testing.T) int { return prepared(t, short) }, 256},
		{"data prepare, a tokenizer without a model", func(t *testing.T) int { return prepared(t, "builtin:llama2") }, 2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.got(t); got != tc.want {
				t.Errorf("seq_len %d, want %d", got, tc.want)
			}
		})
	}
}

// setMaxPositions rewrites a checkpoint's max_position_embeddings.
func setMaxPositions(t *testing.T, dir string, n int) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["max_position_embeddings"] = n
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
