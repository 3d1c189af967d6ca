package experiments

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/experiments/report"
)

const tinyStudy = `
name: tiny study
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
    data: [builtin:austen]
    documents: 20
    seq_len: 32
    train: {max_steps: 2, batch_size: 2, micro_batch: 2}
targets: {data: [builtin:sotu], count: 3, holdout: 3, min_tokens: 30, max_tokens: 48, passages: true, seed: 5}
train: {max_steps: 4, batch_size: 2, micro_batch: 1, save_every: 2, keep: 0, eval_every: 2, schedule: {lr: 1.0e-3},
  samples: {every: 2, prompts: ["The Union"], max_new_tokens: 4}}
arms:
  - {name: standard, loss: standard}
  - {name: goldfish-k2, loss: goldfish, goldfish: {k: 2, h: 3}}
eval:
  protocols: [{name: custom, prefix: [8], suffix: 8}]
  resamples: 50
`

func runStudy(t *testing.T, spec, out string, strict bool) (*report.Written, string, error) {
	t.Helper()
	return runStudyProgress(t, spec, out, strict, nil)
}

// runStudyProgress is runStudy with progress, if not nil, seeing every
// progress event.
func runStudyProgress(t *testing.T, spec, out string, strict bool, progress func(Progress)) (*report.Written, string, error) {
	t.Helper()
	s, err := ParseSpec([]byte(spec), "")
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	var events int
	r := &Runner{Spec: s, Out: out, Launch: launch.Spec{Threads: 2}, Log: &log, Strict: strict,
		Progress: func(p Progress) {
			events++
			if progress != nil {
				progress(p)
			}
		}}
	rep, err := r.Run()
	if err == nil && events == 0 {
		t.Error("no progress reported")
	}
	return rep, log.String(), err
}

