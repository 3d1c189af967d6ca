package finetune

import (
	"path/filepath"
	"testing"

	"github.com/memtrain/memtrain/engine/comm"
)

// shortRun is a run of 4 steps of 8 sequences in micro-batches of 4 on
// the sweep's model and dataset, evaluated and saved every 2 steps.
func shortRun(t *testing.T) Config {
	t.Helper()
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 8, 4, 4
	cfg.EvalEvery, cfg.SaveEvery = 2, 2
	cfg.Schedule.LR = 1e-2
	return cfg
}

// TestBF16RunResumes: a run at precision bf16 follows the f32 run's
// losses within bf16's rounding (2⁻⁸ relative), and stopped after a
// checkpoint — on a data-parallel grid of two ranks — and resumed on one
// rank it goes on as the uninterrupted run: the checkpoint holds the
// float32 masters and moments, and loading them refreshes the bf16
// weight copies.
func TestBF16RunResumes(t *testing.T) {
	cfg := shortRun(t)
	root := t.TempDir()

	cfg.Out = filepath.Join(root, "f32")
	f32 := trainRank(t, cfg, nil, "", 0)
	cfg.Precision = "bf16"
	cfg.Out = filepath.Join(root, "one")
	want := trainRank(t, cfg, nil, "", 0)
	cfg.Out = filepath.Join(root, "resumed")
	first := trainRank(t, cfg, &comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}, "", 2)
	second := trainRank(t, cfg, nil, cfg.Out, 0)
	got := append(first, second...)
	if len(got) != len(want) || len(f32) != len(want) {
		t.Fatalf("%d and %d metrics lines, want %d", len(got), len(f32), len(want))
	}
	// The data-parallel half sums the weight gradients in another order
	// (float32 roundoff), which a bf16 copy may round to a neighbouring
	// value: so the halves agree with the one-rank run to a fraction of
	// bf16's 2⁻⁸, not bit for bit.
	for i, w := range want {
		if g := got[i]; g.Kept != w.Kept {
			t.Errorf("step %d: resumed %+v\none rank %+v", w.Step, g, w)
		}
	}
	checkMetrics(t, "resumed against one rank", got, want, map[string]float64{"loss": 1e-3, "grad_norm": 1e-2, "eval_loss": 1e-3})
	checkMetrics(t, "bf16 against f32", want, f32, map[string]float64{"loss": 1.0 / 256})
	if want[0].Loss == want[len(want)-1].Loss {
		t.Errorf("the loss did not move: %v", want[0].Loss)
	}
	t.Logf("bf16 losses %v … %v; f32 %v … %v", want[0].Loss, want[len(want)-1].Loss, f32[0].Loss, f32[len(f32)-1].Loss)
}
