package finetune

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	"github.com/memtrain/memtrain/internal/options"
	"github.com/spf13/pflag"
)

// fusedSteps are the steps of a fused-optimizer comparison: enough for
// the moments to matter (bias correction changes from step to step).
const fusedSteps = 3

// fusedCase is one comparison of a fused optimizer step with the
// unfused one.
type fusedCase struct {
	grid      comm.Grid // the zero Grid: one rank, no llama.Options.Parallel
	tie       bool
	act       engine.DType
	split     bool   // split masters (bf16 only)
	moments   string // optimizer.moments
	clip      float64
	recompute llama.Recompute
}

func (c fusedCase) String() string {
	return fmt.Sprintf("%v/tie=%v/%v/split=%v/moments=%s/clip=%v/recompute=%v", c.grid, c.tie, c.act, c.split, c.moments, c.clip, c.recompute)
}

// fusedRun trains fusedSteps steps of one micro-batch each on one rank of
// g (nil: one rank alone), with the optimizer fused into the backward or
// not, and returns what the rank ends with: its results, its pass
// weights, its moments (whole, of its shards) and on rank 0 the gathered
// masters.
func fusedRun(cfg *checkpoints.Config, weights []checkpoints.Tensor, batches []llama.Batch, c fusedCase, g *parallel.Grid, fused bool) (zeroRank, error) {
	var out zeroRank
	b := cpu.New(cpu.Options{Threads: 1})
	m, err := llama.New(b, cfg, llama.Options{Parallel: g, Activations: c.act, SplitMaster: c.split, Recompute: c.recompute, FusedOptimizer: fused})
	if err != nil {
		return out, err
	}
	defer m.Free()
	if err := m.SetWeights(weights); err != nil {
		return out, err
	}
	oc := zeroOptimizer
	oc.Moments, oc.Seed = c.moments, 5
	o, err := NewOptimizer(b, m.Trainable(), oc)
	if err != nil {
		return out, err
	}
	defer o.Free()
	ranks, rank := 1, 0
	if g != nil {
		ranks, rank = g.BatchRanks(), g.BatchRank()
	}
	for step, batch := range batches {
		if g != nil {
			g.World.SetStep(step + 1)
		}
		r, err := TrainStep(m, o, shareOf(batch, ranks, rank, batch.B), 1e-2, c.clip)
		if err != nil {
			return out, err
		}
		out.res = append(out.res, r)
	}
	out.m, out.v, out.copies = map[string][]float32{}, map[string][]float32{}, map[string][]float32{}
	for i, p := range m.Trainable() {
		for k, into := range []map[string][]float32{out.m, out.v} {
			t, done := o.moment(i, k+1) // 8-bit moments decoded
			into[p.Name] = download(b, t)
			done()
		}
		out.copies[p.Name] = download(b, passWeight(p))
	}
	w, err := m.GatherWeights()
	if err == nil && (g == nil || g.Rank() == 0) {
		out.weights = tensorsByName(w)
	}
	return out, err
}

// fusedRanks runs c's grid (one rank alone for the zero Grid) and returns
// each rank's fusedRun.
func fusedRanks(t *testing.T, cfg *checkpoints.Config, weights []checkpoints.Tensor, batches []llama.Batch, c fusedCase, fused bool) map[int]zeroRank {
	t.Helper()
	out := map[int]zeroRank{}
	if c.grid == (comm.Grid{}) {
		r, err := fusedRun(cfg, weights, batches, c, nil, fused)
		if err != nil {
			t.Fatalf("%v fused=%v: %v", c, fused, err)
		}
		out[0] = r
		return out
	}
	var mu sync.Mutex
	err := launch.Local(c.grid, parallel.AllOverlap(), func(g *parallel.Grid) error {
		r, err := fusedRun(cfg, weights, batches, c, g, fused)
		mu.Lock()
		defer mu.Unlock()
		out[g.Rank()] = r
		return err
	})
	if err != nil {
		t.Fatalf("%v fused=%v: %v", c, fused, err)
	}
	return out
}

