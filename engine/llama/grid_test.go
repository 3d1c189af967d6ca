package llama

import (
	"fmt"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// gridConfig is small but splits over X, Y and Z up to 4: hidden 32,
// 8 query and 4 key/value heads of 4, intermediate 48, vocabulary 64.
func gridConfig(tie bool) *checkpoints.Config {
	c := testConfig(tie, 4)
	c.HiddenSize, c.NumAttentionHeads, c.NumKeyValueHeads, c.IntermediateSize, c.VocabSize = 32, 8, 4, 48, 64
	if err := c.Validate(); err != nil {
		panic(err)
	}
	return c
}

// onGrid runs fn on every rank of an in-process grid of shape, each with
// its shard of a model of cfg holding the full-shape weights w.
func onGrid(shape comm.Grid, cfg *checkpoints.Config, w []checkpoints.Tensor, fn func(g *parallel.Grid, m *Model) error) error {
	return launch.Local(shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
		m, err := New(newBackend(1), cfg, Options{Parallel: g})
		if err != nil {
			return err
		}
		defer m.Free()
		if err := m.SetWeights(w); err != nil {
			return err
		}
		return fn(g, m)
	})
}

// reportBatch is the grid tests' global batch: 8 sequences of 6 tokens,
// a quarter of the targets ignored, every other one reported
// (ReportWeights 1).
func reportBatch(cfg *checkpoints.Config) Batch {
	b := randomBatch(cfg, 8, 6, 3)
	b.ReportWeights = make([]float32, len(b.Weights))
	for i := range b.ReportWeights {
		if b.Targets[i] >= 0 {
			b.ReportWeights[i] = 1
		}
	}
	return b
}

// sliceBatch returns sequences [s0, s1) of a batch.
func sliceBatch(b Batch, s0, s1 int) Batch {
	lo, hi := s0*b.T, s1*b.T
	out := Batch{B: s1 - s0, T: b.T, IDs: b.IDs[lo:hi], Targets: b.Targets[lo:hi], Weights: b.Weights[lo:hi]}
	if b.ReportWeights != nil {
		out.ReportWeights = b.ReportWeights[lo:hi]
	}
	if b.Keys != nil {
		out.Keys = b.Keys[s0:s1]
	}
	return out
}

// oneStep runs two micro-batches of a global batch on a model of one
// rank or on one rank of a grid (which takes its data·Z share), with the
// gradients reduced; it returns the global loss and weight, and the
// full-shape gradients of the trainable parameters.
func oneStep(m *Model, global Batch) (Loss, map[string][]float32, error) {
	s0, s1 := 0, global.B
	if g := m.Grid(); g != nil {
		per := global.B / g.BatchRanks()
		s0 = g.BatchRank() * per
		s1 = s0 + per
	}
	total := 0.0
	for _, w := range global.Weights {
		total += float64(w)
	}
	m.ZeroGrads()
	var sum Loss
	half := (s1 - s0) / 2
	for i, r := range [][2]int{{s0, s0 + half}, {s0 + half, s1}} {
		if i == 1 {
			m.LastMicroBatch() // its backward issues the gradient buckets
		}
		l, err := m.ForwardBackward(sliceBatch(global, r[0], r[1]), float32(1/total))
		if err != nil {
			return Loss{}, nil, err
		}
		sum.Sum += l.Sum
		sum.Weight += l.Weight
		sum.ReportSum += l.ReportSum
		sum.ReportWeight += l.ReportWeight
	}
	if err := m.ReduceGradients(); err != nil {
		return Loss{}, nil, err
	}
	vals := []float64{sum.Sum, sum.Weight, sum.ReportSum, sum.ReportWeight}
	if err := m.SumBatch(vals); err != nil {
		return Loss{}, nil, err
	}
	sum = Loss{Sum: vals[0], Weight: vals[1], ReportSum: vals[2], ReportWeight: vals[3]}
	grads := map[string][]float32{}
	for _, p := range m.Trainable() {
		if m.Adapter() != nil { // adapters: whole on every rank
			grads[p.Name] = download(m, p.Grad)
			continue
		}
		g, err := m.Gather(p, p.Grad)
		if err != nil {
			return Loss{}, nil, err
		}
		grads[p.Name] = g
	}
	return sum, grads, nil
}

// checkStepResult compares oneStep's loss sums (within tol, relative) and,
// with withGrads, its gradients (within 1e-5 in relative L2) with the
// reference's.
func checkStepResult(t *testing.T, name string, got, want Loss, tol float64, grads, wantGrads map[string][]float32, withGrads bool) {
	t.Helper()
	if err := numtest.Scalar(got.Sum, want.Sum, numtest.Tol{Rel: tol}); err != nil || got.Weight != want.Weight {
		t.Errorf("%s: loss %v/%v, want %v/%v: %v", name, got.Sum, got.Weight, want.Sum, want.Weight, err)
	}
	if err := numtest.Scalar(got.ReportSum, want.ReportSum, numtest.Tol{Rel: tol}); err != nil {
		t.Errorf("%s: report loss: %v", name, err)
	}
	if withGrads {
		if err := numtest.EachL2(grads, wantGrads, 1e-5); err != nil {
			t.Errorf("%s: gradients: %v", name, err)
		}
	}
}

