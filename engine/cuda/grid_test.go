package cuda

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/comm/local"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/numtest"
)

// The 4D engine on GPUs: one backend a rank, a NCCL world over them split
// into the grid's groups, and the engine code of the CPU grids unchanged.

// gridConfig is a small Llama that every axis of 2 divides: hidden 32,
// 4 query and 2 key/value heads, intermediate 64, vocabulary 64.
func gridConfig() *checkpoints.Config {
	c := &checkpoints.Config{
		HiddenSize: 32, IntermediateSize: 64, NumHiddenLayers: 2, NumAttentionHeads: 4, NumKeyValueHeads: 2,
		RMSNormEps: 1e-5, RopeTheta: 10000, MaxPositionEmbeddings: 32, VocabSize: 64,
		TorchDType: "float32", HiddenAct: "silu", InitializerRange: 0.1,
	}
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

// Grid training sizes: global batches of 8 sequences of 8 tokens in two
// micro-batches of 4, for 3 AdamW steps.
const (
	gridSteps = 3
	gridBatch = 8
	gridMicro = 4
	gridT     = 8
)

// gridBatches are random global batches, some sequences ending in
// padding.
func gridBatches(cfg *checkpoints.Config) []llama.Batch {
	r := rand.New(rand.NewPCG(11, 3))
	var out []llama.Batch
	for range gridSteps {
		n := gridBatch * gridT
		b := llama.Batch{B: gridBatch, T: gridT, IDs: make([]int32, n), Targets: make([]int32, n), Weights: make([]float32, n)}
		for i := range n {
			b.IDs[i], b.Targets[i] = int32(r.IntN(cfg.VocabSize)), int32(r.IntN(cfg.VocabSize))
			if t := i % gridT; i/gridT%3 != 0 || t < 5 {
				b.Weights[i] = 1
			} else {
				b.Targets[i] = -1
			}
		}
		out = append(out, b)
	}
	return out
}

// gridShare is a rank's share of a global batch, in micro-batches: its
// contiguous block of sequences, as finetune's loader cuts it.
func gridShare(b llama.Batch, ranks, rank int) []llama.Batch {
	per, mb := b.B/ranks, gridMicro/ranks
	var out []llama.Batch
	for s := rank * per; s < (rank+1)*per; s += mb {
		lo, hi := s*b.T, (s+mb)*b.T
		out = append(out, llama.Batch{B: mb, T: b.T, IDs: b.IDs[lo:hi], Targets: b.Targets[lo:hi], Weights: b.Weights[lo:hi]})
	}
	return out
}

// gridTrain trains on backend b as one rank of g (nil: alone) and
// returns each step's result.
func gridTrain(b engine.Backend, cfg *checkpoints.Config, weights []checkpoints.Tensor, batches []llama.Batch, g *parallel.Grid) ([]finetune.StepResult, error) {
	return gridTrainWith(b, cfg, weights, batches, llama.Options{Parallel: g})
}

// stepSeries returns the steps' losses and gradient norms.
func stepSeries(steps []finetune.StepResult) (loss, norm []float64) {
	loss, norm = []float64{}, []float64{}
	for _, s := range steps {
		loss, norm = append(loss, s.Loss), append(norm, s.GradNorm)
	}
	return loss, norm
}

// gridOptimizer is the grid tests' AdamW.
var gridOptimizer = finetune.OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}

// gridTrainWith is gridTrain with the model's options, opts.Parallel the
// grid.
func gridTrainWith(b engine.Backend, cfg *checkpoints.Config, weights []checkpoints.Tensor, batches []llama.Batch, opts llama.Options) ([]finetune.StepResult, error) {
	return gridTrainOptimizer(b, cfg, weights, batches, opts, gridOptimizer)
}

// gridTrainOptimizer is gridTrainWith with the optimizer's configuration.
func gridTrainOptimizer(b engine.Backend, cfg *checkpoints.Config, weights []checkpoints.Tensor, batches []llama.Batch, opts llama.Options, oc finetune.OptimizerConfig) ([]finetune.StepResult, error) {
	g := opts.Parallel
	m, err := llama.New(b, cfg, opts)
	if err != nil {
		return nil, err
	}
	defer m.Free()
	if err := m.SetWeights(weights); err != nil {
		return nil, err
	}
	o, err := finetune.NewOptimizer(b, m.Params(), oc)
	if err != nil {
		return nil, err
	}
	defer o.Free()
	ranks, rank := 1, 0
	if g != nil {
		ranks, rank = g.BatchRanks(), g.BatchRank()
	}
	var res []finetune.StepResult
	for step, batch := range batches {
		if g != nil {
			g.World.SetStep(step + 1)
		}
		r, err := finetune.TrainStep(m, o, gridShare(batch, ranks, rank), 1e-2, 1)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", step+1, err)
		}
		res = append(res, r)
	}
	return res, b.Synchronize()
}

