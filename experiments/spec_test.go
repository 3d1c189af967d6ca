package experiments

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/goldfish"
)

const validSpec = `
name: test
tokenizer: builtin:llama2
base: {preset: tiny, hidden: 16, layers: 1, heads: 2, kv_heads: 2, intermediate: 32, max_positions: 128}
targets: {data: [builtin:sotu], count: 2, holdout: 2, min_tokens: 20, max_tokens: 40, passages: true}
train: {max_steps: 3, batch_size: 2, micro_batch: 1, schedule: {lr: 1.0e-3}}
arms:
  - {name: standard, loss: standard}
  - name: goldfish-k3
    loss: goldfish
    goldfish: {k: 3, h: 5}
    train: {schedule: {lr: 2.0e-3}}
  - name: bigger
    loss: standard
    base: {hidden: 32}
eval:
  protocols: [{name: pythia, prefix: [8], suffix: 8}]
`

func TestParseSpec(t *testing.T) {
	s, err := ParseSpec([]byte(validSpec), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Seeds) != 1 || s.Seeds[0] != 1 || s.Targets.Repeat != 1 || s.Targets.Overlap != 50 {
		t.Errorf("defaults: seeds %v, repeat %d, overlap %d", s.Seeds, s.Targets.Repeat, s.Targets.Overlap)
	}
	std, err := s.armConfig(&s.Arms[0], 7)
	if err != nil {
		t.Fatal(err)
	}
	if std.Loss != "standard" || std.Schedule.LR != 1e-3 || std.MaxSteps != 3 || std.Seed != 7 || std.Optimizer.Name != "adamw" {
		t.Errorf("standard arm: %+v", std)
	}
	gf, err := s.armConfig(&s.Arms[1], 1)
	if err != nil {
		t.Fatal(err)
	}
	want := goldfish.Config{Strategy: goldfish.HashTable, K: 3, H: 5}
	if gf.Loss != "goldfish" || gf.Goldfish != want || gf.Schedule.LR != 2e-3 || gf.MaxSteps != 3 {
		t.Errorf("goldfish arm: loss %s %+v lr %v steps %d", gf.Loss, gf.Goldfish, gf.Schedule.LR, gf.MaxSteps)
	}
	b, err := s.armBase(&s.Arms[2])
	if err != nil || b.Hidden != 32 || b.Layers != 1 || b.Preset != "tiny" || s.Base.Hidden != 16 {
		t.Errorf("base override: %+v (spec's %+v) %v", b, s.Base, err)
	}
	if p := s.Protocols(); len(p) != 1 || p[0].Key() != "pythia-8-8" {
		t.Errorf("protocols %v", p)
	}
}

