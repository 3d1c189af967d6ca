package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/finetune/job"
	"github.com/memtrain/memtrain/internal/numtest"
	"github.com/memtrain/memtrain/memorization"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEvalLoss(t *testing.T) {
	dir := initSmall(t)
	data := writeFile(t, "docs.jsonl", `{"text":"It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife."}
{"input_ids":[1,306,626,263,1243,4086,310,278,3186,29889]}
{"input_ids":[5]}
`)
	var reports []finetune.LossReport
	for _, args := range [][]string{
		{"--batch", "8"},
		{"--batch", "1"},                   // batching changes nothing
		{"--batch", "3", "--seq-len", "4"}, // windows of 4: the same tokens scored, with less context
	} {
		out, errs, code := memtrain(t, "", append([]string{"eval", "loss", "--model", dir, "--data", data, "--json"}, args...)...)
		if code != 0 {
			t.Fatal(errs)
		}
		var rep finetune.LossReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatal(err)
		}
		reports = append(reports, rep)
	}
	r := reports[0]
	if r.Documents != 2 || r.Skipped != 1 || len(r.PerDoc) != 2 || r.PerDoc[1].Tokens != 9 || r.PerDoc[1].Line != 2 {
		t.Fatalf("report %+v", r)
	}
	// A freshly initialised model is close to uniform over 32000 tokens.
	if err := numtest.Scalar(r.Loss, math.Log(32000), numtest.Tol{Abs: 0.05}); err != nil {
		t.Errorf("loss against ln 32000: %v", err)
	}
	if err := numtest.Scalar(r.Perplexity, math.Exp(r.Loss), numtest.Tol{Rel: 1e-9}); err != nil {
		t.Errorf("perplexity against exp(loss %v): %v", r.Loss, err)
	}
	if b := reports[1]; b.Tokens != r.Tokens {
		t.Errorf("batch 1 scores %d tokens, batch 8 %d", b.Tokens, r.Tokens)
	} else if err := numtest.Scalar(b.Loss, r.Loss, numtest.Tol{Abs: 1e-5}); err != nil {
		t.Errorf("batch 1's loss against batch 8's: %v", err)
	}
	if w := reports[2]; w.Tokens != r.Tokens || w.PerDoc[1].Tokens != 9 || w.Loss == r.Loss {
		t.Errorf("windowed evaluation %+v (whole: %+v)", w, r)
	}
	out, _, code := memtrain(t, "", "eval", "loss", "--model", dir, "--data", data)
	if code != 0 || !strings.HasPrefix(out, "loss ") || !strings.Contains(out, "perplexity") {
		t.Errorf("text output %q", out)
	}
}

func TestEvalLossErrors(t *testing.T) {
	dir := initSmall(t)
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"empty data", []string{"--data", writeFile(t, "empty.jsonl", "\n")}, []string{"empty.jsonl", "no documents"}},
		{"id outside vocab", []string{"--data", writeFile(t, "big.jsonl", `{"input_ids":[1,32000]}`+"\n")}, []string{"big.jsonl:1", "32000"}},
		{"bad line", []string{"--data", writeFile(t, "bad.jsonl", `{"text":"a"}`+"\n"+`{"input_ids":"x"}`+"\n")}, []string{"bad.jsonl:2"}},
		{"neither field", []string{"--data", writeFile(t, "other.jsonl", `{"body":"a"}`+"\n")}, []string{"other.jsonl:1", "input_ids"}},
		{"too long", []string{"--data", writeFile(t, "ok.jsonl", `{"input_ids":[1,2,3]}`+"\n"), "--seq-len", "5000"}, []string{"max_position_embeddings"}},
		{"missing file", []string{"--data", filepath.Join(t.TempDir(), "none.jsonl")}, []string{"none.jsonl"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs, code := memtrain(t, "", append([]string{"eval", "loss", "--model", dir}, tt.args...)...)
			if code != 1 || strings.Count(errs, "\n") != 1 {
				t.Fatalf("code %d stderr %q", code, errs)
			}
			for _, w := range tt.want {
				if !strings.Contains(errs, w) {
					t.Errorf("stderr %q does not mention %q", errs, w)
				}
			}
		})
	}
}