// TestFusedOptimizerExact: the AdamW step fused into the backward
// (llama.Options.FusedOptimizer), one micro-batch a step, is bit for bit
// the unfused step: every rank's losses, gradient norms and clipping,
// its pass weights (the bf16 copies in mixed precision), its moments,
// and the gathered float32 masters — with clipping (through the norm-only
// pass) and without, in float32 and mixed precision, with split masters
// and 8-bit or bf16 moments, with full and selective recomputation, tied
// and untied embeddings, on one rank and on data, X·Z, Y·Z and data·Z
// grids (the last with split masters and selective recomputation too).
func TestFusedOptimizerExact(t *testing.T) {
	var cases []fusedCase
	for _, clip := range []float64{0, 0.5} {
		for _, tie := range []bool{false, true} {
			cases = append(cases,
				fusedCase{tie: tie, act: engine.F32, moments: "fp32", clip: clip},
				fusedCase{tie: tie, act: engine.BF16, moments: "fp32", clip: clip},
				fusedCase{tie: tie, act: engine.BF16, split: true, moments: "int8", clip: clip},
				fusedCase{tie: tie, act: engine.BF16, moments: "bf16", clip: clip, recompute: llama.RecomputeFull},
				fusedCase{tie: tie, act: engine.F32, moments: "fp32", clip: clip, recompute: llama.RecomputeSelective})
			for _, g := range []comm.Grid{{Data: 2, X: 1, Y: 1, Z: 1}, {Data: 1, X: 2, Y: 1, Z: 2}, {Data: 1, X: 1, Y: 2, Z: 2}, {Data: 2, X: 1, Y: 1, Z: 2}} {
				for _, act := range []engine.DType{engine.F32, engine.BF16} {
					cases = append(cases, fusedCase{grid: g, tie: tie, act: act, moments: "fp32", clip: clip})
				}
				if g.Z > 1 && g.Data > 1 {
					cases = append(cases, fusedCase{grid: g, tie: tie, act: engine.BF16, split: true, moments: "int8", clip: clip},
						fusedCase{grid: g, tie: tie, act: engine.F32, moments: "fp32", clip: clip, recompute: llama.RecomputeSelective})
				}
			}
		}
	}
	clipped := false
	for _, c := range cases {
		cfg := sweepConfig()
		cfg.TieWordEmbeddings = c.tie
		weights := checkpoints.RandomWeights(cfg, 3)
		batches := sweepBatches(cfg)[:fusedSteps]
		want := fusedRanks(t, cfg, weights, batches, c, false)
		got := fusedRanks(t, cfg, weights, batches, c, true)
		for rank, w := range want {
			g := got[rank]
			if len(g.res) != fusedSteps {
				t.Fatalf("%v rank %d: %d steps", c, rank, len(g.res))
			}
			for _, f := range []struct {
				what string
				f    func(StepResult) float64
			}{
				{"loss", func(r StepResult) float64 { return r.Loss }},
				{"reported loss", func(r StepResult) float64 { return r.LossAll }},
				{"gradient norm", func(r StepResult) float64 { return r.GradNorm }},
				{"clipped", func(r StepResult) float64 { return map[bool]float64{true: 1}[r.Clipped] }},
			} {
				if err := numtest.Equal(column(g.res, f.f), column(w.res, f.f)); err != nil {
					t.Errorf("%v rank %d: %s: %v", c, rank, f.what, err)
				}
			}
			for _, r := range w.res {
				clipped = clipped || r.Clipped
			}
			compare := map[string][2]map[string][]float32{"pass weights": {g.copies, w.copies}, "m": {g.m, w.m}, "v": {g.v, w.v}}
			if rank == 0 {
				compare["masters"] = [2]map[string][]float32{g.weights, w.weights}
			}
			for what, mm := range compare {
				if err := numtest.Each(mm[0], mm[1], numtest.Equal[float32]); err != nil {
					t.Errorf("%v rank %d: %s: %v", c, rank, what, err)
				}
			}
		}
	}
	if !clipped {
		t.Error("no step clipped: the clipped cases do not test the norm-only pass's coefficient")
	}
}

