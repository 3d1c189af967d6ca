package finetune

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/internal/numtest"
)

// bf16Run is shortRun at precision bf16 with a learning rate of 1e-3, as
// the grid resume tests of float32 runs take.
func bf16Run(t *testing.T) Config {
	t.Helper()
	cfg := shortRun(t)
	cfg.Precision = "bf16"
	cfg.Schedule.LR = 1e-3
	return cfg
}

// TestBF16ShardedResumeSameGrid: in mixed precision on grids that split
// the model (X, Y and Z: bf16 Z gathers and bf16 sums rounded once), a
// run stopped after 2 steps and resumed on the same grid equals the
// uninterrupted run bit for bit: its metrics (timing aside) and every
// file of its last checkpoint. The checkpoint holds the float32 masters
// and moments; loading them refreshes the bf16 copies, which the grid's
// every rank rounds alike.
func TestBF16ShardedResumeSameGrid(t *testing.T) {
	for _, shape := range []*comm.Grid{{Data: 1, X: 2, Y: 1, Z: 2}, {Data: 2, X: 2, Y: 2, Z: 2}} {
		cfg := bf16Run(t)
		whole := cfg
		whole.Out = filepath.Join(t.TempDir(), "whole")
		want := trainRun(t, whole, shape, "", 0)
		cfg.Out = filepath.Join(t.TempDir(), "resumed")
		got := append(trainRun(t, cfg, shape, "", 2), trainRun(t, cfg, shape, cfg.Out, 0)...)
		if len(got) != len(want) {
			t.Fatalf("%v: %d metrics lines, want %d", shape, len(got), len(want))
		}
		for i := range want {
			w, g := want[i], got[i]
			w.TokensPerS, w.ModelFLOPsPS, g.TokensPerS, g.ModelFLOPsPS, w.SaveBlockedS, g.SaveBlockedS = 0, 0, 0, 0, 0, 0
			w.CheckpointDir, g.CheckpointDir = filepath.Base(w.CheckpointDir), filepath.Base(g.CheckpointDir)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%v step %d: resumed %+v\nwhole %+v", shape, w.Step, g, w)
			}
		}
		last := filepath.Join(CheckpointsDir, StepName(cfg.MaxSteps))
		man, err := VerifyCheckpoint(filepath.Join(whole.Out, last))
		if err != nil {
			t.Fatal(err)
		}
		for f := range man.Files {
			a, _ := os.ReadFile(filepath.Join(whole.Out, last, f))
			b, _ := os.ReadFile(filepath.Join(cfg.Out, last, f))
			if len(a) == 0 || !bytes.Equal(a, b) {
				t.Errorf("%v: %s: the resumed run's differs from the uninterrupted run's", shape, f)
			}
		}
	}
}

// Tolerances of a bf16 run resumed across grids against the uninterrupted
// one-rank bf16 run. The halves on X or Y grids round the same float32
// values to bf16 (u = 2⁻⁸) at other places than one rank does (sums over
// ranks formed in float32 and rounded once; engine/llama's
// grid_bf16_test.go derives it): each activation within a bf16 ulp or
// two, the gradients O(u) apart in relative terms, and every step after
// the first starts from weights those gradients moved. With AdamW at a
// learning rate of 1e-3 over 4 steps:
//
//   - the step losses and held-out losses within u/4 relative (a step
//     moves the loss by about 1e-2 relative here, and weights moved by
//     gradients O(u) apart move it by less: measured at most 6e-5);
//   - the gradient norms within u/2 (the norm is of gradients O(u)
//     apart, mostly averaging out: measured at most 4.7e-4);
//   - the final weights within u in ‖ΔW‖/‖W‖. AdamW's early updates are
//     about lr·sign(g) whatever |g|: where an O(u) difference flips the
//     sign of a gradient element near zero, its weight moves 2·lr = 2e-3
//     apart, on weights of about 0.05; such elements being rare, the
//     weights stay within u (measured at most 2e-3 for a tensor).
const (
	bf16ResumeLossTol   = 1.0 / 256 / 4
	bf16ResumeNormTol   = 1.0 / 256 / 2
	bf16ResumeWeightTol = 1.0 / 256
)

// TestBF16ResumeAcrossGrids: in mixed precision, a run stopped on one grid
// and resumed on another (one rank ↔ 16 ranks among them) stays within
// the tolerances above of the uninterrupted one-rank run.
func TestBF16ResumeAcrossGrids(t *testing.T) {
	if testing.Short() {
		t.Skip("16-rank grids")
	}
	cfg := bf16Run(t)
	cfg.BatchSize, cfg.MicroBatch = 16, 16
	one := cfg
	one.Out = filepath.Join(t.TempDir(), "one")
	want := trainRun(t, one, nil, "", 0)
	for _, pair := range [][2]*comm.Grid{
		{nil, {Data: 2, X: 2, Y: 2, Z: 2}},
		{{Data: 1, X: 4, Y: 2, Z: 2}, nil},
		{{Data: 4, X: 1, Y: 1, Z: 4}, {Data: 1, X: 2, Y: 4, Z: 2}},
	} {
		name := fmt.Sprintf("%v→%v", pair[0], pair[1])
		run := cfg
		run.Out = filepath.Join(t.TempDir(), "run")
		got := append(trainRun(t, run, pair[0], "", 2), trainRun(t, run, pair[1], run.Out, 0)...)
		if len(got) != len(want) {
			t.Fatalf("%s: %d metrics lines, want %d", name, len(got), len(want))
		}
		checkMetrics(t, name, got, want, map[string]float64{"loss": bf16ResumeLossTol, "grad_norm": bf16ResumeNormTol, "eval_loss": bf16ResumeLossTol})
		gw, ww := checkpointTensors(t, got[len(got)-1].CheckpointDir), checkpointTensors(t, want[len(want)-1].CheckpointDir)
		if err := numtest.EachL2(gw, ww, bf16ResumeWeightTol); err != nil {
			t.Errorf("%s: final weights, ‖ΔW‖/‖W‖: %v", name, err)
		}
	}
}
