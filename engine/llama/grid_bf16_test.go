package llama

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// oddGridConfig splits over X, Y and Z in threes: hidden 24, 6 query and
// 3 key/value heads of 4, intermediate 36, vocabulary 48; every weight
// block of a 3-way X or Y split also splits in two or three over Z.
func oddGridConfig() *checkpoints.Config {
	c := testConfig(false, 2)
	c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.IntermediateSize, c.VocabSize = 24, 6, 3, 36, 48
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

// trainedRun is what gridTrain reports: each step's global loss and the
// full-shape weights after the last step.
type trainedRun struct {
	losses  []float64
	weights map[string][]float32
}

// gridTrain trains a model of cfg from weights w for steps optimizer
// steps on global (oneStep: two micro-batches, the gradients reduced,
// then one fused AdamWStep over this rank's shards, which refreshes the
// bf16 copies) on one rank (shape the zero Grid) or on every rank of an
// in-process grid, and returns rank 0's run.
//
// AdamW's ε is 1, far above these gradients' √v̂, so that an update is
// about lr·m̂ — linear in the gradient — rather than lr·sign(g): a
// gradient element near zero whose sign a rounding flips would otherwise
// move its weight by 2·lr and hide the comparison behind noise.
func gridTrain(t *testing.T, shape comm.Grid, ov parallel.Overlap, cfg *checkpoints.Config, opt Options, w []checkpoints.Tensor, global Batch, steps int) trainedRun {
	t.Helper()
	var mu sync.Mutex
	var out trainedRun
	run := func(g *parallel.Grid) error {
		o := opt
		o.Parallel = g
		m, err := New(newBackend(1), cfg, o)
		if err != nil {
			return err
		}
		defer m.Free()
		if err := m.SetWeights(w); err != nil {
			return err
		}
		b := m.Backend()
		ts, ctl, free := adamWState(m)
		defer free()
		var losses []float64
		for s := 1; s <= steps; s++ {
			l, _, err := oneStep(m, global)
			if err != nil {
				return err
			}
			losses = append(losses, l.Sum/l.Weight)
			b.AdamWStep(ts, engine.AdamWParams{LR: 0.1, Beta1: 0.9, Beta2: 0.95, Eps: 1, Step: s}, 0, ctl)
		}
		var weights []checkpoints.Tensor
		if g == nil {
			weights = m.Weights()
		} else if weights, err = m.GatherWeights(); err != nil {
			return err
		}
		if g == nil || g.Rank() == 0 {
			mu.Lock()
			out = trainedRun{losses: losses, weights: map[string][]float32{}}
			for _, x := range weights {
				out.weights[x.Name] = x.Data
			}
			mu.Unlock()
		}
		return nil
	}
	var err error
	if shape == (comm.Grid{}) {
		err = run(nil)
	} else {
		err = launch.Local(shape, ov, run)
	}
	if err != nil {
		t.Fatalf("%v: %v", shape, err)
	}
	return out
}

// updates are the changes training made to the weights: the comparison
// of two runs from the same start is of what they learned, which the
// identical start would otherwise dwarf.
func updates(run trainedRun, start []checkpoints.Tensor) map[string][]float32 {
	out := map[string][]float32{}
	for _, s := range start {
		d := make([]float32, len(s.Data))
		for i, v := range run.weights[s.Name] {
			d[i] = v - s.Data[i]
		}
		out[s.Name] = d
	}
	return out
}

// Tolerances of a bf16 grid against one bf16 rank. Both round the same
// float32 values to bf16 (u = 2⁻⁸ relative), but not at the same places:
// one rank rounds each GEMM's output, the grid each sum over ranks of
// float32 partial products (once, where one rank's GEMMs into a bf16
// gradient that accumulates round at each), and its float32 sums run in
// another order. Each activation element then differs by at most a
// bf16 ulp or two (2u), and in the forward pass rarely at all: its sums
// are rounded once on both, and differ only where float32's other order
// puts a value on the other side of a rounding boundary. The loss of the
// first step, whose weights are the same, averages such rare flips over
// every token: within u/64 ≈ 6e-5 relative (measured at most 1.5e-6).
// Every later step starts from weights moved by gradients that differ by
// roundings, O(u) relative, so the differences grow with the steps:
//
//   - the loss of step s within (s−1)·u + u/64 relative (measured at
//     most 2.3e-3 at step 3, where the bound is 7.9e-3);
//   - the weights' updates after the steps (the start, identical,
//     would hide them) within 4u ≈ 1.6e-2 in relative L2 for all
//     together (measured at most 1.5e-2) and 8u per tensor;
//   - and no further from a float32 rank's updates than 1.25 times one
//     bf16 rank's distance to them (measured at most 1.09): the grid's
//     roundings are bf16's, not more of them.
//
// A grid that rounds each rank's partial products before their sum (a
// second rounding) fails these: its updates measure 3–4e-2 from one
// rank's, and up to 1.39 times one rank's distance from float32's.
//
// Data and Z alone round exactly as one rank does (their sums are of
// float32 weight gradients): their bf16 runs agree to 1e-6 like float32
// ones. Float32 grids keep the float32 tolerance of the other grid
// tests, 1e-5.
const (
	bf16U            = 0x1p-8
	bf16FirstLossTol = bf16U / 64
	bf16GridTotalTol = 4 * bf16U
	bf16GridTensTol  = 8 * bf16U
	bf16GridVsF32    = 1.25
	f32GridTol       = 1e-5
)

// concat joins the tensors of ups in the order of start.
func concat(ups map[string][]float32, start []checkpoints.Tensor) []float32 {
	var all []float32
	for _, s := range start {
		all = append(all, ups[s.Name]...)
	}
	return all
}

// TestGridBF16Training: on every grid shape of up to 16 in-process ranks
// (each axis alone, in pairs, all four, and shapes of three), a few
// optimizer steps in mixed precision give one bf16 rank's losses and
// weights within the tolerances above, and each reruns bit for bit; in
// float32 the same grids give one float32 rank's within 1e-5.
func TestGridBF16Training(t *testing.T) {
	const steps = 3
	type gridCase struct {
		shape comm.Grid
		ov    parallel.Overlap
	}
	all, none := parallel.AllOverlap(), parallel.Overlap{}
	pow := []gridCase{
		{comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}, all},
		{comm.Grid{Data: 1, X: 2, Y: 1, Z: 1}, all},
		{comm.Grid{Data: 1, X: 1, Y: 2, Z: 1}, all},
		{comm.Grid{Data: 1, X: 1, Y: 1, Z: 2}, none},
		{comm.Grid{Data: 1, X: 2, Y: 2, Z: 1}, none},
		{comm.Grid{Data: 1, X: 2, Y: 1, Z: 2}, all},
		{comm.Grid{Data: 1, X: 1, Y: 2, Z: 2}, all},
		{comm.Grid{Data: 1, X: 2, Y: 2, Z: 2}, all},
		{comm.Grid{Data: 2, X: 2, Y: 2, Z: 2}, all},
	}
	odd := []gridCase{
		{comm.Grid{Data: 3, X: 1, Y: 1, Z: 1}, all},
		{comm.Grid{Data: 1, X: 3, Y: 1, Z: 1}, all},
		{comm.Grid{Data: 1, X: 1, Y: 3, Z: 1}, all},
		{comm.Grid{Data: 1, X: 1, Y: 1, Z: 3}, all},
		{comm.Grid{Data: 1, X: 3, Y: 1, Z: 2}, all},
		{comm.Grid{Data: 1, X: 3, Y: 3, Z: 1}, all},
	}
	for _, set := range []struct {
		name  string
		cfg   *checkpoints.Config
		batch Batch
		grids []gridCase
	}{
		// 12 sequences: two micro-batches on each of up to 4 (data, z)
		// coordinates, or 3.
		{"powers of two", gridConfig(false), randomBatch(gridConfig(false), 12, 6, 3), pow},
		{"threes", oddGridConfig(), randomBatch(oddGridConfig(), 12, 6, 4), odd},
	} {
		cfg := set.cfg
		start := checkpoints.RandomWeights(cfg, 21)
		f32Up := concat(updates(gridTrain(t, comm.Grid{}, none, cfg, Options{}, start, set.batch, steps), start), start)
		for _, act := range []engine.DType{engine.BF16, engine.F32} {
			opt := Options{Activations: act}
			ref := gridTrain(t, comm.Grid{}, none, cfg, opt, start, set.batch, steps)
			refUp := updates(ref, start)
			refFromF32, err := numtest.Measure(concat(refUp, start), f32Up)
			if err != nil {
				t.Fatal(err)
			}
			for _, gc := range set.grids {
				name := fmt.Sprintf("%s/%v/%v/%v", set.name, act, gc.shape, gc.ov)
				got := gridTrain(t, gc.shape, gc.ov, cfg, opt, start, set.batch, steps)
				gotUp := updates(got, start)
				rounds := act == engine.BF16 && gc.shape.X*gc.shape.Y > 1
				for s := range steps {
					tol := f32GridTol
					if act == engine.BF16 {
						tol = 1e-6 // data and Z: the same roundings
					}
					if rounds {
						tol = bf16FirstLossTol + float64(s)*bf16U
					}
					if err := numtest.Scalar(got.losses[s], ref.losses[s], numtest.Tol{Rel: tol}); err != nil {
						t.Errorf("%s: loss of step %d: %v", name, s+1, err)
					}
				}
				total, tens := f32GridTol, f32GridTol
				if rounds {
					total, tens = bf16GridTotalTol, bf16GridTensTol
				}
				if err := numtest.EachL2(gotUp, refUp, tens); err != nil {
					t.Errorf("%s: weight updates: %v", name, err)
				}
				all, allRef := concat(gotUp, start), concat(refUp, start)
				if err := numtest.CloseL2(all, allRef, total); err != nil {
					t.Errorf("%s: all weight updates: %v", name, err)
				}
				fromF32, err := numtest.Measure(all, f32Up)
				if err != nil {
					t.Fatal(err)
				}
				fromRef, err := numtest.Measure(all, allRef)
				if err != nil {
					t.Fatal(err)
				}
				lossDiff, err := numtest.Measure(got.losses, ref.losses)
				if err != nil {
					t.Fatal(err)
				}
				if act == engine.BF16 && fromF32.L2 > bf16GridVsF32*refFromF32.L2 {
					t.Errorf("%s: updates %.3g from float32's (relative L2), %.3g× one bf16 rank's %.3g", name, fromF32.L2, fromF32.L2/refFromF32.L2, refFromF32.L2)
				}
				t.Logf("%s: step losses %.3g from one rank's (relative to the largest), updates %.3g (L2), %.3g from float32's (one rank: %.3g)",
					name, lossDiff.MaxRel, fromRef.L2, fromF32.L2, refFromF32.L2)
				again := gridTrain(t, gc.shape, gc.ov, cfg, opt, start, set.batch, steps)
				if err := numtest.Equal(again.losses, got.losses); err != nil {
					t.Errorf("%s: rerun losses: %v", name, err)
				}
				if err := numtest.Each(again.weights, got.weights, numtest.Equal[float32]); err != nil {
					t.Errorf("%s: rerun weights: %v", name, err)
				}
			}
		}
	}
}