// TestSpecErrors: every mistake is reported when the spec is read, naming
// what is wrong, before anything runs.
func TestSpecErrors(t *testing.T) {
	dir := t.TempDir()
	// A run folder whose latest checkpoint is a base model.
	ck := filepath.Join(dir, "run", finetune.CheckpointsDir, finetune.StepName(4))
	os.MkdirAll(ck, 0o755)
	os.WriteFile(filepath.Join(ck, checkpoints.ConfigFile), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(dir, "run", finetune.CheckpointsDir, finetune.LatestFile), []byte(finetune.StepName(4)), 0o644)
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"missing file", "data: [builtin:sotu]", "data: [nope.jsonl]", "targets: data: stat " + filepath.Join(dir, "nope.jsonl")},
		{"unknown builtin", "data: [builtin:sotu]", "data: [builtin:wiki]", `unknown "builtin:wiki"`},
		{"k below 2", "goldfish: {k: 3, h: 5}", "goldfish: {k: 1, h: 5}", "arms[1] (goldfish-k3): goldfish: k must be ≥ 2, got 1"},
		{"unknown goldfish key", "goldfish: {k: 3, h: 5}", "goldfish: {k: 3, width: 5}", `spec.yaml:11:22: arms[1] (goldfish-k3): goldfish: unknown key "width"`},
		{"unknown train key", "micro_batch: 1,", "micro_batches: 1,", `spec.yaml:6:38: arms[0] (standard): train: unknown key "micro_batches" (did you mean micro_batch?)`},
		{"train key in kebab-case", "micro_batch: 1,", "micro-batch: 1,", ""},
		{"misplaced train key", "micro_batch: 1,", "micro_batch: 1, lr: 1,", `unknown key "lr" (did you mean schedule.lr?)`},
		{"wrong type", "micro_batch: 1,", "micro_batch: one,", "train: micro_batch: cannot unmarshal !!str `one` into int"},
		{"unknown top key", "name: test", "nom: test", `spec.yaml:2:1: unknown key "nom" (did you mean name?)`},
		{"bad loss", "{name: standard, loss: standard}", "{name: standard, loss: plain}", `arms[0].loss: unknown loss "plain" (want standard or goldfish)`},
		{"duplicate arm", "name: bigger", "name: standard", `name "standard" used twice`},
		{"bad arm name", "name: bigger", "name: 'a b'", `name "a b"`},
		{"model in train", "max_steps: 3,", "max_steps: 3, model: x,", "model, data and out are set by the experiment"},
		{"micro batch", "micro_batch: 1,", "micro_batch: 3,", "micro_batch 3 does not divide batch_size 2"},
		{"no base", "preset: tiny,", "", "model or preset: missing"},
		{"bad preset", "preset: tiny,", "preset: huge,", "huge"},
		{"missing base folder", "preset: tiny,", "model: nowhere,", filepath.Join(dir, "nowhere") + ": no such file or folder"},
		{"base folder of neither kind", "preset: tiny,", "model: .,", "not a checkpoint folder (with config.json), a run folder (with checkpoints/latest) or a checkpoints/latest file"},
		{"base from a run folder", "preset: tiny,", "model: run,", ""},
		{"base from a latest file", "preset: tiny,", "model: run/checkpoints/latest,", ""},
		{"protocol", "{name: pythia, prefix: [8], suffix: 8}", "{name: custom, prefix: [8]}", "custom protocol: needs one prefix length and a suffix length"},
		{"chat protocol", "{name: pythia, prefix: [8], suffix: 8}", "{name: chat}", "eval: protocols[0]: chat: a study's targets are text documents, not conversations"},
		{"chat extraction", "micro_batch: 1,", "micro_batch: 1, extraction: {every: 2, protocol: chat},", "arms[0] (standard): train: extraction: protocol chat: a study's targets are text documents"},
		{"lengths", "min_tokens: 20,", "min_tokens: 50,", "min_tokens 50 and max_tokens 40"},
		{"count", "count: 2,", "count: 0,", "count 0"},
		{"a billion layers", "layers: 1,", "layers: 1000000000,", "base: layers: 1000000000: want at most 1024 (Llama 3.1 405B has 126) (num_hidden_layers)"},
		{"an arm's huge hidden size", "base: {hidden: 32}", "base: {hidden: 1000000000000}", "arms[2] (bigger): base: hidden: 1000000000000: want at most 131072"},
		{"min_k NaN", "suffix: 8}]", "suffix: 8}]\n  min_k: .nan", "eval: min_k NaN: want a percentage in (0, 100]"},
		{"min_k above 100", "suffix: 8}]", "suffix: 8}]\n  min_k: 150", "eval: min_k 150: want a percentage in (0, 100]"},
		{"negative batch", "suffix: 8}]", "suffix: 8}]\n  batch: -1", "eval: batch -1 and resamples 0 (want ≥ 0)"},
		{"fractional seed", "name: test", "name: test\nseeds: [1.5]", "spec.yaml:3:9: seeds[0]: 1.5 is not an integer"},
		{"canaries", "passages: true}", "passages: true, canaries: {repetitions: [4, 1], per_count: 1}, filler: {data: [builtin:austen], holdout: 4}}", ""},
		{"canaries without filler", "passages: true}", "passages: true, canaries: {repetitions: [1, 4], per_count: 1}}", "targets: canaries: no filler"},
		{"canaries against count", "passages: true}", "passages: true, canaries: {repetitions: [1, 4], per_count: 2}, filler: {data: [builtin:austen]}}",
			"targets: count 2, but canaries make 4 (per_count 2 × 2 counts): leave count out"},
		{"canaries and repeat", "passages: true}", "passages: true, repeat: 2, canaries: {repetitions: [1, 4], per_count: 1}, filler: {data: [builtin:austen]}}",
			"targets: repeat and canaries: give one"},
		{"no repetitions", "passages: true}", "passages: true, canaries: {repetitions: [], per_count: 2}, filler: {data: [builtin:austen]}}", "targets: canaries: repetitions: none"},
		{"zero repetitions", "passages: true}", "passages: true, canaries: {repetitions: [0, 4], per_count: 1}, filler: {data: [builtin:austen]}}",
			"targets: canaries: repetitions[0]: 0 (want 1 to 1048576)"},
		{"a count twice", "passages: true}", "passages: true, canaries: {repetitions: [4, 4], per_count: 1}, filler: {data: [builtin:austen]}}",
			"targets: canaries: repetitions: 4 given twice"},
		{"no canary per count", "passages: true}", "passages: true, canaries: {repetitions: [1, 4]}, filler: {data: [builtin:austen]}}", "targets: canaries: per_count 0"},
		{"too many copies", "count: 2, holdout: 2, min_tokens: 20, max_tokens: 40, passages: true}",
			"holdout: 2, min_tokens: 20, max_tokens: 40, passages: true, canaries: {repetitions: [1000000], per_count: 100}, filler: {data: [builtin:austen]}}",
			"targets: canaries: 100 canaries of each count × 1000000 copies in all is more than 16777216 documents"},
		{"unknown canaries key", "passages: true}", "passages: true, canaries: {repetitions: [1, 4], per_counts: 1}}", `spec.yaml:5:135: targets.canaries: unknown key "per_counts" (did you mean per_count?)`},
		{"fractional repetitions", "passages: true}", "passages: true, canaries: {repetitions: [1.5, 4], per_count: 1}}", "spec.yaml:5:128: targets.canaries.repetitions[0]: 1.5 is not an integer"},
		{"filler holdout", "passages: true}", "passages: true, filler: {data: [builtin:austen], documents: 10, holdout: 10}}",
			"targets: filler: holdout 10 of 10 documents leaves none to train on"},
		{"negative filler skip", "passages: true}", "passages: true, filler: {data: [builtin:austen], skip: -1}}",
			"targets: filler: skip -1, documents 0 and holdout 0 (want ≥ 0)"},
		{"fractional train step count", "max_steps: 3,", "max_steps: 2.5,", "spec.yaml:6:20: arms[0] (standard): train: max_steps: 2.5 is not an integer"},
	} {
		path, err := readEditedSpec(t, dir, tc.name, tc.from, tc.to)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error %v, want one naming %s and %q", tc.name, err, path, tc.want)
		}
	}
}

