package job

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/units"
)

// shortRun is a run of 4 steps of 8 sequences in micro-batches of 4 on a
// tiny random model and a dataset of random documents of 4 to 19 tokens,
// a sixth of them held out; evaluated and saved every 2 steps.
func shortRun(t *testing.T) finetune.Config {
	t.Helper()
	p, err := checkpoints.LookupPreset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	mc := p.Config()
	mc.VocabSize = 64
	if err := mc.Reshape(checkpoints.Shape{Hidden: 16, Layers: 1, Heads: 2, KVHeads: 1, Intermediate: 32}); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "model")
	if err := checkpoints.Save(model, mc, checkpoints.RandomWeights(mc, 5), checkpoints.SaveOptions{DType: checkpoints.DTypeF32}); err != nil {
		t.Fatal(err)
	}
	const seqLen = 16
	dataset := filepath.Join(t.TempDir(), "data")
	w, err := data.CreateStore(dataset, data.TokenizerInfo{SHA256: "none", VocabSize: mc.VocabSize, BOS: -1, EOS: -1},
		data.Settings{Mode: data.ModeDocument, SeqLen: seqLen})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 36; i++ {
		doc := data.Document{Source: "random", Line: int64(i + 1), IDs: make([]int32, 4+r.IntN(seqLen)), Split: data.Train}
		for j := range doc.IDs {
			doc.IDs[j] = int32(r.IntN(mc.VocabSize))
		}
		if i%6 == 0 {
			doc.Split = data.Holdout
		}
		if _, err := w.Add(doc); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Commit(nil, nil); err != nil {
		t.Fatal(err)
	}
	cfg := finetune.DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 8, 4, 4
	cfg.EvalEvery, cfg.SaveEvery = 2, 2
	cfg.Schedule.LR = 1e-2
	return cfg
}

// TestTrain: a job on a data-parallel grid of two ranks
// reports on the lead rank alone — its warnings, its start, and after
// every step the metrics the run folder records, the run's length and the
// latest held-out loss — and BeforeCommit at each of its saves.
func TestTrain(t *testing.T) {
	cfg := shortRun(t)
	cfg.Out = filepath.Join(t.TempDir(), "run")
	l, err := launch.New(launch.Spec{Grid: comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	j, err := New(cfg, l)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex // BeforeCommit runs on a rank's goroutine
		commits []int
		started int
		got     []Progress
	)
	h := finetune.Hooks{BeforeCommit: func(step int, _ string) {
		mu.Lock()
		defer mu.Unlock()
		commits = append(commits, step)
	}}
	res, lead, err := j.Train(h, Report{
		Started:  func(run *finetune.Run) { started++ },
		Progress: func(p Progress) { got = append(got, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !lead || res.Step != 4 || res.Steps != 4 || res.Stopped || started != 1 {
		t.Fatalf("lead %v, result %+v, started %d times: want the lead's finished run of 4 steps, started once", lead, res, started)
	}
	if want := []int{2, 4}; !slices.Equal(commits, want) {
		t.Errorf("BeforeCommit at steps %v, want %v (the lead rank's saves alone)", commits, want)
	}
	written := metricsLines(t, cfg.Out)
	if len(got) != len(written) {
		t.Fatalf("%d progress reports, %d metrics lines", len(got), len(written))
	}
	heldOut := 0.0
	for i, p := range got {
		if p.Metrics.EvalLoss > 0 {
			heldOut = p.Metrics.EvalLoss
		}
		if p.Steps != 4 || p.HeldOut != heldOut {
			t.Errorf("step %d: steps %d, held-out %v: want 4 and %v (the latest)", p.Step, p.Steps, p.HeldOut, heldOut)
		}
		// The metrics line is what Progress saw, written.
		line, err := json.Marshal(p.Metrics)
		if err != nil {
			t.Fatal(err)
		}
		if string(line) != written[i] {
			t.Errorf("step %d: progress %s, metrics line %s", p.Step, line, written[i])
		}
	}
	if heldOut == 0 {
		t.Error("no held-out loss reported (eval_every 2)")
	}
}

// metricsLines reads a run folder's metrics lines.
func metricsLines(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, finetune.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// TestNewEpochs: epochs whose steps exceed units.MaxCount are
// refused before any rank starts, naming max_steps as the way out.
func TestNewEpochs(t *testing.T) {
	cfg := shortRun(t)
	cfg.Out = filepath.Join(t.TempDir(), "run")
	store, err := data.OpenStore(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	perEpoch := (store.NumSequences(data.Train) + cfg.BatchSize - 1) / cfg.BatchSize
	store.Close()
	if perEpoch < 2 {
		t.Fatalf("%d steps an epoch: the test needs 2 or more", perEpoch)
	}
	l, err := launch.New(launch.Spec{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		epochs int
		ok     bool
	}{
		{units.MaxCount / perEpoch, true},
		{units.MaxCount/perEpoch + 1, false},
	} {
		cfg.MaxSteps, cfg.Epochs = 0, tc.epochs
		_, err := New(cfg, l)
		if tc.ok && err != nil {
			t.Errorf("epochs %d: %v", tc.epochs, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "or max_steps")) {
			t.Errorf("epochs %d: error %v, want the steps bound", tc.epochs, err)
		}
	}
}

func TestProgressLines(t *testing.T) {
	p := Progress{Metrics: finetune.Metrics{Step: 3, EvalLoss: 2.25, EvalPerplex: 9.4877,
		Samples: []finetune.Sample{{Prompt: "a", Text: "b\n"}, {Prompt: "c", Text: ""}}}, Steps: 10}
	if got, want := p.EvalLine(), "step 3/10: held-out loss 2.2500, perplexity 9.49"; got != want {
		t.Errorf("EvalLine = %q, want %q", got, want)
	}
	want := []string{`step 3/10: sample "a" → "b\n"`, `step 3/10: sample "c" → ""`}
	if got := p.SampleLines(); !slices.Equal(got, want) {
		t.Errorf("SampleLines = %q, want %q", got, want)
	}
}
