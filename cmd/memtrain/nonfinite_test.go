package main

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
)

// TestNonFiniteModel: a checkpoint whose weights hold NaN is refused by
// generate and eval loss with one line naming it and saying that the
// model's outputs are not finite, where generate printed <unk> after
// <unk> and eval loss a NaN loss, both with exit code 0.
func TestNonFiniteModel(t *testing.T) {
	good := initSmall(t)
	ck, err := checkpoints.Open(good)
	if err != nil {
		t.Fatal(err)
	}
	cfg := ck.Config
	ck.Close()
	weights := checkpoints.RandomWeights(cfg, 7)
	for i := range weights {
		if weights[i].Name == "model.norm.weight" {
			weights[i].Data[0] = float32(math.NaN())
		}
	}
	_, files, err := data.OpenTokenizer("builtin:llama2")
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "nan")
	if err := checkpoints.Save(bad, cfg, weights, checkpoints.SaveOptions{Files: files}); err != nil {
		t.Fatal(err)
	}
	docs := filepath.Join(t.TempDir(), "docs.jsonl")
	os.WriteFile(docs, []byte(`{"text": "It is a truth universally acknowledged."}`+"\n"), 0o644)
	for _, args := range [][]string{
		{"generate", "--model", bad, "--prompt", "It is a truth", "--max-new-tokens", "4"},
		{"generate", "--model", bad, "--prompt-ids", "1", "--max-new-tokens", "1", "--json"},
		{"eval", "loss", "--model", bad, "--data", docs},
	} {
		t.Run(caseName(args), func(t *testing.T) {
			wantError(t, args, bad+": the model's outputs are not finite")
		})
	}
	// The same commands on the good checkpoint succeed.
	for _, args := range [][]string{
		{"generate", "--model", good, "--prompt", "It is a truth", "--max-new-tokens", "4"},
		{"eval", "loss", "--model", good, "--data", docs},
	} {
		if out, errs, code := memtrain(t, "", args...); code != 0 || strings.Contains(out, "NaN") {
			t.Errorf("%v: exit code %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}
