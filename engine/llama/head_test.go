package llama

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// TestHeadChunks: the training head taken a few rows at a time — chunks
// of 5 positions of a micro-batch's 24 (or 12), the last one shorter — gives the loss, the
// reported loss and every gradient of the whole-batch head, on one rank,
// on Z-sharded grids, where the head's gradient block is summed over the
// chunks before its reduce-scatter, and on X and Y grids, where each
// chunk all-reduces its logits over X and takes its vocabulary-parallel
// loss over Y; tied and untied. The workspace holds only a chunk's
// logits. In mixed precision the chunked head on a grid is one bf16
// rank's whole head within the bf16 grid tolerances of a first step
// (grid_bf16_test.go).
func TestHeadChunks(t *testing.T) {
	for _, tie := range []bool{false, true} {
		cfg := gridConfig(tie)
		w := randomModel(t, newBackend(1), cfg, Options{}, 7).Weights()
		global := reportBatch(cfg)
		ref := randomModel(t, newBackend(1), cfg, Options{}, 7)
		want, wantGrads, err := oneStep(ref, global)
		if err != nil {
			t.Fatal(err)
		}
		if rows := ref.ws.logits.Dim(0); rows != global.B*global.T/2 {
			t.Fatalf("tie=%v: the reference holds %d rows of logits, want a micro-batch's %d", tie, rows, global.B*global.T/2)
		}
		for _, shape := range []comm.Grid{{Data: 1, X: 1, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 1, Z: 2}, {Data: 2, X: 1, Y: 1, Z: 2},
			{Data: 1, X: 2, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 2, Z: 1}, {Data: 1, X: 2, Y: 2, Z: 2}} {
			for _, ov := range []parallel.Overlap{{}, parallel.AllOverlap()} {
				name := fmt.Sprintf("tie=%v/%v/%v", tie, shape, ov)
				var mu sync.Mutex
				err := launch.Local(shape, ov, func(g *parallel.Grid) error {
					m, err := New(newBackend(1), cfg, Options{Parallel: g})
					if err != nil {
						return err
					}
					defer m.Free()
					m.d.headRowsLimit = 5
					if err := m.SetWeights(w); err != nil {
						return err
					}
					got, grads, err := oneStep(m, global)
					if err != nil {
						return err
					}
					mu.Lock()
					defer mu.Unlock()
					if rows := m.ws.logits.Dim(0); rows != 5 {
						t.Errorf("%s: the workspace holds %d rows of logits, want 5", name, rows)
					}
					checkStepResult(t, fmt.Sprintf("%s rank %d", name, g.Rank()), got, want, 1e-6, grads, wantGrads, g.Rank() == 0)
					return nil
				})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
		}
	}
}

// TestHeadChunksBF16 is TestHeadChunks in mixed precision on grids that
// split the model: a step with the head in chunks of 5 rows equals one
// bf16 rank's with its whole head within the bf16 grid tolerances of a
// first step (grid_bf16_test.go): the loss within u/64, the gradients
// within 4u together and 8u per tensor.
func TestHeadChunksBF16(t *testing.T) {
	cfg := gridConfig(false)
	opt := Options{Activations: engine.BF16}
	w := randomModel(t, newBackend(1), cfg, opt, 7).Weights()
	global := reportBatch(cfg)
	ref := randomModel(t, newBackend(1), cfg, opt, 7)
	want, wantGrads, err := oneStep(ref, global)
	if err != nil {
		t.Fatal(err)
	}
	for _, shape := range []comm.Grid{{Data: 1, X: 2, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 2, Z: 2}, {Data: 2, X: 2, Y: 2, Z: 2}} {
		var mu sync.Mutex
		err := launch.Local(shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
			o := opt
			o.Parallel = g
			m, err := New(newBackend(1), cfg, o)
			if err != nil {
				return err
			}
			defer m.Free()
			m.d.headRowsLimit = 5
			if err := m.SetWeights(w); err != nil {
				return err
			}
			got, grads, err := oneStep(m, global)
			if err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			name := fmt.Sprintf("%v rank %d", shape, g.Rank())
			if rows := m.ws.logits.Dim(0); rows != 5 {
				t.Errorf("%s: the workspace holds %d rows of logits, want 5", name, rows)
			}
			checkStepResult(t, name, got, want, bf16FirstLossTol, nil, nil, false)
			if err := numtest.EachL2(grads, wantGrads, bf16GridTensTol); err != nil {
				t.Errorf("%s: gradients: %v", name, err)
			}
			var all, allWant []float32
			for _, n := range slices.Sorted(maps.Keys(wantGrads)) {
				all, allWant = append(all, grads[n]...), append(allWant, wantGrads[n]...)
			}
			if err := numtest.CloseL2(all, allWant, bf16GridTotalTol); err != nil {
				t.Errorf("%s: all gradients: %v", name, err)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%v: %v", shape, err)
		}
	}
}