// TestRunner runs a whole tiny study, then resumes it: a finished arm is
// not redone, an interrupted fine-tuning continues from its checkpoint and
// ends where the uninterrupted run ended.
func TestRunner(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	out := filepath.Join(t.TempDir(), "study")
	var phases []string
	rep, log, err := runStudyProgress(t, tinyStudy, out, false, func(p Progress) {
		if n := len(phases); strings.HasPrefix(p.Phase, "train ") && (n == 0 || phases[n-1] != p.Phase) {
			phases = append(phases, p.Phase)
		}
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	// Progress names each arm's place in the study; the log has each
	// held-out evaluation before the last.
	if want := []string{"train standard-s1 (arm 1 of 2)", "train goldfish-k2-s1 (arm 2 of 2)"}; !reflect.DeepEqual(phases, want) {
		t.Errorf("training phases %q, want %q", phases, want)
	}
	if !strings.Contains(log, "train standard-s1: step 2/4: sample \"The Union\" → \"") {
		t.Errorf("no sample at step 2 in the log:\n%s", log)
	}
	if !strings.Contains(log, "train standard-s1: step 2/4: held-out loss ") {
		t.Errorf("no held-out evaluation at step 2 in the log:\n%s", log)
	}
	if rep.Runs != 2 || rep.Arms != 2 {
		t.Errorf("report of %d runs, %d arms", rep.Runs, rep.Arms)
	}
	for _, f := range []string{"spec.yaml", "data/targets.jsonl", "data/heldout.jsonl", "data/train/manifest.json", "report.md", "results.csv"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	bases, _ := filepath.Glob(filepath.Join(out, "base", "*.json"))
	if len(bases) != 1 {
		t.Errorf("%d base models, want 1 shared by both arms", len(bases))
	}
	results, err := report.Load(out)
	if err != nil || len(results) != 2 {
		t.Fatalf("%d results, %v", len(results), err)
	}
	gf := results[0] // arms sort by name: goldfish-k2 first
	if gf.Arm != "goldfish-k2" || gf.K != 2 || gf.H != 3 || gf.Strategy != "hash-table" || gf.Steps != 4 || gf.Targets != 3 {
		t.Errorf("goldfish result %+v", gf)
	}
	if gf.Params <= 0 || !(gf.HeldoutLoss > 0) || !(gf.FinalTrainLoss > 0) || len(gf.Evals) != 1 || !(gf.BaseHeldoutLoss > 0) || gf.BaseHeldoutLoss != results[1].BaseHeldoutLoss {
		t.Errorf("goldfish result %+v", gf)
	}
	if s := gf.Evals[0].Summary; s.Members != 3 || s.NonMembers != 3 || s.Prefixes[0].K != 8 {
		t.Errorf("summary %+v", s)
	}
	// The base model is the reference of the reference-model attack.
	if m := gf.Evals[0].Summary.MIA; !m.Reference || !(m.RefAUC > 0 && m.RefAUC <= 1) {
		t.Errorf("reference attack %+v", m)
	}

	// Interrupt the goldfish arm after its step-2 checkpoint.
	arm := filepath.Join(out, "arms", "goldfish-k2-s1")
	ck := filepath.Join(arm, "train", "checkpoints")
	for _, p := range []string{filepath.Join(arm, report.ResultFile), filepath.Join(arm, "eval"), filepath.Join(ck, "step-00000004")} {
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(ck, "latest"), []byte("step-00000002\n"), 0o644)
	_, log, err = runStudy(t, tinyStudy, out, false)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if !strings.Contains(log, "arm standard-s1: done") || !strings.Contains(log, "4 steps from step 2") || strings.Contains(log, "pretrain:") {
		t.Errorf("resumed log:\n%s", log)
	}
	again, _ := report.Load(out)
	a, b := again[0], gf
	a.Seconds, b.Seconds = 0, 0
	if !reflect.DeepEqual(a, b) {
		t.Errorf("resumed arm differs:\n%+v\n%+v", a, b)
	}
	metrics, _ := report.ReadMetrics(filepath.Join(arm, "train", report.MetricsFile))
	if len(metrics) != 4 || metrics[3].Step != 4 {
		t.Errorf("%d metrics lines after the resume", len(metrics))
	}

	// Another spec in the same folder is refused.
	other := strings.Replace(tinyStudy, "seed: 5", "seed: 6", 1)
	if _, _, err := runStudy(t, other, out, false); err == nil || !strings.Contains(err.Error(), "holds another experiment") {
		t.Errorf("another spec: %v", err)
	}
}

// TestRunnerChecksBeforeTraining: documents too short for a protocol are
// found before any model is made.
func TestRunnerChecksBeforeTraining(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	spec := strings.Replace(tinyStudy, "{name: custom, prefix: [8], suffix: 8}", "{name: custom, prefix: [30], suffix: 10}", 1)
	out := filepath.Join(t.TempDir(), "study")
	_, _, err := runStudy(t, spec, out, true)
	if err == nil || !strings.Contains(err.Error(), "too short for custom(prefix 30, suffix 10)") {
		t.Fatalf("strict: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "base")); err == nil {
		t.Error("a base model was made before the check")
	}
	// Without strict the short documents are skipped and counted.
	_, log, err := runStudy(t, spec, filepath.Join(t.TempDir(), "s2"), false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "documents are too short for custom(prefix 30, suffix 10) and will be skipped") {
		t.Errorf("log:\n%s", log)
	}
}

// TestRunnerChecksMemoryBeforeTraining: a phase whose model does not fit
// the machine is refused before it trains, naming need and have.
func TestRunnerChecksMemoryBeforeTraining(t *testing.T) {
	t.Setenv(launch.MemoryLimitEnv, "64KiB")
	cache := t.TempDir()
	t.Setenv(CacheEnv, cache)
	out := filepath.Join(t.TempDir(), "study")
	_, _, err := runStudy(t, tinyStudy, out, false)
	if err == nil || !strings.Contains(err.Error(), "experiments: pretrain: finetune: ") ||
		!strings.Contains(err.Error(), "not enough memory on host: training ") || !strings.Contains(err.Error(), "but 64.0 KiB is free (MEMTRAIN_MEMORY_LIMIT)") {
		t.Fatalf("error %v", err)
	}
	if ck, _ := filepath.Glob(filepath.Join(cache, "bases", "*", "pretrain", "checkpoints")); len(ck) != 0 {
		t.Errorf("pretraining ran: %v", ck)
	}
}

// TestExperimentExtractionCurves: train: {extraction: {every: 2}} gives
// each arm a curve of its targets and held-out controls at steps 2 and 4,
// whose last point is the arm's final evaluation; the report draws it and
// has the steps-to-50% table. A spec may not name the block's documents.
func TestExperimentExtractionCurves(t *testing.T) {
	t.Setenv(CacheEnv, t.TempDir())
	spec := strings.Replace(tinyStudy, "samples: {every: 2, prompts: [\"The Union\"], max_new_tokens: 4}}",
		"extraction: {every: 2, protocol: custom, prefix: \"8\", suffix: 8}}", 1)
	if spec == tinyStudy {
		t.Fatal("the spec's train section changed")
	}
	out := filepath.Join(t.TempDir(), "study")
	rep, log, err := runStudy(t, spec, out, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log, "train standard-s1: step 2/4: extraction custom-8-8: exact match ") {
		t.Errorf("the log lacks the extraction lines:\n%s", log)
	}
	results, err := report.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range results {
		ms, err := report.ReadMetrics(filepath.Join(out, res.TrainDir, report.MetricsFile))
		if err != nil {
			t.Fatal(err)
		}
		var steps []int
		for _, m := range ms {
			if e := m.Extraction; e != nil {
				steps = append(steps, m.Step)
				if e.Protocol != "custom-8-8" || e.Members.Documents != 3 || e.NonMembers == nil || e.NonMembers.Documents != 3 {
					t.Errorf("%s step %d: extraction %+v", res.Name(), m.Step, e)
				}
			}
		}
		if !reflect.DeepEqual(steps, []int{2, 4}) {
			t.Fatalf("%s: extraction at steps %v, want [2 4]", res.Name(), steps)
		}
		last := ms[len(ms)-1].Extraction
		ev := res.Eval("custom-8-8")
		if ev == nil {
			t.Fatalf("%s: no custom-8-8 evaluation", res.Name())
		}
		g := ev.Summary.Prefixes[len(ev.Summary.Prefixes)-1]
		if last.Members.Exact != g.Members.Exact.Mean || last.Members.Token != g.Members.TokenMatch.Mean ||
			last.NonMembers.Exact != g.NonMembers.Exact.Mean || last.NonMembers.Token != g.NonMembers.TokenMatch.Mean {
			t.Errorf("%s: last curve point %+v %+v, final evaluation members %v %v, held out %v %v", res.Name(), last.Members, *last.NonMembers,
				g.Members.Exact.Mean, g.Members.TokenMatch.Mean, g.NonMembers.Exact.Mean, g.NonMembers.TokenMatch.Mean)
		}
	}
	md, err := os.ReadFile(rep.Markdown)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(md, []byte("| steps (epochs) to reach 50% exact match |")) || !bytes.Contains(md, []byte("plots/memorization-vs-step.png")) {
		t.Errorf("report.md lacks the curves:\n%s", md)
	}
	bad := strings.Replace(spec, "extraction: {every: 2,", "extraction: {every: 2, data: x.jsonl,", 1)
	if _, err := ParseSpec([]byte(bad), "spec.yaml"); err == nil || !strings.Contains(err.Error(), "train: extraction: data and non_members are set by the experiment") {
		t.Errorf("a spec naming the extraction data: %v", err)
	}
}