func TestGenerate(t *testing.T) {
	dir := initSmall(t)
	out, errs, code := memtrain(t, "", "generate", "--model", dir, "--prompt-ids", "1,450,3186", "--prompt", "Emma Woodhouse, handsome",
		"--max-new-tokens", "6", "--stop-at-eos=false", "--json")
	if code != 0 {
		t.Fatal(errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", out)
	}
	var again []job.Generation
	for _, line := range lines {
		var g job.Generation
		if err := json.Unmarshal([]byte(line), &g); err != nil {
			t.Fatal(err)
		}
		if len(g.IDs) != 6 || g.PromptIDs[0] != 1 {
			t.Errorf("generation %+v", g)
		}
		again = append(again, g)
	}
	// Greedy decoding is deterministic, and a prompt alone gives what it
	// gave in the batch.
	out, _, _ = memtrain(t, "", "generate", "--model", dir, "--prompt-ids", "1,450,3186", "--max-new-tokens", "6", "--stop-at-eos=false", "--json")
	var solo job.Generation
	json.Unmarshal([]byte(out), &solo)
	if !slices.Equal(solo.IDs, again[0].IDs) {
		t.Errorf("batched %v, alone %v", again[0].IDs, solo.IDs)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--prompt-ids", "1,32000"}, "outside the vocabulary"},
		{[]string{"--prompt-ids", "1,x"}, `--prompt-ids: "x": want an integer in [0, 2147483647]`},
		{[]string{"--prompt-ids", "1", "--max-new-tokens", "5000"}, "max_position_embeddings"},
		{nil, "--prompt"},
	} {
		_, errs, code := memtrain(t, "", append([]string{"generate", "--model", dir}, bad.args...)...)
		if code != 1 || !strings.Contains(errs, bad.want) {
			t.Errorf("%v: code %d, %q", bad.args, code, errs)
		}
	}
}

func TestBenchStep(t *testing.T) {
	out, errs, code := memtrain(t, "", "bench", "step", "--preset", "tiny", "--batch", "1", "--seq-len", "16", "--steps", "1")
	if code != 0 {
		t.Fatal(errs)
	}
	var r benchStepResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !(r.TokensPerS > 0) || !(r.ModelFLOPsPerToken > 0) || !(r.GEMMGFLOPs > 0) || !(r.Efficiency > 0) || r.EngineBytes <= 16*r.Params {
		t.Errorf("result %+v", r)
	}
	// 6N + 12·L·heads·D·T for tiny (tied, so N is every parameter).
	want := 6*float64(r.Params) + 12*4*4*32*16
	if r.ModelFLOPsPerToken != want {
		t.Errorf("flops/token %v, want %v", r.ModelFLOPsPerToken, want)
	}
	if r.MaxPositions != 2048 {
		t.Errorf("max_position_embeddings %d, want tiny's 2048", r.MaxPositions)
	}
}

// TestBenchStepMaxPositions: --max-positions sets the preset's
// max_position_embeddings, and the result says which it used. Raising it
// is checked without running the long step: the sequence length is
// accepted and reaches the memory preflight, which sizes a 4096-token
// step (tiny's own limit is 2048) and refuses it under a tiny limit.
func TestBenchStepMaxPositions(t *testing.T) {
	out, errs, code := memtrain(t, "", "bench", "step", "--preset", "tiny", "--batch", "1", "--seq-len", "16",
		"--max-positions", "64", "--steps", "1")
	if code != 0 {
		t.Fatal(errs)
	}
	var r benchStepResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.MaxPositions != 64 || r.SeqLen != 16 || !(r.TokensPerS > 0) {
		t.Errorf("result %+v", r)
	}

	t.Setenv(launch.MemoryLimitEnv, "1MiB")
	_, errs, code = memtrain(t, "", "bench", "step", "--preset", "tiny", "--batch", "1", "--seq-len", "4096",
		"--max-positions", "8192", "--steps", "1")
	if want := "bench step: tiny: not enough memory on host: training "; code == 0 || !strings.Contains(errs, want) ||
		!strings.Contains(errs, " of 4096 tokens a pass needs ") {
		t.Errorf("exit %d, stderr %q: want the preflight's refusal of a 4096-token step", code, errs)
	}
}

func TestBenchDecode(t *testing.T) {
	out, errs, code := memtrain(t, "", "bench", "decode", "--preset", "tiny", "--batch", "2", "--prompt-len", "3", "--new-tokens", "4", "--repeat", "1")
	if code != 0 {
		t.Fatal(errs)
	}
	var r benchDecodeResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !(r.TokensPerS > 0) || r.Batch != 2 || r.NewTokens != 4 {
		t.Errorf("result %+v", r)
	}
}

// TestEvalLossDataset: eval loss scores a prepared dataset's holdout split by
// default (--split for the others), in the dataset's own sequences; files
// are windowed at min(2048, max_position_embeddings) unless --seq-len says
// otherwise.
func TestEvalLossDataset(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	s, err := data.OpenStore(ds)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, split := range []string{"train", "holdout", "both"} {
		docs, err := memorization.StoreDocuments(s, split)
		if err != nil {
			t.Fatal(err)
		}
		count[split] = len(docs)
	}
	s.Close()
	if count["holdout"] == 0 || count["train"] == 0 {
		t.Fatalf("fixture splits %v", count)
	}
	file := writeFile(t, "docs.jsonl", `{"input_ids":[1,306,626,263,1243,4086,310,278,3186,29889]}`+"\n")
	for _, tc := range []struct {
		name         string
		args         []string
		split        string
		docs, seqLen int
	}{
		{"dataset: holdout by default", []string{"--data", ds}, "holdout", count["holdout"], 32},
		{"dataset: train", []string{"--data", ds, "--split", "train"}, "train", count["train"], 32},
		{"dataset: both", []string{"--data", ds, "--split", "both"}, "both", count["both"], 32},
		{"file: the model's context, capped at 2048", []string{"--data", file}, "", 1, 2048},
		{"file: --seq-len", []string{"--data", file, "--seq-len", "4"}, "", 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, code := memtrain(t, "", append([]string{"eval", "loss", "--model", base, "--json"}, tc.args...)...)
			if code != 0 {
				t.Fatal(errs)
			}
			var rep finetune.LossReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Split != tc.split || rep.Documents+rep.Skipped != tc.docs || rep.SeqLen != tc.seqLen || !(rep.Loss > 0) {
				t.Errorf("split %q, %d+%d documents, seq_len %d, loss %v; want %q, %d, %d", rep.Split, rep.Documents, rep.Skipped, rep.SeqLen, rep.Loss, tc.split, tc.docs, tc.seqLen)
			}
		})
	}

	_, ds3 := finetuneFixture(t, "builtin:llama3")
	long := filepath.Join(t.TempDir(), "long")
	if _, errs, code := memtrain(t, "", "data", "prepare", "--input", filepath.Join(filepath.Dir(ds), "austen.jsonl"),
		"--tokenizer", "builtin:llama2", "--out", long, "--seq-len", "4096", "--mode", "document"); code != 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"another tokenizer", []string{"--data", ds3}, "another tokenizer"},
		{"a dataset longer than the model", []string{"--data", long}, long + "'s seq_len 4096 exceeds the model's max_position_embeddings 2048"},
		{"a split of a file", []string{"--data", file, "--split", "train"}, "split train goes with a dataset folder"},
		{"an unknown split", []string{"--data", ds, "--split", "test"}, `split "test": want train, holdout or both`},
		{"a window for a dataset", []string{"--data", ds, "--seq-len", "8"}, "a sequence length goes with a file: " + ds + " is scored in its own sequences"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errs, code := memtrain(t, "", append([]string{"eval", "loss", "--model", base}, tc.args...)...)
			if code != 1 || !strings.Contains(errs, tc.want) || strings.Count(errs, "\n") != 1 {
				t.Errorf("code %d, stderr %q, want one line with %q", code, errs, tc.want)
			}
		})
	}
}

