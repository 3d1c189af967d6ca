package experiments

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine/launch"
)

// writeCorpus writes a JSONL file of n documents of made-up sentences.
func writeCorpus(t *testing.T, path string, n int, seed uint64) {
	t.Helper()
	words := strings.Fields("river stone garden window lantern mountain copper violet harbor meadow signal winter orchard candle silver thunder planet marble forest ember quiet golden hollow distant bright gentle swift narrow ancient")
	rng := rand.New(rand.NewPCG(seed, 1))
	var b strings.Builder
	enc := json.NewEncoder(&b)
	for i := 0; i < n; i++ {
		var doc []string
		for s := 0; s < 6; s++ {
			var sent []string
			for w := 0; w < 5+rng.IntN(4); w++ {
				sent = append(sent, words[rng.IntN(len(words))])
			}
			doc = append(doc, strings.Join(sent, " ")+".")
		}
		enc.Encode(map[string]string{"text": fmt.Sprintf("Note %d: %s", i, strings.Join(doc, " "))})
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// userStudy uses no built-in corpus: targets, filler and pretraining all
// come from the user's files, relative to the spec's folder.
const userStudy = `
name: user study
tokenizer: builtin:llama2
base:
  preset: tiny
  hidden: 16
  layers: 1
  heads: 2
  kv_heads: 2
  intermediate: 32
  max_positions: 128
  seed: 2
  pretrain:
    data: [pre.jsonl]
    documents: 20
    seq_len: 32
    train: {max_steps: 2, batch_size: 2, micro_batch: 2, schedule: {lr: 1.0e-3}}
targets:
  data: [my.jsonl]
  count: 3
  holdout: 3
  min_tokens: 30
  max_tokens: 48
  passages: true
  seed: 5
  filler: {data: [filler.jsonl], documents: 4}
train: {max_steps: 2, batch_size: 2, micro_batch: 1, save_every: 2, keep: 0, eval_every: 2, schedule: {lr: 1.0e-3}}
arms:
  - {name: standard, loss: standard}
eval:
  protocols: [{name: custom, prefix: [8], suffix: 8}]
  resamples: 20
`

// TestRunnerUserFiles: a study with no built-in data runs end to end.
func TestRunnerUserFiles(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	dir := t.TempDir()
	for i, f := range []string{"my.jsonl", "filler.jsonl", "pre.jsonl"} {
		writeCorpus(t, filepath.Join(dir, f), 20, uint64(i+1))
	}
	if err := os.WriteFile(filepath.Join(dir, "study.yaml"), []byte(userStudy), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := ParseSpec([]byte(userStudy), dir)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "study")
	log, err := runSpec(t, s, out)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	for _, f := range []string{"data/targets.jsonl", "data/heldout.jsonl", "data/train/manifest.json", "report.md"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "data", "builtin")); err == nil {
		t.Error("a built-in corpus was written")
	}
	raw, _ := os.ReadFile(filepath.Join(out, "data", "targets.jsonl"))
	if !strings.Contains(string(raw), "my.jsonl") {
		t.Errorf("targets not from my.jsonl:\n%s", raw)
	}
}

func runSpec(t *testing.T, s *Spec, out string) (string, error) {
	t.Helper()
	var log bytes.Buffer
	r := &Runner{Spec: s, Out: out, Launch: launch.Spec{Threads: 2}, Log: &log}
	_, err := r.Run()
	return log.String(), err
}
