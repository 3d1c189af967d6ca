package cuda

import (
	"errors"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

// TestCompactStateRefusedEmulated: the GPU backend holds AdamW's state
// in float32 only: a split-master model is refused when it is made, and
// an AdamWStep given a split master or compact moments panics with an
// *engine.Misuse before it launches anything.
func TestCompactStateRefusedEmulated(t *testing.T) {
	fakeCUDA(t)
	b := newFake(t, 0, GemmF32)
	if _, err := llama.New(b, testConfig(), llama.Options{Activations: engine.BF16, SplitMaster: true}); err == nil || !strings.Contains(err.Error(), "float32 masters only") {
		t.Errorf("a split-master model: %v", err)
	}
	n := 8
	ctl := b.Alloc(engine.F32, 2)
	b.Upload(ctl, []float32{1, 1})
	f32 := func() *engine.Tensor { return b.Alloc(engine.F32, n) }
	for name, ts := range map[string]engine.AdamWTensors{
		"split master": {Grad: f32(), M: f32(), V: f32(), Copy: b.Alloc(engine.BF16, n), Low: b.Alloc(engine.BF16, n)},
		"bf16 moments": {Param: f32(), Grad: f32(), M: b.Alloc(engine.BF16, n), V: b.Alloc(engine.BF16, n), Round: &engine.MomentRound{}},
	} {
		func() {
			defer func() {
				var m *engine.Misuse
				if err, _ := recover().(error); !errors.As(err, &m) || m.Op != "AdamWStep" {
					t.Errorf("%s: AdamWStep panicked with %v, want an *engine.Misuse of AdamWStep", name, err)
				}
			}()
			b.AdamWStep([]engine.AdamWTensors{ts}, engine.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 1}, 0, ctl)
		}()
	}
}