// TestGridEmulated trains a small Llama for a few AdamW steps on grids of
// four fake GPUs with NCCL communicators (ncclCommInitAll, then
// ncclCommSplit for the groups), float32 GEMMs and overlap on, and checks
// that every rank's losses and gradient norms equal one CPU rank's within
// 1e-5 relative.
func TestGridEmulated(t *testing.T) {
	fakeCUDA(t)
	testGrid(t, newFake, 4)
}

// TestGPUGrid is TestGridEmulated on the machine's GPUs, up to four: on
// one GPU, a grid of one rank (NCCL's init and split, no peer).
func TestGPUGrid(t *testing.T) {
	n := needGPU(t)
	testGrid(t, newGPU, min(n, 4))
}

// testGrid trains on grids of devices ranks (4, 2 or 1), one a GPU, each
// axis 1 or 2.
func testGrid(t *testing.T, newBackend maker, devices int) {
	cfg := gridConfig()
	weights := checkpoints.RandomWeights(cfg, 5)
	batches := gridBatches(cfg)
	want, err := gridTrain(cpu.New(cpu.Options{Threads: 1}), cfg, weights, batches, nil)
	if err != nil {
		t.Fatal(err)
	}
	var shapes []comm.Grid
	switch {
	case devices >= 4:
		shapes = []comm.Grid{{Data: 2, X: 2, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 2, Z: 2}, {Data: 1, X: 2, Y: 2, Z: 1}}
	case devices >= 2:
		shapes = []comm.Grid{{Data: 2, X: 1, Y: 1, Z: 1}, {Data: 1, X: 2, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 1, Z: 2}}
	default:
		shapes = []comm.Grid{{Data: 1, X: 1, Y: 1, Z: 1}}
	}
	backends := make([]*Backend, shapes[0].Size())
	for i := range backends {
		backends[i] = newBackend(t, i, GemmF32)
	}
	for _, shape := range shapes {
		t.Run(fmt.Sprintf("dp=%d,x=%d,y=%d,z=%d", shape.Data, shape.X, shape.Y, shape.Z), func(t *testing.T) {
			worlds, err := NewNCCLGroup(backends)
			if err != nil {
				t.Fatal(err)
			}
			got := make([][]finetune.StepResult, len(backends))
			err = parallel.LaunchWorlds(worlds, shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
				res, err := gridTrain(backends[g.Rank()], cfg, weights, batches, g)
				got[g.Rank()] = res
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			var worst float64
			for r, res := range got {
				loss, norm := stepSeries(res)
				wantLoss, wantNorm := stepSeries(want)
				if err := numtest.Close(loss, wantLoss, numtest.Tol{Rel: 1e-5}); err != nil {
					t.Errorf("rank %d: step losses against one CPU rank's: %v", r, err)
				}
				if err := numtest.Close(norm, wantNorm, numtest.Tol{Rel: 1e-5}); err != nil {
					t.Errorf("rank %d: gradient norms against one CPU rank's: %v", r, err)
				}
				for s := range min(len(res), len(want)) {
					if res[s].Weight != want[s].Weight {
						t.Errorf("rank %d step %d: weight %v, one CPU rank %v", r, s+1, res[s].Weight, want[s].Weight)
					}
				}
				dl, _ := numtest.Measure(loss, wantLoss)
				dg, _ := numtest.Measure(norm, wantNorm)
				worst = max(worst, dl.MaxRel, dg.MaxRel)
			}
			t.Logf("largest difference from one CPU rank, relative to the largest value: %.2g", worst)
		})
	}
}

// TestGridBF16Emulated: mixed precision on grids of four fake GPUs —
// the Z all-gathers of bf16 weight copies, the X and Y sums of float32
// partial products rounded once, the vocabulary-parallel loss, over NCCL
// (ncclBfloat16 and ncclFloat32) — trains as the same grid of CPU ranks
// over in-process communicators does: every rank's step losses and
// gradient norms within the bf16 step tolerance of the loss, u/8
// relative (bf16StepLossTol: the two round the same float32 values,
// summed in other orders, and only now and then to neighbouring bf16
// numbers; measured: at most 1.8e-5, 8.5e-5 on grids of two). The steps are bf16's: their losses
// differ from a float32 rank's by more than float32 rounding, and the Z
// all-gathers are of bf16 (and only they: every sum is float32). Every
// rank's NCCL calls keep NCCL's order rules (checkNCCLOrder,
// checkNCCLStreams).
func TestGridBF16Emulated(t *testing.T) {
	testGridBF16(t, newFake, 4, fakeNCCLLog(t))
}

// TestGPUGridBF16 is TestGridBF16Emulated on the machine's GPUs, two or
// four, without the NCCL log (cuBLAS sums in its own order: the
// tolerance allows for more neighbouring roundings).
func TestGPUGridBF16(t *testing.T) {
	n := needGPU(t)
	if n < 2 {
		t.Skip("a grid of bf16 ranks needs two GPUs")
	}
	testGridBF16(t, newGPU, min(n, 4), nil)
}

// testGridBF16 trains in mixed precision on grids of devices ranks (4 or
// 2), one a GPU, against the same grids of CPU ranks; log, when not nil,
// is the fake NCCL's, whose calls it checks.
func testGridBF16(t *testing.T, newBackend maker, devices int, log *ncclLog) {
	cfg := gridConfig()
	weights := checkpoints.RandomWeights(cfg, 5)
	// Two steps: the second's loss and gradients are of weights the
	// first updated. A third adds nothing the test needs and drifts: at
	// AdamW's ε = 1e-8 an update is about lr·sign(g), so a gradient
	// element near zero whose sign a rounding flipped moves its weight
	// by 2·lr, and such differences grow with the steps (measured 3.4e-4
	// at a third step).
	batches := gridBatches(cfg)[:2]
	f32, err := gridTrain(cpu.New(cpu.Options{Threads: 1}), cfg, weights, batches, nil)
	if err != nil {
		t.Fatal(err)
	}
	f32Loss, _ := stepSeries(f32)
	shapes := []comm.Grid{{Data: 1, X: 2, Y: 1, Z: 2}, {Data: 1, X: 1, Y: 2, Z: 2}}
	if devices < 4 {
		shapes = []comm.Grid{{Data: 1, X: 2, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 2, Z: 1}, {Data: 1, X: 1, Y: 1, Z: 2}}
	}
	backends := make([]*Backend, shapes[0].Size())
	for i := range backends {
		backends[i] = newBackend(t, i, GemmF32)
	}
	for _, shape := range shapes {
		t.Run(fmt.Sprintf("dp=%d,x=%d,y=%d,z=%d", shape.Data, shape.X, shape.Y, shape.Z), func(t *testing.T) {
			run := func(worlds []comm.Comm, backend func(rank int) engine.Backend) [][]finetune.StepResult {
				got := make([][]finetune.StepResult, shape.Size())
				err := parallel.LaunchWorlds(worlds, shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
					res, err := gridTrainWith(backend(g.Rank()), cfg, weights, batches, llama.Options{Parallel: g, Activations: engine.BF16})
					got[g.Rank()] = res
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			want := run(local.New(shape.Size()), func(int) engine.Backend { return cpu.New(cpu.Options{Threads: 1}) })
			if log != nil {
				log.start()
			}
			worlds, err := NewNCCLGroup(backends)
			if err != nil {
				t.Fatal(err)
			}
			got := run(worlds, func(r int) engine.Backend { return backends[r] })
			seqs := make([][]ncclOp, len(backends))
			for d := range seqs {
				if log == nil {
					break
				}
				seqs[d] = log.sequence(t, d)
				gathers := 0
				for _, o := range seqs[d] {
					switch {
					case o.DType == ncclBfloat16 && o.Op != "all-gather":
						t.Errorf("device %d: a bf16 %s (only the Z all-gathers move bf16): %v", d, o.Op, o)
					case o.DType == ncclBfloat16:
						gathers++
					}
				}
				if shape.Z > 1 && gathers == 0 {
					t.Errorf("device %d: no bf16 all-gather", d)
				}
			}
			if log != nil {
				if err := checkNCCLOrder(seqs); err != nil {
					t.Error(err)
				}
				if err := checkNCCLStreams(seqs); err != nil {
					t.Error(err)
				}
			}
			var worst float64
			for r := range got {
				loss, norm := stepSeries(got[r])
				wantLoss, wantNorm := stepSeries(want[r])
				if err := numtest.Close(loss, wantLoss, numtest.Tol{Rel: bf16StepLossTol}); err != nil {
					t.Errorf("rank %d: step losses against the CPU grid's: %v", r, err)
				}
				if err := numtest.Close(norm, wantNorm, numtest.Tol{Rel: bf16StepLossTol}); err != nil {
					t.Errorf("rank %d: gradient norms against the CPU grid's: %v", r, err)
				}
				dl, _ := numtest.Measure(loss, wantLoss)
				dg, _ := numtest.Measure(norm, wantNorm)
				worst = max(worst, dl.MaxRel, dg.MaxRel)
			}
			wantLoss, _ := stepSeries(want[0])
			if numtest.Close(wantLoss, f32Loss, numtest.Tol{Rel: 1e-5}) == nil {
				t.Errorf("bf16 step losses %v are float32's %v", wantLoss, f32Loss)
			}
			t.Logf("largest difference from the CPU grid, relative to the largest value: %.2g", worst)
		})
	}
}
