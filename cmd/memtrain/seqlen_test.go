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
			return jsonSeqLen(t, "bench", "step", "--preset", "tiny", "--max-positions", "300", "--batch", "1", "--steps", "1", "--threads", "1")
		}, 300},
		{"data prepare, the tokenizer's model", func(t *testing.T) int { return prepared(t, short) }, 256},
		{"data prepare, a tokenizer without a model", func(t *testing.T) int { return prepared(t, "builtin:llama2") }, 2048},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.got(t); got != tc.want {
				t.Errorf("seq_len %d, want %d", got, tc.want)
			}
		})
	}

	// A length the model cannot take is refused by data prepare, naming
	// the model's limit and where it is set, and nothing is written; the
	// model's own length is taken.
	t.Run("data prepare, beyond the model", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "ds")
		_, errs, code := memtrain(t, "", "data", "prepare", "--input", corpus, "--tokenizer", short, "--out", out, "--seq-len", "512")
		want := "--seq-len 512: the model in " + short + " takes at most 256 positions (max_position_embeddings in " +
			filepath.Join(short, "config.json") + "); give --seq-len 256 or less"
		if code == 0 || !strings.Contains(errs, want) {
			t.Errorf("exit %d, stderr %q, want %q", code, errs, want)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("the refused prepare made %s: %v", out, err)
		}
		if _, errs, code := memtrain(t, "", "data", "prepare", "--input", corpus, "--tokenizer", short, "--out", out, "--seq-len", "256"); code != 0 {
			t.Errorf("the model's own length: %s", errs)
		}
		// A dataset prepared for another model: finetune refuses it
		// before it makes a run folder.
		long := filepath.Join(t.TempDir(), "long")
		if _, errs, code := memtrain(t, "", "data", "prepare", "--input", corpus, "--tokenizer", "builtin:llama2", "--out", long, "--seq-len", "512"); code != 0 {
			t.Fatal(errs)
		}
		run := filepath.Join(t.TempDir(), "run")
		_, errs, code = memtrain(t, "", "finetune", "--model", short, "--data", long, "--out", run, "--max-steps", "1", "--batch-size", "1", "--micro-batch", "1")
		if code == 0 || !strings.Contains(errs, "sequence length 512 exceeds the model's max_position_embeddings 256 (prepare the data with a sequence length of 256 or less)") {
			t.Errorf("finetune: exit %d, stderr %q", code, errs)
		}
		if _, err := os.Stat(run); !os.IsNotExist(err) {
			t.Errorf("the refused finetune made %s: %v", run, err)
		}
	})
}

// TestPreparePretokenizedBOS: ids prepared with --pretokenized are taken as
// given (HF tokenizers wrote their BOS), unless --bos asks for one, and a
// second BOS is warned about.
func TestPreparePretokenizedBOS(t *testing.T) {
	ids := writeFile(t, "ids.jsonl", `{"input_ids": [1, 450, 1473]}`+"\n"+`{"input_ids": [1, 450, 1474]}`+"\n")
	firstDoc := func(t *testing.T, out string) []int32 {
		t.Helper()
		s, err := data.OpenStore(out)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		doc, err := s.DocTokens(0)
		if err != nil {
			t.Fatal(err)
		}
		return doc
	}
	dir := t.TempDir()
	given := filepath.Join(dir, "given")
	_, errs, code := memtrain(t, "", "data", "prepare", "--input", ids, "--pretokenized", "--tokenizer", "builtin:llama2", "--out", given, "--mode", "document", "--seq-len", "8")
	if code != 0 {
		t.Fatal(errs)
	}
	if got := firstDoc(t, given); len(got) != 3 || got[0] != 1 || got[1] != 450 {
		t.Errorf("ids taken as given: first document %v, want [1 450 …]", got)
	}
	if strings.Contains(errs, "warning") {
		t.Errorf("warned without a second BOS: %s", errs)
	}
	asked := filepath.Join(dir, "asked")
	_, errs, code = memtrain(t, "", "data", "prepare", "--input", ids, "--pretokenized", "--bos", "--tokenizer", "builtin:llama2", "--out", asked, "--mode", "document", "--seq-len", "8")
	if code != 0 {
		t.Fatal(errs)
	}
	if got := firstDoc(t, asked); len(got) != 4 || got[0] != 1 || got[1] != 1 {
		t.Errorf("--bos: first document %v, want [1 1 450 …]", got)
	}
	if !strings.Contains(errs, "warning: data prepare: 2 of 2 pretokenized documents already start with BOS (id 1)") {
		t.Errorf("no warning of the second BOS: %s", errs)
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