// TestEvalLossIsTheRunsHeldOutLoss: eval loss of a dataset's holdout split
// at a run's checkpoint is the eval_loss the run logged at that step (one
// evaluator, finetune.Sequences), though the batches differ.
func TestEvalLossIsTheRunsHeldOutLoss(t *testing.T) {
	base, ds := finetuneFixture(t, "builtin:llama2")
	run := filepath.Join(t.TempDir(), "run")
	if _, errs, code := memtrain(t, "", "finetune", "--model", base, "--data", ds, "--out", run, "--max-steps", "3", "--batch-size", "4",
		"--micro-batch", "2", "--schedule.lr", "1e-3", "--eval-every", "3"); code != 0 {
		t.Fatal(errs)
	}
	ms := metricsOf(t, run)
	logged, _ := ms[len(ms)-1]["eval_loss"].(float64)
	out, errs, code := memtrain(t, "", "eval", "loss", "--model", run, "--data", ds, "--batch", "3", "--json")
	if code != 0 {
		t.Fatal(errs)
	}
	var rep finetune.LossReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if !(logged > 0) {
		t.Fatalf("the run's held-out loss at its last step: %v", ms[len(ms)-1]["eval_loss"])
	}
	if err := numtest.Scalar(rep.Loss, logged, numtest.Tol{Rel: 1e-5}); err != nil {
		t.Errorf("eval loss against the run's held-out loss at its last step: %v", err)
	}
}
