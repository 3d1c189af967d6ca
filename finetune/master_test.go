package finetune

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// masterRank is what one rank of a master test run ends with.
type masterRank struct {
	res     []StepResult
	weights map[string][]float32 // the gathered float32 masters (rank 0)
	copies  map[string][]float32 // the rank's bf16 pass weights, widened
	ties    int                  // copies the reference run moved off nearest even
}

// masterRun trains the sweep's batches in mixed precision on one rank of
// g: with split masters, or with float32 masters whose bf16 copies are
// re-rounded after every step as a split master's are (to nearest, ties
// away from zero: engine.SplitF32), counting the ties that changed.
func masterRun(cfg *checkpoints.Config, weights []checkpoints.Tensor, batches []llama.Batch, g *parallel.Grid, split, zero bool) (masterRank, error) {
	var out masterRank
	b := cpu.New(cpu.Options{Threads: 1})
	m, err := llama.New(b, cfg, llama.Options{Parallel: g, Activations: engine.BF16, SplitMaster: split})
	if err != nil {
		return out, err
	}
	defer m.Free()
	if err := m.SetWeights(weights); err != nil {
		return out, err
	}
	oc := OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	o, err := testOptimizer(b, m, oc, g, zero)
	if err != nil {
		return out, err
	}
	defer o.Free()
	reround := func() {
		for _, p := range m.Trainable() {
			if p.Copy == nil || p.Low != nil {
				continue
			}
			v, c := download(b, p.Value), download(b, p.Copy)
			for i, x := range v {
				hi, _ := engine.SplitF32(x)
				v[i] = math.Float32frombits(uint32(hi) << 16)
				if v[i] != c[i] {
					out.ties++
				}
			}
			b.Upload(p.Copy, v) // bf16 values: exact
		}
	}
	reround()
	for step, batch := range batches {
		g.World.SetStep(step + 1)
		r, err := TrainStep(m, o, shareOf(batch, g.BatchRanks(), g.BatchRank(), sweepMicro), 1e-2, 0.5)
		if err != nil {
			return out, err
		}
		out.res = append(out.res, r)
		reround()
	}
	out.copies = map[string][]float32{}
	for _, p := range m.Trainable() {
		if p.Copy != nil {
			out.copies[p.Name] = download(b, p.Copy)
		}
	}
	out.weights, err = gatheredMasters(o, m, g)
	return out, err
}

// TestSplitMasterEqualsFP32: mixed-precision training with split masters
// (llama.Options.SplitMaster) is bit for bit training with float32
// masters whose copies round as a split master's do: every rank's losses
// and gradient norms, its bf16 pass weights and the final float32
// masters (the split ones joined), on one rank and on a data × Z grid
// under ZeRO-1 (whose steps update chunks of the halves and gather them).
// The reference run must have met ties, the one place where the two
// roundings differ, so that the test shows they are handled.
func TestSplitMasterEqualsFP32(t *testing.T) {
	cfg := sweepConfig()
	weights := checkpoints.RandomWeights(cfg, 3)
	batches := sweepBatches(cfg)
	ties := 0
	for _, c := range []struct {
		shape comm.Grid
		zero  bool
	}{
		{comm.Grid{Data: 1, X: 1, Y: 1, Z: 1}, false},
		{comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, true},
	} {
		name := fmt.Sprintf("%v/zero=%v", c.shape, c.zero)
		runs := [2]map[int]masterRank{{}, {}}
		for k, split := range []bool{false, true} {
			var mu sync.Mutex
			err := launch.Local(c.shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
				r, err := masterRun(cfg, weights, batches, g, split, c.zero && split)
				mu.Lock()
				defer mu.Unlock()
				runs[k][g.Rank()] = r
				return err
			})
			if err != nil {
				t.Fatalf("%s split=%v: %v", name, split, err)
			}
		}
		want, got := runs[0], runs[1]
		for rank := range c.shape.Size() {
			w, g := want[rank], got[rank]
			ties += w.ties
			for _, f := range []func(StepResult) float64{
				func(r StepResult) float64 { return r.Loss },
				func(r StepResult) float64 { return r.GradNorm },
			} {
				if err := numtest.Equal(column(g.res, f), column(w.res, f)); err != nil {
					t.Errorf("%s rank %d: step results: %v", name, rank, err)
				}
			}
			if err := numtest.Each(g.copies, w.copies, numtest.Equal[float32]); err != nil {
				t.Errorf("%s rank %d: bf16 pass weights: %v", name, rank, err)
			}
			if rank == 0 {
				if err := numtest.Each(g.weights, w.weights, numtest.Equal[float32]); err != nil {
					t.Errorf("%s: float32 masters: %v", name, err)
				}
			}
		}
		t.Logf("%s: losses %v", name, column(got[0].res, func(r StepResult) float64 { return r.Loss }))
	}
	if ties == 0 {
		t.Error("the reference runs met no tie: the test does not tell the roundings apart")
	}
	t.Logf("copies moved off nearest even by a tie: %d", ties)
}