// TestLoRABF16OnGrids: bf16 adapters on a bf16 base train on grids. One
// step's loss and adapter gradients equal one bf16 rank's: within the
// float32 tolerance, 1e-5, where only data and Z split the work (the
// base is gathered over Z in bf16 as one rank holds it, and the sums
// over ranks are of float32 gradients); within the bf16 grid tolerances
// above where X or Y split it (the loss of a first step within u/64; the
// adapters' dz and dropped inputs stay float32 there); with dropout and
// without.
func TestLoRABF16OnGrids(t *testing.T) {
	cfg := gridConfig(false)
	for _, tc := range []struct {
		shape   comm.Grid
		dropout float64
	}{
		{comm.Grid{Data: 1, X: 1, Y: 1, Z: 2}, 0.2},
		{comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, 0.2},
		{comm.Grid{Data: 1, X: 1, Y: 1, Z: 4}, 0},
		{comm.Grid{Data: 1, X: 2, Y: 1, Z: 2}, 0},
		{comm.Grid{Data: 1, X: 1, Y: 2, Z: 2}, 0},
		{comm.Grid{Data: 2, X: 2, Y: 2, Z: 2}, 0},
		{comm.Grid{Data: 1, X: 2, Y: 1, Z: 1}, 0.2},
		{comm.Grid{Data: 1, X: 1, Y: 2, Z: 2}, 0.2},
		{comm.Grid{Data: 2, X: 2, Y: 2, Z: 2}, 0.2},
	} {
		a := testAdapter(3, false, tc.dropout)
		opt := Options{LoRA: a, BaseDType: engine.BF16, Activations: engine.BF16}
		ref := scaledLoRAModel(t, newBackend(1), cfg, opt, 7, 0.3, 0.03)
		w, ad := ref.Weights(), ref.AdapterTensors()
		global := randomBatch(cfg, 8, 6, 3)
		global.Keys = []uint64{1, 2, 3, 4, 5, 6, 7, 8}
		want, wantGrads, err := oneStep(ref, global)
		ref.Free()
		if err != nil {
			t.Fatal(err)
		}
		lossTol, gradTol, totalTol := f32GridTol, f32GridTol, f32GridTol
		if tc.shape.X*tc.shape.Y > 1 {
			lossTol, gradTol, totalTol = bf16FirstLossTol, bf16GridTensTol, bf16GridTotalTol
		}
		name := fmt.Sprintf("%v/dropout=%v", tc.shape, tc.dropout)
		var mu sync.Mutex
		err = launch.Local(tc.shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
			o := opt
			o.Parallel = g
			m, err := New(newBackend(1), cfg, o)
			if err != nil {
				return err
			}
			defer m.Free()
			if err := m.SetWeights(w); err != nil {
				return err
			}
			if err := m.LoadAdapters(tensorReader(ad)); err != nil {
				return err
			}
			got, grads, err := oneStep(m, global)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if err := numtest.Scalar(got.Sum, want.Sum, numtest.Tol{Rel: lossTol}); err != nil || got.Weight != want.Weight {
				t.Errorf("%s rank %d: loss %v/%v, want %v/%v: %v", name, g.Rank(), got.Sum, got.Weight, want.Sum, want.Weight, err)
			}
			if err := numtest.EachL2(grads, wantGrads, gradTol); err != nil {
				t.Errorf("%s rank %d: gradients: %v", name, g.Rank(), err)
			}
			var all, allWant []float32
			for _, n := range slices.Sorted(maps.Keys(wantGrads)) {
				all, allWant = append(all, grads[n]...), append(allWant, wantGrads[n]...)
			}
			if err := numtest.CloseL2(all, allWant, totalTol); err != nil {
				t.Errorf("%s rank %d: all gradients: %v", name, g.Rank(), err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestGridBF16Inference: forward-only passes in mixed precision on grids
// — evaluation, per-token losses and greedy decoding (float32
// activations by the bf16 copies, gathered over Z in bf16) — give one
// bf16 rank's: the losses within the first step's u/64 (grid_bf16_test's
// tolerances), the same greedy tokens.
func TestGridBF16Inference(t *testing.T) {
	cfg := gridConfig(false)
	opt := Options{Activations: engine.BF16}
	ref := randomModel(t, newBackend(1), cfg, opt, 11)
	defer ref.Free()
	w := ref.Weights()
	batch := randomBatch(cfg, 3, 7, 5)
	wantLoss, err := ref.Evaluate(batch)
	if err != nil {
		t.Fatal(err)
	}
	wantTok, err := ref.TokenLosses(batch)
	if err != nil {
		t.Fatal(err)
	}
	prompts := [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8}, {9}, {10, 11, 12}}
	wantGen, err := ref.Generate(prompts, GenerateOptions{MaxNewTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range []comm.Grid{{Data: 2, X: 2, Y: 2, Z: 1}, {Data: 1, X: 1, Y: 4, Z: 2}, {Data: 1, X: 4, Y: 1, Z: 4}} {
		var mu sync.Mutex
		err := launch.Local(shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
			o := opt
			o.Parallel = g
			m, err := New(newBackend(1), cfg, o)
			if err != nil {
				return err
			}
			defer m.Free()
			if err := m.SetWeights(w); err != nil {
				return err
			}
			l, err := m.Evaluate(batch)
			if err != nil {
				return err
			}
			tok, err := m.TokenLosses(batch)
			if err != nil {
				return err
			}
			gen, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 6})
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if err := numtest.Scalar(l.Sum, wantLoss.Sum, numtest.Tol{Rel: bf16FirstLossTol}); err != nil {
				t.Errorf("%v rank %d: loss: %v", shape, g.Rank(), err)
			}
			if err := numtest.CloseL2(tok, wantTok, bf16FirstLossTol); err != nil {
				t.Errorf("%v rank %d: token losses: %v", shape, g.Rank(), err)
			}
			if fmt.Sprint(gen) != fmt.Sprint(wantGen) {
				t.Errorf("%v rank %d: generated %v, want %v", shape, g.Rank(), gen, wantGen)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%v: %v", shape, err)
		}
	}
}