// TestDemoSpecs: the bundled specs parse.
func TestDemoSpecs(t *testing.T) {
	for _, quick := range []bool{false, true} {
		s, err := DemoSpec(quick)
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Arms) != 2 || s.Arms[1].Loss != "goldfish" {
			t.Errorf("quick=%v: arms %+v", quick, s.Arms)
		}
		// The targets hidden in filler that the base never saw, some of
		// it held out: the demo measures utility beside memorization.
		if f := s.Targets.Filler; f == nil || f.Holdout == 0 || s.Base.Pretrain == nil || f.Skip < s.Base.Pretrain.Documents {
			t.Errorf("quick=%v: filler %+v after a pretraining on %+v", quick, f, s.Base.Pretrain)
		}
		cfg, err := s.armConfig(&s.Arms[1], 1)
		if err != nil || cfg.Goldfish != (goldfish.Config{Strategy: goldfish.HashTable, K: 4, H: 13}) {
			t.Errorf("quick=%v: goldfish arm %+v %v", quick, cfg.Goldfish, err)
		}
	}
	if !quickSpecIsSmaller(t) {
		t.Error("the quick demo is not smaller than the full one")
	}
}

func quickSpecIsSmaller(t *testing.T) bool {
	full, _ := DemoSpec(false)
	quick, _ := DemoSpec(true)
	return quick.Targets.Count < full.Targets.Count && full.Targets.Count >= 64 && full.Targets.Holdout >= 64 && full.Targets.MinTokens >= 128
}

func TestSpecFiles(t *testing.T) {
	paths, err := filepath.Glob("specs/*.yaml")
	if err != nil || len(paths) < 3 {
		t.Fatalf("specs: %v %v", paths, err)
	}
	for _, p := range paths {
		if _, err := ReadSpec(p); err != nil {
			t.Error(err)
		}
	}
}