// TestFusedOptimizerNonFinite: a fused step whose loss is not finite
// changes nothing, nor with clipping one whose gradient norm is not
// (the norm-only pass knows it first), and returns ErrNonFinite; without
// clipping a non-finite gradient norm is met unit by unit: the error
// wraps ErrPartialStep too (so a run stops on it as on ErrNonFinite),
// the unit whose gradient is not finite — the LM head, here — keeps its
// weights, and nothing becomes NaN or infinite. On one rank and on a
// data·Z grid.
func TestFusedOptimizerNonFinite(t *testing.T) {
	cfg := sweepConfig()
	batch := sweepBatches(cfg)[0]
	overflow := batch
	overflow.Weights = append([]float32(nil), batch.Weights...)
	overflow.Weights[1] = 1e38 // the loss overflows
	cases := []struct {
		name    string
		batch   llama.Batch
		norm    float32 // the final norm's first weight: 1e25 overflows the head's squared norm, not the loss
		clip    float64
		partial bool
	}{
		{"loss, clip 0", overflow, 1, 0, false},
		{"loss, clip 1", overflow, 1, 1, false},
		{"norm, clip 1", batch, 1e25, 1, false},
		{"norm, clip 0", batch, 1e25, 0, true},
	}
	for _, shape := range []comm.Grid{{}, {Data: 2, X: 1, Y: 1, Z: 2}} {
		for _, c := range cases {
			weights := checkpoints.RandomWeights(cfg, 3)
			for _, w := range weights {
				if w.Name == checkpoints.FinalNormName {
					w.Data[0] = c.norm
				}
			}
			run := func(g *parallel.Grid) error {
				b := cpu.New(cpu.Options{Threads: 1})
				m, err := llama.New(b, cfg, llama.Options{Parallel: g, FusedOptimizer: true})
				if err != nil {
					return err
				}
				defer m.Free()
				if err := m.SetWeights(weights); err != nil {
					return err
				}
				o, err := NewOptimizer(b, m.Trainable(), zeroOptimizer)
				if err != nil {
					return err
				}
				defer o.Free()
				state := func() map[string][]float32 {
					out := map[string][]float32{}
					mv, vv := o.Moments()
					for i, p := range m.Trainable() {
						out[p.Name] = download(b, p.Value)
						out["m "+p.Name], out["v "+p.Name] = download(b, mv[i]), download(b, vv[i])
					}
					return out
				}
				before := state()
				ranks, rank := 1, 0
				if g != nil {
					ranks, rank = g.BatchRanks(), g.BatchRank()
				}
				_, err = TrainStep(m, o, shareOf(c.batch, ranks, rank, c.batch.B), 1e-2, c.clip)
				if !errors.Is(err, ErrNonFinite) || errors.Is(err, ErrPartialStep) != c.partial {
					return fmt.Errorf("TrainStep: %v, want ErrNonFinite, ErrPartialStep %v", err, c.partial)
				}
				after := state()
				if !c.partial {
					if o.Step != 0 {
						return fmt.Errorf("optimizer step %d after a skipped step", o.Step)
					}
					return numtest.Each(after, before, numtest.Equal[float32])
				}
				head := m.Head.Name
				if err := numtest.Equal(after[head], before[head]); err != nil {
					return fmt.Errorf("the LM head, whose gradient is not finite, changed: %w", err)
				}
				changed := false
				for name, v := range after {
					for _, x := range v {
						if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
							return fmt.Errorf("%s holds %v after a partial step", name, x)
						}
					}
					changed = changed || numtest.Equal(v, before[name]) != nil
				}
				if !changed {
					return errors.New("a partial step changed nothing: the test does not reach a unit with a finite gradient")
				}
				return nil
			}
			var err error
			if shape == (comm.Grid{}) {
				err = run(nil)
			} else {
				err = launch.Local(shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
					if err := run(g); err != nil {
						return fmt.Errorf("rank %d: %w", g.Rank(), err)
					}
					return nil
				})
			}
			if err != nil {
				t.Errorf("%v %s: %v", shape, c.name, err)
			}
		}
	}
}

// TestValidateFused: optimizer.fused is refused, in one line naming the
// key and what it wants, with more than one micro-batch a step, an
// optimizer other than AdamW, adapters or ZeRO; it is taken with one
// micro-batch, clipping, mixed precision, split masters and compact
// moments.
func TestValidateFused(t *testing.T) {
	cases := []struct {
		args []string
		want string // "" for accepted
	}{
		{[]string{"--batch-size", "4", "--micro-batch", "4"}, ""},
		{[]string{"--batch-size", "4", "--micro-batch", "4", "--clip", "0", "--precision", "bf16", "--master", "split", "--optimizer.moments", "int8"}, ""},
		{[]string{"--batch-size", "8", "--micro-batch", "4"}, "finetune: optimizer.fused: true takes one micro-batch a step; batch_size 8 and micro_batch 4"},
		{[]string{"--batch-size", "4", "--micro-batch", "4", "--optimizer.name", "sgd"}, "finetune: optimizer.fused: true fuses AdamW's step into the backward; optimizer.name is sgd"},
		{[]string{"--batch-size", "4", "--micro-batch", "4", "--lora.rank", "8"}, "finetune: optimizer.fused: true is for full fine-tuning"},
		{[]string{"--batch-size", "4", "--micro-batch", "4", "--zero", "1"}, "finetune: optimizer.fused: true does not shard the moments over the data ranks; zero is 1"},
	}
	for _, c := range cases {
		cfg := DefaultConfig()
		cfg.Model, cfg.Data, cfg.Out = "m", "d", "o"
		fl := pflag.NewFlagSet("finetune", pflag.ContinueOnError)
		options.Bind(fl, &cfg)
		if err := fl.Parse(append([]string{"--optimizer.fused"}, c.args...)); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		err := cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: %v", c.args, err)
		case c.want != "" && (err == nil || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		case err != nil && strings.Contains(err.Error(), "\n"):
			t.Errorf("%v: %q is not one line", c.args, err)
		}
	}
}

