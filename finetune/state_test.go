package finetune

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

func tinyModel(t *testing.T, b engine.Backend, seed uint64) *llama.Model {
	t.Helper()
	cfg := &checkpoints.Config{
		HiddenSize: 16, IntermediateSize: 24, NumHiddenLayers: 1, NumAttentionHeads: 2, NumKeyValueHeads: 1,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 32, VocabSize: 19,
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.2,
	}
	m, err := llama.New(b, cfg, llama.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetWeights(checkpoints.RandomWeights(cfg, seed)); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCheckpointRoundTrip(t *testing.T) {
	b := cpu.New(cpu.Options{Threads: 1})
	m := tinyModel(t, b, 1)
	o, err := NewOptimizer(b, m.Params(), OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	batch := llama.Batch{B: 1, T: 5, IDs: []int32{1, 2, 3, 4, 5}, Targets: []int32{2, 3, 4, 5, 6}}
	if _, err := m.ForwardBackward(batch, 0.2); err != nil {
		t.Fatal(err)
	}
	o.Update(1e-2)
	dir := filepath.Join(t.TempDir(), "checkpoints")
	os.MkdirAll(filepath.Join(dir, ".tmp-step-00000009-123"), 0o755) // left by a crash
	for s := 1; s <= 3; s++ {
		st := TrainerState{Step: s, OptimizerStep: o.Step, LoaderPosition: int64(10 * s)}
		if err := SaveCheckpoint(dir, StepName(s), m, o, st, SaveOptions{Files: map[string][]byte{"tokenizer.json": []byte("{}")}, Keep: 2}); err != nil {
			t.Fatal(err)
		}
	}
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{"latest", StepName(2), StepName(3)}; !slices.Equal(names, want) {
		t.Errorf("checkpoint folder holds %v, want %v", names, want)
	}
	path, err := LatestCheckpoint(dir)
	if err != nil || filepath.Base(path) != StepName(3) {
		t.Fatalf("latest %q %v", path, err)
	}

	b2 := cpu.New(cpu.Options{Threads: 2})
	m2 := tinyModel(t, b2, 99)
	o2, _ := NewOptimizer(b2, m2.Params(), OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	st, err := LoadCheckpoint(path, m2, o2)
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != 3 || st.LoaderPosition != 30 || o2.Step != 1 {
		t.Errorf("state %+v, optimizer step %d", st, o2.Step)
	}
	w1, w2 := m.Weights(), m2.Weights()
	for i := range w1 {
		if !slices.Equal(w1[i].Data, w2[i].Data) {
			t.Errorf("%s differs after reload", w1[i].Name)
		}
	}
	mv1, vv1 := o.Moments()
	mv2, vv2 := o2.Moments()
	for i := range mv1 {
		if !slices.Equal(values(b, mv1[i]), values(b2, mv2[i])) || !slices.Equal(values(b, vv1[i]), values(b2, vv2[i])) {
			t.Errorf("moments of %s differ after reload", o.params[i].Name)
		}
	}
	// The checkpoint is a plain HF checkpoint too.
	if ck, err := checkpoints.Open(path); err != nil {
		t.Error(err)
	} else {
		ck.Close()
	}
}

func TestLatestErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := LatestCheckpoint(dir); err == nil || !strings.Contains(err.Error(), "no checkpoint") {
		t.Errorf("%v", err)
	}
	os.WriteFile(filepath.Join(dir, LatestFile), []byte("../etc\n"), 0o644)
	if _, err := LatestCheckpoint(dir); err == nil {
		t.Error("a path outside the folder was accepted")
	}
}

// TestBF16ExportResumesExactly: with save_dtype bf16, a run stopped and
// resumed ends with the uninterrupted run's float32 weights and moments
// bit for bit, and its metrics, timing aside; the finished run's HF
// export (FinalDir) is bf16, by HF names, and the same in both.
func TestBF16ExportResumesExactly(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps, cfg.SaveDType = 8, 4, 4, "bf16"
	cfg.EvalEvery, cfg.SaveEvery = 2, 2
	cfg.Schedule.LR = 1e-3

	whole := cfg
	whole.Out = filepath.Join(t.TempDir(), "whole")
	want := trainRank(t, whole, nil, "", 0)
	cfg.Out = filepath.Join(t.TempDir(), "resumed")
	got := append(trainRank(t, cfg, nil, "", 2), trainRank(t, cfg, nil, cfg.Out, 0)...)
	if len(got) != len(want) {
		t.Fatalf("%d metrics lines, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		w.TokensPerS, w.ModelFLOPsPS, g.TokensPerS, g.ModelFLOPsPS, w.SaveBlockedS, g.SaveBlockedS = 0, 0, 0, 0, 0, 0
		w.CheckpointDir, g.CheckpointDir = filepath.Base(w.CheckpointDir), filepath.Base(g.CheckpointDir)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("step %d: resumed %+v\nwhole %+v", w.Step, g, w)
		}
	}
	last := StepName(cfg.MaxSteps)
	for _, f := range []string{filepath.Join(CheckpointsDir, last, checkpoints.SafetensorsFile), filepath.Join(CheckpointsDir, last, OptimizerFile),
		filepath.Join(FinalDir, checkpoints.SafetensorsFile)} {
		a, err := os.ReadFile(filepath.Join(whole.Out, f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(cfg.Out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: the resumed run's differs from the uninterrupted run's", f)
		}
	}
	// The checkpoint holds float32 weights, the export their bf16
	// rounding, both by HF names.
	ck, err := checkpoints.Open(filepath.Join(cfg.Out, CheckpointsDir, last))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	final, err := checkpoints.Open(filepath.Join(cfg.Out, FinalDir))
	if err != nil {
		t.Fatal(err)
	}
	defer final.Close()
	if s := final.Weights.Summary(); len(s.Bytes) != 1 || s.Bytes["BF16"] == 0 {
		t.Errorf("export stored as %v, want BF16 only", s.Bytes)
	}
	if final.Config.TorchDType != "bfloat16" {
		t.Errorf("export's torch_dtype %q", final.Config.TorchDType)
	}
	for _, spec := range ck.Config.TensorSpecs() {
		info, ok := ck.Weights.Tensor(spec.Name)
		if !ok || info.DType != checkpoints.DTypeF32 || !slices.Equal(info.Shape, spec.Shape) {
			t.Errorf("master %s: %+v", spec.Name, info)
		}
		w, _ := ck.Weights.ReadFloat32(spec.Name)
		e, err := final.Weights.ReadFloat32(spec.Name)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float32, len(w))
		for i, v := range w {
			want[i] = checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(v))
		}
		if err := numtest.Equal(e, want); err != nil {
			t.Fatalf("%s: exported against the master rounded to bf16: %v", spec.Name, err)
		}
	}
}

// TestTrainerStateCounts: trainer_state.json records the input tokens
// trained on (batch_size × sequence length a step) and the last step's
// loss, carried on across a resume.
func TestTrainerStateCounts(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data, cfg.Out = model, dataset, filepath.Join(t.TempDir(), "run")
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps, cfg.SaveEvery, cfg.Keep = 4, 2, 5, 1, 0
	metrics := append(trainRun(t, cfg, nil, "", 3), trainRun(t, cfg, nil, cfg.Out, 0)...)
	if len(metrics) != 5 {
		t.Fatalf("%d metrics lines", len(metrics))
	}
	for _, m := range metrics {
		st, err := readState(m.CheckpointDir)
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(m.Step * 4 * sweepT); st.TokensSeen != want || st.LastLoss != m.Loss || st.LastLoss == 0 {
			t.Errorf("step %d: tokens_seen %d, last_loss %v; want %d, %v", m.Step, st.TokensSeen, st.LastLoss, want, m.Loss)
		}
	}
}