// TestSpecCountBounds: every count a spec gives — each integer key, the
// seeds and their number — is refused beyond what it can mean, naming
// the key and the value (and, beyond the key's type, the file and line),
// when the spec is read: a seed of 2⁶⁴ ran as seed 2⁶³, repeat: 10⁹
// filled the memory and the disk, resamples: 10⁹ asked for 8 GB.
func TestSpecCountBounds(t *testing.T) {
	dir := t.TempDir()
	seeds := func(n int) string {
		s := make([]string, n)
		for i := range s {
			s[i] = strconv.Itoa(i + 1)
		}
		return "name: test\nseeds: [" + strings.Join(s, ", ") + "]"
	}
	const huge = "9223372036854775807"
	targets := "count: 2, holdout: 2, min_tokens: 20, max_tokens: 40, passages: true}"
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"seed beyond 64 bits", "name: test", "name: test\nseeds: [18446744073709551616]",
			"spec.yaml:3:9: seeds[0]: 18446744073709551616 is out of range (want an integer from 0 to 18446744073709551615)"},
		{"second seed beyond 64 bits", "name: test", "name: test\nseeds: [1, 99999999999999999999999]", "spec.yaml:3:12: seeds[1]: 99999999999999999999999 is out of range"},
		{"largest seed", "name: test", "name: test\nseeds: [18446744073709551615]", ""},
		{"count beyond 63 bits", "count: 2,", "count: 9223372036854775808,", "spec.yaml:5:40: targets.count: 9223372036854775808 is out of range"},
		{"too many seeds", "name: test", seeds(10_001), "seeds: 10001 of them (want 1 to 10000)"},
		{"a seed twice", "name: test", "name: test\nseeds: [3, 1, 3]", "seeds[2]: 3 given twice (first as seeds[0])"},
		{"repeat", "passages: true}", "passages: true, repeat: 1000000000}", "targets: repeat 1000000000 (want 1 to 1048576)"},
		{"repeat × count", "count: 2,", "count: 100, repeat: 1000000,", "targets: count 100 × repeat 1000000 is more than 16777216 documents"},
		{"count", "count: 2,", "count: " + huge + ",", "targets: count " + huge + " (want at most 16777216)"},
		{"holdout", "holdout: 2,", "holdout: " + huge + ",", "targets: holdout " + huge + " (want at most 16777216)"},
		{"max_tokens", "max_tokens: 40,", "max_tokens: " + huge + ",", "targets: max_tokens " + huge + " (want at most 16777216)"},
		{"min_tokens", targets, "count: 2, holdout: 2, min_tokens: " + huge + ", max_tokens: " + huge + ", passages: true}", "targets: min_tokens " + huge},
		{"overlap", "passages: true}", "passages: true, overlap: " + huge + "}", "targets: overlap " + huge + " (want at most 16777216)"},
		{"per_count", "passages: true}", "passages: true, canaries: {repetitions: [1], per_count: " + huge + "}, filler: {data: [builtin:austen]}}", "targets: canaries: per_count " + huge},
		{"repetitions", "passages: true}", "passages: true, canaries: {repetitions: [" + huge + "], per_count: 1}, filler: {data: [builtin:austen]}}", "targets: canaries: repetitions[0]: " + huge},
		{"filler skip", "passages: true}", "passages: true, filler: {data: [builtin:austen], skip: " + huge + "}}", "targets: filler: skip " + huge + " (want at most 1000000000)"},
		{"filler documents", "passages: true}", "passages: true, filler: {data: [builtin:austen], documents: " + huge + "}}", "targets: filler: documents " + huge},
		{"filler holdout", "passages: true}", "passages: true, filler: {data: [builtin:austen], holdout: " + huge + "}}", "targets: filler: holdout " + huge},
		{"eval batch", "suffix: 8}]", "suffix: 8}]\n  batch: " + huge, "eval: batch " + huge + " (want at most 1000000000)"},
		{"eval resamples", "suffix: 8}]", "suffix: 8}]\n  resamples: 1000000000", "eval: resamples 1000000000 (want at most 100000)"},
		{"protocol suffix", "suffix: 8}", "suffix: " + huge + "}", "eval: protocols[0]: memorization: pythia protocol: suffix length " + huge + " (want 1 to 16777216)"},
		{"protocol prefix", "prefix: [8]", "prefix: [" + huge + "]", "eval: protocols[0]: memorization: pythia protocol: prefix length " + huge},
		{"base shape", "hidden: 16,", "hidden: " + huge + ",", "base: hidden: " + huge},
		{"pretrain documents", "max_positions: 128}", "max_positions: 128, pretrain: {data: [builtin:austen], documents: " + huge + "}}", "pretrain: documents " + huge},
		{"pretrain seq_len", "max_positions: 128}", "max_positions: 128, pretrain: {data: [builtin:austen], seq_len: " + huge + "}}", "pretrain: seq_len " + huge},
		{"train epochs", "max_steps: 3,", "max_steps: 0, epochs: 4611686018427387905,", "arms[0] (standard): finetune: epochs: 4611686018427387905 (want 0 to 1000000000)"},
		{"train max_new_tokens", "max_steps: 3,", "max_steps: 3, samples: {max_new_tokens: " + huge + "},", "samples.max_new_tokens: " + huge},
		{"an arm's train key beyond 63 bits", "train: {schedule: {lr: 2.0e-3}}", "train: {schedule: {warmup: 9223372036854775808}}", "arms[1] (goldfish-k3): train: schedule.warmup: 9223372036854775808 is out of range"},
		{"an arm's warm-up", "train: {schedule: {lr: 2.0e-3}}", "train: {schedule: {warmup: " + huge + "}}", "schedule.warmup: " + huge + " (want 0 to 1000000000)"},
	} {
		path, err := readEditedSpec(t, dir, tc.name, tc.from, tc.to)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line naming %s and %q", tc.name, err, path, tc.want)
		}
	}
}

// readEditedSpec writes validSpec with from replaced by to into dir and
// reads it back, returning its path and ReadSpec's error.
func readEditedSpec(t *testing.T, dir, name, from, to string) (string, error) {
	t.Helper()
	spec := strings.Replace(validSpec, from, to, 1)
	if spec == validSpec {
		t.Fatalf("%s: %q not in the spec", name, from)
	}
	path := filepath.Join(dir, "spec.yaml")
	if err := os.WriteFile(path, []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ReadSpec(path)
	return path, err
}