// TestFusedRunResumes: a run with optimizer.fused, on a data-parallel
// grid of two ranks, writes the metrics and checkpoints of the same run
// unfused, bit for bit; stopped after a checkpoint and resumed unfused
// (its checkpoints hold what an unfused run's do) it goes on as the
// uninterrupted run.
func TestFusedRunResumes(t *testing.T) {
	cfg := shortRun(t)
	cfg.BatchSize = cfg.MicroBatch // one micro-batch a step
	grid := comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}
	root := t.TempDir()
	cfg.Out = filepath.Join(root, "unfused")
	want := trainRun(t, cfg, &grid, "", 0)
	cfg.Out = filepath.Join(root, "fused")
	cfg.Optimizer.Fused = true
	got := trainRun(t, cfg, &grid, "", 2)
	cfg.Optimizer.Fused = false
	got = append(got, trainRun(t, cfg, &grid, cfg.Out, 0)...)
	if len(got) != len(want) || len(want) == 0 {
		t.Fatalf("%d metrics lines, want %d", len(got), len(want))
	}
	for i := range want {
		w, g := want[i], got[i]
		w.TokensPerS, w.ModelFLOPsPS, g.TokensPerS, g.ModelFLOPsPS, w.SaveBlockedS, g.SaveBlockedS = 0, 0, 0, 0, 0, 0
		w.CheckpointDir, g.CheckpointDir = filepath.Base(w.CheckpointDir), filepath.Base(g.CheckpointDir)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("step %d: fused then resumed %+v\nunfused %+v", w.Step, g, w)
		}
	}
	for _, step := range []int{2, cfg.MaxSteps} { // the fused run's checkpoint, and the resumed run's last
		ck := filepath.Join(CheckpointsDir, StepName(step))
		sameTensorFiles(t, fmt.Sprintf("step %d", step), filepath.Join(root, "unfused", ck), filepath.Join(root, "fused", ck))
	}
}

// TestFusedRunStopsOnAPartialStep: a run whose fused step without
// clipping is applied in part (a non-finite gradient norm with a finite
// loss) stops on it, as on any non-finite loss, and saves nothing of it:
// no checkpoint of the step, the error naming the last good checkpoint.
func TestFusedRunStopsOnAPartialStep(t *testing.T) {
	_, dataset := sweepFolders(t)
	mc := sweepConfig()
	weights := checkpoints.RandomWeights(mc, 5)
	for _, w := range weights {
		if w.Name == checkpoints.FinalNormName {
			w.Data[0] = 1e25 // the LM head's squared gradient norm overflows, the loss does not
		}
	}
	model := filepath.Join(t.TempDir(), "model")
	if err := checkpoints.Save(model, mc, weights, checkpoints.SaveOptions{DType: checkpoints.DTypeF32}); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Model, cfg.Data, cfg.Out = model, dataset, filepath.Join(t.TempDir(), "run")
	cfg.BatchSize, cfg.MicroBatch, cfg.MaxSteps, cfg.SaveEvery, cfg.Clip = 4, 4, 3, 1, 0
	cfg.Optimizer.Fused = true
	r, err := OpenParallel(cfg, cpu.New(cpu.Options{Threads: 1}), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = r.Train(io.Discard, nil)
	if !errors.Is(err, ErrPartialStep) || !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "last good checkpoint") {
		t.Fatalf("Train: %v, want a stop on ErrPartialStep", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Out, CheckpointsDir, StepName(1))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the partial step's checkpoint: %v, want none", err)
	}
}