// TestCompactStateResumes: a run with split masters, bf16 or 8-bit
// moments, stopped after a checkpoint on a data-parallel grid (with
// ZeRO-1 but for 8-bit moments, which it does not shard) and resumed on
// the same grid without ZeRO, goes on bit for bit as the
// uninterrupted run: its metrics and its last checkpoint's files (the
// float32 masters joined from their halves, the moments widened) are the
// same, so a checkpoint holds the state exactly and loading it narrows
// it back exactly.
func TestCompactStateResumes(t *testing.T) {
	for _, c := range []struct {
		master, moments string
		zero            int // of the first half
	}{{"split", "fp32", 1}, {"fp32", "bf16", 1}, {"split", "bf16", 1}, {"split", "int8", 0}} {
		name := c.master + "/" + c.moments
		cfg := shortRun(t)
		cfg.Precision, cfg.Master, cfg.Optimizer.Moments = "bf16", c.master, c.moments
		grid := comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}
		root := t.TempDir()
		cfg.Out = filepath.Join(root, "whole")
		want := trainRun(t, cfg, &grid, "", 0)
		cfg.Out = filepath.Join(root, "resumed")
		cfg.Zero = c.zero
		got := trainRun(t, cfg, &grid, "", 2)
		cfg.Zero = 0
		got = append(got, trainRun(t, cfg, &grid, cfg.Out, 0)...)
		if len(got) != len(want) || len(want) == 0 {
			t.Fatalf("%s: %d metrics lines, want %d", name, len(got), len(want))
		}
		for i := range want {
			w, g := want[i], got[i]
			w.TokensPerS, w.ModelFLOPsPS, g.TokensPerS, g.ModelFLOPsPS, w.SaveBlockedS, g.SaveBlockedS = 0, 0, 0, 0, 0, 0
			w.CheckpointDir, g.CheckpointDir = filepath.Base(w.CheckpointDir), filepath.Base(g.CheckpointDir)
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s step %d: resumed %+v\nwhole %+v", name, w.Step, g, w)
			}
		}
		ck := filepath.Join(CheckpointsDir, StepName(cfg.MaxSteps))
		sameTensorFiles(t, name, filepath.Join(root, "whole", ck), filepath.Join(root, "resumed", ck))
	}
}

// sameTensorFiles checks that the safetensors files of checkpoint got are
// byte for byte those of want, which must verify against its manifest and
// hold at least two (weights and moments).
func sameTensorFiles(t *testing.T, what, want, got string) {
	t.Helper()
	man, err := VerifyCheckpoint(want)
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for f := range man.Files {
		if !strings.HasSuffix(f, ".safetensors") {
			continue
		}
		a, _ := os.ReadFile(filepath.Join(want, f))
		b, _ := os.ReadFile(filepath.Join(got, f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Errorf("%s: %s differs from %s's", what, f, want)
		}
		compared++
	}
	if compared < 2 {
		t.Errorf("%s: %d tensor files compared", what, compared)
	}
}

// TestCompactStateMemory: the memory accounting (llama.Itemize, which the
// preflight, inspect and the planner size from) of split masters and
// bf16 moments is what the model and the optimizer allocate: the model's
// weights and gradients (a split master's copy and residual, no float32
// master), and the moments at 2 bytes an element, whole or as ZeRO's
// first data rank's chunks; 8-bit moments at 1 byte an element and a
// float32 scale a piece of a block.
func TestCompactStateMemory(t *testing.T) {
	cfg := sweepConfig()
	for _, c := range []struct {
		shape   comm.Grid
		zero    int
		split   bool
		moments string
	}{
		{comm.Grid{Data: 1, X: 1, Y: 1, Z: 1}, 0, true, "fp32"},
		{comm.Grid{Data: 1, X: 1, Y: 1, Z: 1}, 0, false, "bf16"},
		{comm.Grid{Data: 2, X: 2, Y: 1, Z: 1}, 1, true, "bf16"},
		{comm.Grid{Data: 3, X: 1, Y: 2, Z: 1}, 0, true, "bf16"},
		{comm.Grid{Data: 1, X: 1, Y: 1, Z: 1}, 0, true, "int8"},
		{comm.Grid{Data: 2, X: 2, Y: 1, Z: 2}, 0, false, "int8"},
	} {
		name := fmt.Sprintf("%v/zero=%d/split=%v/%s", c.shape, c.zero, c.split, c.moments)
		oc := OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Moments: c.moments}
		w := llama.Work{Grid: c.shape, Moments: 2, Zero: c.zero, Activations: engine.BF16, SplitMaster: c.split, MomentDType: oc.momentDType()}
		it := llama.Itemize(cfg, w)
		var mu sync.Mutex
		err := launch.Local(c.shape, parallel.Overlap{}, func(g *parallel.Grid) error {
			b := cpu.New(cpu.Options{Threads: 1})
			m, err := llama.New(b, cfg, llama.Options{Parallel: g, Activations: engine.BF16, SplitMaster: c.split})
			if err != nil {
				return err
			}
			defer m.Free()
			params := b.MemStats().Allocated
			o, err := testOptimizer(b, m, oc, g, c.zero == 1)
			if err != nil {
				return err
			}
			defer o.Free()
			moments := b.MemStats().Allocated - params
			mu.Lock()
			defer mu.Unlock()
			if want := engine.SumBytes(it.Weights, it.Gradients, it.Gathered); params != want { // Z-sharding buffers too
				t.Errorf("%s rank %d: the model allocates %d bytes, the accounting %d", name, g.Rank(), params, want)
			}
			if g.Data.Rank() == 0 && moments != it.Optimizer || moments > it.Optimizer {
				t.Errorf("%s rank %d: the moments take %d bytes, the accounting %d", name, g.Rank(), moments, it.Optimizer)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}
