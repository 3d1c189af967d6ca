package finetune

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
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
		if err := SaveCheckpoint(dir, StepName(s), m, o, st, SaveOptions{Files: map[string][]byte{"tokenizer.json": []byte("{}")}, DType: checkpoints.DTypeF32, Keep: 2}); err != nil {
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
