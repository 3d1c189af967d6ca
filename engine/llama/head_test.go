package llama

import (
	"fmt"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
)

// TestHeadChunks: the training head taken a few rows at a time — chunks
// of 5 positions of a micro-batch's 24 (or 12), the last one shorter — gives the loss, the
// reported loss and every gradient of the whole-batch head, on one rank
// and on Z-sharded grids, where the head's gradient block is summed over
// the chunks before its reduce-scatter; tied and untied. The workspace
// holds only a chunk's logits.
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
		for _, shape := range []comm.Grid{{Data: 1, X: 1, Y: 1, Z: 1}, {Data: 1, X: 1, Y: 1, Z: 2}, {Data: 2, X: 1, Y: 1, Z: 2}} {
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
