package finetune

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/data"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/goldfish"
	"github.com/memtrain/memtrain/internal/numtest"
)

// sweepConfig is the equivalence sweep's model: hidden 64, vocabulary
// 512, 8 query and 4 key/value heads, intermediate 128, 2 layers; every
// axis up to 4 ranks divides it.
func sweepConfig() *checkpoints.Config {
	c := &checkpoints.Config{
		HiddenSize: 64, IntermediateSize: 128, NumHiddenLayers: 2, NumAttentionHeads: 8, NumKeyValueHeads: 4,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 64, VocabSize: 512,
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.05,
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

// Sweep sizes: global batches of 32 sequences of 8 tokens, in two
// micro-batches of 16 (gradient accumulation 2) split over up to 16 data·Z
// ranks, one sequence each.
const (
	sweepSteps = 5
	sweepBatch = 32
	sweepMicro = 16
	sweepT     = 8
)

// sweepBatches are the global batches of the sweep: random token
// sequences, some ending in padding, with goldfish hash-table masks.
func sweepBatches(cfg *checkpoints.Config) []llama.Batch {
	r := rand.New(rand.NewPCG(17, 4))
	masker, err := goldfish.New(goldfish.Config{Strategy: goldfish.HashTable, K: 3, H: 2})
	if err != nil {
		panic(err)
	}
	var out []llama.Batch
	for range sweepSteps {
		n := sweepBatch * sweepT
		b := llama.Batch{B: sweepBatch, T: sweepT, IDs: make([]int32, n), Targets: make([]int32, n), Weights: make([]float32, n), ReportWeights: make([]float32, n)}
		for s := 0; s < sweepBatch; s++ {
			length := sweepT
			if s%3 == 0 {
				length = 3 + r.IntN(sweepT-3)
			}
			seq := make([]int32, sweepT+1)
			for i := range seq {
				seq[i] = int32(r.IntN(cfg.VocabSize))
			}
			for t := 0; t < sweepT; t++ {
				i := s*sweepT + t
				b.IDs[i], b.Targets[i] = seq[t], seq[t+1]
				if t < length {
					b.Weights[i], b.ReportWeights[i] = 1, 1
				} else {
					b.Targets[i] = -1 // padding: any target
				}
			}
			masker.Apply(b.Targets[s*sweepT:(s+1)*sweepT], b.Weights[s*sweepT:(s+1)*sweepT])
		}
		out = append(out, b)
	}
	return out
}

// shareOf cuts a rank's share of a global batch into its micro-batches,
// as Run.microBatches does: the rank's contiguous block of sequences, in
// micro-batches of micro/ranks.
func shareOf(b llama.Batch, ranks, rank, micro int) []llama.Batch {
	per := b.B / ranks
	mb := micro / ranks
	var out []llama.Batch
	for s := rank * per; s < (rank+1)*per; s += mb {
		lo, hi := s*b.T, (s+mb)*b.T
		out = append(out, llama.Batch{B: mb, T: b.T, IDs: b.IDs[lo:hi], Targets: b.Targets[lo:hi], Weights: b.Weights[lo:hi], ReportWeights: b.ReportWeights[lo:hi]})
	}
	return out
}

// sweepRun trains sweepSteps steps on one rank of a grid (nil: one rank)
// and returns the losses and, on rank 0, the final full-shape weights.
func sweepRun(cfg *checkpoints.Config, weights []checkpoints.Tensor, batches []llama.Batch, oc OptimizerConfig, lr float64, g *parallel.Grid, recompute llama.Recompute) ([]StepResult, []checkpoints.Tensor, error) {
	b := cpu.New(cpu.Options{Threads: 1})
	m, err := llama.New(b, cfg, llama.Options{Parallel: g, Recompute: recompute})
	if err != nil {
		return nil, nil, err
	}
	defer m.Free()
	if err := m.SetWeights(weights); err != nil {
		return nil, nil, err
	}
	o, err := NewOptimizer(b, m.Params(), oc)
	if err != nil {
		return nil, nil, err
	}
	defer o.Free()
	ranks, rank := 1, 0
	if g != nil {
		ranks, rank = g.BatchRanks(), g.BatchRank()
	}
	var res []StepResult
	for step, batch := range batches {
		if g != nil {
			g.World.SetStep(step + 1)
		}
		r, err := TrainStep(m, o, shareOf(batch, ranks, rank, sweepMicro), lr, 0.5)
		if err != nil {
			return nil, nil, err
		}
		res = append(res, r)
	}
	w, err := m.GatherWeights()
	return res, w, err
}

// sweepGrids lists every grid of at most 16 ranks, more than one, with
// each axis 1, 2 or 4.
func sweepGrids() []comm.Grid {
	var out []comm.Grid
	for _, d := range []int{1, 2, 4} {
		for _, x := range []int{1, 2, 4} {
			for _, y := range []int{1, 2, 4} {
				for _, z := range []int{1, 2, 4} {
					if g := (comm.Grid{Data: d, X: x, Y: y, Z: z}); g.Size() > 1 && g.Size() <= 16 {
						out = append(out, g)
					}
				}
			}
		}
	}
	return out
}

// TestGridTrainingEqualsOneRank is the 4D engine's acceptance: on every
// grid of up to 16 in-process ranks with each axis 1, 2 or 4, with
// overlap on and off (and recomputation on every other grid), five AdamW
// steps (clipping, weight decay, goldfish masks, accumulation over two
// micro-batches) give per-step losses within 1e-5 relative of one rank's,
// and five SGD steps give final weights within ‖ΔW‖/‖W‖ ≤ 1e-5 per tensor.
func TestGridTrainingEqualsOneRank(t *testing.T) {
	if testing.Short() {
		t.Skip("the grid sweep takes about a minute")
	}
	cfg := sweepConfig()
	weights := checkpoints.RandomWeights(cfg, 3)
	batches := sweepBatches(cfg)
	adamw := OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	sgd := OptimizerConfig{Name: "sgd", WeightDecay: 0.1}
	type optRun struct {
		name string
		oc   OptimizerConfig
		lr   float64
	}
	runs := []optRun{{"adamw", adamw, 1e-3}, {"sgd", sgd, 0.5}}
	refLoss := map[string][]StepResult{}
	refWeights := map[string][]checkpoints.Tensor{}
	for _, r := range runs {
		res, w, err := sweepRun(cfg, weights, batches, r.oc, r.lr, nil, llama.RecomputeNone)
		if err != nil {
			t.Fatal(err)
		}
		refLoss[r.name], refWeights[r.name] = res, w
	}
	start := time.Now()
	var worstLoss, worstWeight float64
	for i, shape := range sweepGrids() {
		for _, ov := range []parallel.Overlap{{}, parallel.AllOverlap()} {
			recompute := []llama.Recompute{llama.RecomputeNone, llama.RecomputeFull, llama.RecomputeSelective}[i%3]
			for _, r := range runs {
				name := fmt.Sprintf("%v/%v/recompute=%v/%s", shape, ov, recompute, r.name)
				var mu sync.Mutex
				err := launch.Local(shape, ov, func(g *parallel.Grid) error {
					res, w, err := sweepRun(cfg, weights, batches, r.oc, r.lr, g, recompute)
					if err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					want := refLoss[r.name]
					if len(res) != len(want) {
						return fmt.Errorf("rank %d: %d steps, want %d", g.Rank(), len(res), len(want))
					}
					for s := range want {
						if res[s].Weight != want[s].Weight || res[s].Clipped != want[s].Clipped {
							t.Errorf("%s rank %d step %d: %+v, want %+v", name, g.Rank(), s+1, res[s], want[s])
						}
					}
					loss := func(r StepResult) float64 { return r.Loss }
					if d, err := numtest.Measure(column(res, loss), column(want, loss)); err == nil {
						worstLoss = max(worstLoss, d.MaxRel)
					}
					for _, c := range []struct {
						field string
						of    func(StepResult) float64
						rel   float64
					}{
						{"loss", loss, 1e-5},
						{"loss over all targets", func(r StepResult) float64 { return r.LossAll }, 1e-5},
						{"gradient norm", func(r StepResult) float64 { return r.GradNorm }, 1e-4},
					} {
						if err := numtest.Close(column(res, c.of), column(want, c.of), numtest.Tol{Rel: c.rel}); err != nil {
							t.Errorf("%s rank %d: %s per step: %v", name, g.Rank(), c.field, err)
						}
					}
					if r.name != "sgd" || g.Rank() != 0 {
						return nil
					}
					err = numtest.Each(tensorsByName(w), tensorsByName(refWeights[r.name]), func(got, want []float32) error {
						if d, err := numtest.Measure(got, want); err == nil {
							worstWeight = max(worstWeight, d.L2)
						}
						return numtest.CloseL2(got, want, 1e-5)
					})
					if err != nil {
						t.Errorf("%s: ‖ΔW‖/‖W‖: %v", name, err)
					}
					return nil
				})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	}
	t.Logf("%d grids × 2 overlaps × AdamW and SGD in %v: worst loss difference %.3g of the largest loss, worst ‖ΔW‖/‖W‖ %.3g",
		len(sweepGrids()), time.Since(start).Round(time.Millisecond), worstLoss, worstWeight)
}

// sweepFolders writes the sweep model as a checkpoint folder and a
// dataset of random pre-tokenized documents (of varied lengths, so that
// some sequences end in padding) with a holdout split.
func sweepFolders(t *testing.T) (model, dataset string) {
	t.Helper()
	cfg := sweepConfig()
	model = filepath.Join(t.TempDir(), "model")
	if err := checkpoints.Save(model, cfg, checkpoints.RandomWeights(cfg, 5), checkpoints.SaveOptions{DType: checkpoints.DTypeF32}); err != nil {
		t.Fatal(err)
	}
	dataset = filepath.Join(t.TempDir(), "data")
	w, err := data.CreateStore(dataset, data.TokenizerInfo{SHA256: "none", VocabSize: cfg.VocabSize, BOS: -1, EOS: -1},
		data.Settings{Mode: data.ModeDocument, SeqLen: sweepT})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 72; i++ {
		doc := data.Document{Source: "random", Line: int64(i + 1), IDs: make([]int32, 4+r.IntN(sweepT))}
		for j := range doc.IDs {
			doc.IDs[j] = int32(r.IntN(cfg.VocabSize))
		}
		doc.Split = data.Train
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
	return model, dataset
}

// trainRun runs a fine-tuning run on a grid (nil: one rank), resuming from
// resume if not empty, and returns rank 0's metrics.
func trainRun(t *testing.T, cfg Config, shape *comm.Grid, resume string, stopAfter int) []Metrics {
	t.Helper()
	var metrics []Metrics
	run := func(g *parallel.Grid) error {
		r, err := OpenParallel(cfg, cpu.New(cpu.Options{Threads: 1}), g, resume)
		if err != nil {
			return err
		}
		defer r.Close()
		r.StopAfter = stopAfter
		var buf bytes.Buffer
		if err := r.Train(&buf, nil); err != nil {
			return err
		}
		if g == nil || g.Rank() == 0 {
			dec := json.NewDecoder(&buf)
			for dec.More() {
				var m Metrics
				if err := dec.Decode(&m); err != nil {
					return err
				}
				metrics = append(metrics, m)
			}
		} else if buf.Len() != 0 {
			return fmt.Errorf("rank %d wrote metrics", g.Rank())
		}
		return nil
	}
	var err error
	if shape == nil {
		err = run(nil)
	} else {
		err = launch.Local(*shape, parallel.AllOverlap(), run)
	}
	if err != nil {
		t.Fatal(err)
	}
	return metrics
}

// trainRank is trainRun through TrainRank, the CLI's and the runner's
// way in (the run folder, its lock, the final export).
func trainRank(t *testing.T, cfg Config, shape *comm.Grid, resume string, stopAfter int) []Metrics {
	t.Helper()
	var metrics []Metrics
	run := func(g *parallel.Grid) error {
		_, err := TrainRank(cfg, cpu.New(cpu.Options{Threads: 1}), g, Hooks{Resume: resume, StopAfter: stopAfter,
			Progress: func(m Metrics) { metrics = append(metrics, m) }})
		return err
	}
	var err error
	if shape == nil {
		err = run(nil)
	} else {
		err = launch.Local(*shape, parallel.AllOverlap(), run)
	}
	if err != nil {
		t.Fatal(err)
	}
	return metrics
}

// TestGridRunResumesOnAnotherGrid: a run of 4 steps on one rank, and the
// same run stopped after 2 steps on one grid and resumed on another, give
// the same metrics (losses, goldfish drops, gradient norms, evaluation).
func TestGridRunResumesOnAnotherGrid(t *testing.T) {
	model, dataset := sweepFolders(t)
	cfg := DefaultConfig()
	cfg.Model, cfg.Data = model, dataset
	cfg.Loss = "goldfish"
	cfg.Goldfish = goldfish.Config{Strategy: goldfish.HashTable, K: 3, H: 2}
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps = 8, 4, 4
	cfg.EvalEvery, cfg.SaveEvery = 2, 2
	cfg.Schedule.LR = 1e-3

	cfg.Out = filepath.Join(t.TempDir(), "one")
	want := trainRun(t, cfg, nil, "", 0)

	cfg.Out = filepath.Join(t.TempDir(), "grids")
	first := trainRun(t, cfg, &comm.Grid{Data: 2, X: 2, Y: 2, Z: 2}, "", 2)
	second := trainRun(t, cfg, &comm.Grid{Data: 1, X: 2, Y: 4, Z: 1}, cfg.Out, 0)
	got := append(first, second...)
	if len(got) != len(want) {
		t.Fatalf("%d metrics lines, want %d", len(got), len(want))
	}
	for _, m := range want {
		t.Logf("one rank: step %d loss %.6f dropped %.3f grad norm %.4f eval %.6f", m.Step, m.Loss, m.DroppedFrac, m.GradNorm, m.EvalLoss)
	}
	for i, w := range want {
		g := got[i]
		if g.Kept != w.Kept || g.Targets != w.Targets || g.DroppedFrac != w.DroppedFrac {
			t.Errorf("step %d: grid %+v\none rank %+v", w.Step, g, w)
		}
	}
	checkMetrics(t, "grid against one rank", got, want, map[string]float64{"loss": 1e-5, "loss_all": 1e-5, "grad_norm": 1e-5, "eval_loss": 1e-5})
	// The final checkpoints hold the same weights.
	err := numtest.Each(checkpointTensors(t, got[len(got)-1].CheckpointDir), checkpointTensors(t, want[len(want)-1].CheckpointDir),
		func(g, w []float32) error { return numtest.CloseL2(g, w, 1e-5) })
	if err != nil {
		t.Errorf("saved weights, ‖ΔW‖/‖W‖: %v", err)
	}
}

// column is one float field of each of a run's records (metrics lines,
// step results), for numtest.
func column[T any](records []T, field func(T) float64) []float64 {
	out := make([]float64, len(records))
	for i, r := range records {
		out[i] = field(r)
	}
	return out
}

// metricsFields are the float fields of a metrics line that checkMetrics
// compares, by their JSON names.
var metricsFields = map[string]func(Metrics) float64{
	"loss":      func(m Metrics) float64 { return m.Loss },
	"loss_all":  func(m Metrics) float64 { return m.LossAll },
	"grad_norm": func(m Metrics) float64 { return m.GradNorm },
	"eval_loss": func(m Metrics) float64 { return m.EvalLoss },
}

// checkMetrics checks got's metrics lines against want's: the same steps,
// and each field named in rel (metricsFields) over the run's steps within
// its relative tolerance (numtest.Close with Tol{Rel}; a step that did not
// evaluate has eval_loss 0 on both sides).
func checkMetrics(t *testing.T, name string, got, want []Metrics, rel map[string]float64) {
	t.Helper()
	steps := func(ms []Metrics) []int {
		out := make([]int, len(ms))
		for i, m := range ms {
			out[i] = m.Step
		}
		return out
	}
	if g, w := steps(got), steps(want); !slices.Equal(g, w) {
		t.Errorf("%s: steps %v, want %v", name, g, w)
		return
	}
	for _, f := range slices.Sorted(maps.Keys(rel)) {
		of, ok := metricsFields[f]
		if !ok {
			t.Fatalf("%s: no metrics field %q", name, f)
		}
		if err := numtest.Close(column(got, of), column(want, of), numtest.Tol{Rel: rel[f]}); err != nil {
			t.Errorf("%s: %s per step: %v", name, f, err)
		}
	}
}

// tensorsByName is a set of tensors by name, for numtest.Each.
func tensorsByName(ts []checkpoints.Tensor) map[string][]float32 {
	out := make(map[string][]float32, len(ts))
	for _, x := range ts {
		out[x.Name] = x.Data
	}
	return out
}

// checkpointTensors loads a checkpoint's weights by name, for numtest.Each.
func checkpointTensors(t *testing.T, dir string) map[string][]float32 {
	t.Helper()
	c, err := checkpoints.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ts, err := c.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return tensorsByName(ts)
}
