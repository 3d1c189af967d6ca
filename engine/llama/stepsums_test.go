package llama

import (
	"fmt"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestStepSums: the device-side sums of a step — ForwardBackwardSum over
// two micro-batches, then FinishStep — equal what the host computes from
// ForwardBackward's losses, SumBatch and GradNorm, on one rank and on
// grids (the vocabulary-parallel loss of Y ranks, norm weights counted
// once over Y and Z, data replicas once), every rank reading the same.
func TestStepSums(t *testing.T) {
	cfg := gridConfig(false)
	w := randomModel(t, newBackend(1), cfg, Options{}, 7).Weights()
	global := reportBatch(cfg)
	ref := randomModel(t, newBackend(1), cfg, Options{}, 7)
	want, _, err := oneStep(ref, global)
	if err != nil {
		t.Fatal(err)
	}
	wantNorm, err := ref.GradNorm()
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range []comm.Grid{
		{Data: 1, X: 1, Y: 1, Z: 1}, {Data: 2, X: 2, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 2, Z: 2},
		{Data: 2, X: 1, Y: 2, Z: 1}, {Data: 1, X: 2, Y: 2, Z: 2},
	} {
		name := fmt.Sprint(shape)
		var mu sync.Mutex
		err := launch.Local(shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
			m, err := New(newBackend(1), cfg, Options{Parallel: g})
			if err != nil {
				return err
			}
			defer m.Free()
			if err := m.SetWeights(w); err != nil {
				return err
			}
			per := global.B / g.BatchRanks()
			s0 := g.BatchRank() * per
			total := 0.0
			for _, x := range global.Weights {
				total += float64(x)
			}
			m.ZeroGrads()
			sums := m.StepSums(2)
			for i, r := range [][2]int{{s0, s0 + per/2}, {s0 + per/2, s0 + per}} {
				if err := m.ForwardBackwardSum(sliceBatch(global, r[0], r[1]), float32(1/total), sums, i); err != nil {
					return err
				}
			}
			if err := m.ReduceGradients(); err != nil {
				return err
			}
			if err := m.FinishStep(sums, 2); err != nil {
				return err
			}
			got := sums.Read()
			mu.Lock()
			defer mu.Unlock()
			for _, c := range []struct {
				what      string
				got, want float64
			}{
				{"loss", got.Loss, want.Sum},
				{"reported loss", got.Report, want.ReportSum},
				{"squared gradient norm", got.NormSquared, wantNorm * wantNorm},
			} {
				if err := numtest.Scalar(c.got, c.want, numtest.Tol{Rel: 2e-6}); err != nil {
					t.Errorf("%s rank %d: %s: %v", name, g.Rank(), c.what, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

// TestStepSumsMemory: Memory counts a training step's scalars (Work.Micro)
// as StepSums allocates them, with tied and untied embeddings and with
// adapters, and nothing without Micro.
func TestStepSumsMemory(t *testing.T) {
	for _, c := range []struct {
		name string
		tie  bool
		lora bool
	}{{"untied", false, false}, {"tied", true, false}, {"lora", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := gridConfig(c.tie)
			var opts Options
			if c.lora {
				opts.LoRA = testAdapter(3, false, 0)
			}
			for _, micro := range []int{1, 3} {
				b := newBackend(1)
				m, err := New(b, cfg, opts)
				if err != nil {
					t.Fatal(err)
				}
				before := b.MemStats().Allocated
				m.StepSums(micro)
				got := b.MemStats().Allocated - before
				m.Free()
				w := Work{Train: true, LoRA: opts.LoRA, Micro: micro}
				with := Memory(cfg, w).Workspace
				w.Micro = 0
				if d := with - Memory(cfg, w).Workspace; d != got {
					t.Errorf("micro %d: Memory counts %d bytes of step sums, StepSums allocated %d", micro, d, got)
				}
			}
		})
	}
}