// TestGridGradients: one step's loss and every gradient on grids of
// in-process ranks equal one rank's.
func TestGridGradients(t *testing.T) {
	grids := []comm.Grid{
		{Data: 1, X: 2, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 2, Z: 1}, {Data: 1, X: 1, Y: 1, Z: 2}, {Data: 2, X: 1, Y: 1, Z: 1},
		{Data: 2, X: 2, Y: 2, Z: 2}, {Data: 1, X: 4, Y: 4, Z: 1}, {Data: 1, X: 1, Y: 4, Z: 4},
	}
	for _, tie := range []bool{false, true} {
		cfg := gridConfig(tie)
		w := randomModel(t, newBackend(1), cfg, Options{}, 7).Weights()
		global := reportBatch(cfg)
		ref := randomModel(t, newBackend(1), cfg, Options{}, 7)
		want, wantGrads, err := oneStep(ref, global)
		if err != nil {
			t.Fatal(err)
		}
		for _, shape := range grids {
			for _, ov := range []parallel.Overlap{{}, parallel.AllOverlap()} {
				for _, rec := range recomputeModes {
					name := fmt.Sprintf("tie=%v/%v/%v/recompute=%v", tie, shape, ov, rec)
					var mu sync.Mutex
					err := launch.Local(shape, ov, func(g *parallel.Grid) error {
						m, err := New(newBackend(1), cfg, Options{Parallel: g, Recompute: rec})
						if err != nil {
							return err
						}
						defer m.Free()
						if err := m.SetWeights(w); err != nil {
							return err
						}
						got, grads, err := oneStep(m, global)
						if err != nil {
							return err
						}
						mu.Lock()
						defer mu.Unlock()
						checkStepResult(t, fmt.Sprintf("%s rank %d", name, g.Rank()), got, want, 1e-5, grads, wantGrads, g.Rank() == 0)
						return nil
					})
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
				}
			}
		}
	}
}

// TestGridInference: loss, per-token losses, logits and greedy
// generations on grids equal one rank's.
func TestGridInference(t *testing.T) {
	cfg := gridConfig(false)
	ref := randomModel(t, newBackend(1), cfg, Options{}, 11)
	defer ref.Free()
	w := ref.Weights()
	batch := randomBatch(cfg, 3, 7, 5)
	wantLoss, err := ref.Evaluate(batch)
	if err != nil {
		t.Fatal(err)
	}
	wantTok, _ := ref.TokenLosses(batch)
	wantLogits, _ := ref.Logits(batch)
	prompts := [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8}, {9}, {10, 11, 12}}
	wantGen, err := ref.Generate(prompts, GenerateOptions{MaxNewTokens: 6})
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range []comm.Grid{{Data: 2, X: 2, Y: 2, Z: 1}, {Data: 1, X: 1, Y: 4, Z: 2}, {Data: 1, X: 4, Y: 1, Z: 4}} {
		var mu sync.Mutex
		err := onGrid(shape, cfg, w, func(g *parallel.Grid, m *Model) error {
			l, err := m.Evaluate(batch)
			if err != nil {
				return err
			}
			tok, err := m.TokenLosses(batch)
			if err != nil {
				return err
			}
			logits, err := m.Logits(batch)
			if err != nil {
				return err
			}
			gen, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 6})
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if err := numtest.Scalar(l.Sum, wantLoss.Sum, numtest.Tol{Rel: 1e-5}); err != nil {
				t.Errorf("%v rank %d: loss: %v", shape, g.Rank(), err)
			}
			if err := numtest.CloseL2(tok, wantTok, 1e-5); err != nil {
				t.Errorf("%v rank %d: token losses: %v", shape, g.Rank(), err)
			}
			if err := numtest.CloseL2(logits, wantLogits, 1e-5); err != nil {
				t.Errorf("%v rank %d: logits: %v", shape, g.Rank(), err)
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

// TestVocabParallelChunks: the vocabulary-parallel cross-entropy and argmax
// gather one logit a row through int32 flat ids, in chunks of rows when the
// batch × vocabulary slice would pass 2³¹; forced into chunks of two rows
// here, a training step's loss and gradients and greedy generation are the
// unchunked run's, bit for bit.
func TestVocabParallelChunks(t *testing.T) {
	cfg := gridConfig(false)
	ref := randomModel(t, newBackend(1), cfg, Options{}, 13)
	w := ref.Weights()
	ref.Free()
	batch := randomBatch(cfg, 3, 7, 6)
	prompts := [][]int32{{1, 2, 3}, {4, 5, 6, 7, 8}, {9}}
	type result struct {
		loss  Loss
		grads map[string][]float32
		gen   string
	}
	run := func(limit int) result {
		var mu sync.Mutex
		var out result
		err := onGrid(comm.Grid{Data: 1, X: 1, Y: 2, Z: 1}, cfg, w, func(g *parallel.Grid, m *Model) error {
			m.flatRowsLimit = limit
			l, grads, err := oneStep(m, batch)
			if err != nil {
				return err
			}
			gen, err := m.Generate(prompts, GenerateOptions{MaxNewTokens: 5})
			if err != nil {
				return err
			}
			if g.Rank() == 0 {
				mu.Lock()
				out = result{l, grads, fmt.Sprint(gen)}
				mu.Unlock()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	whole, chunked := run(0), run(2)
	if fmt.Sprint(whole.loss) != fmt.Sprint(chunked.loss) || whole.gen != chunked.gen {
		t.Errorf("chunked: loss %+v, generated %s; unchunked %+v, %s", chunked.loss, chunked.gen, whole.loss, whole.gen)
	}
	if err := numtest.Each(chunked.grads, whole.grads, numtest.Equal[float32]); err != nil {
		t.Errorf("chunked gradients: %v", err)
	}
}
