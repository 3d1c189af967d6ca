package cuda

import (
	"testing"

	"github.com/memtrain/memtrain/engine"

	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
)

// maxSyncsPerStep bounds the host synchronisations of one steady-state
// training step (finetune.TrainStep with AdamW, one micro-batch, no grid):
// the one Download of llama.StepSums (cuMemcpyDtoHAsync, then
// cuStreamSynchronize), the loss sums and the squared gradient norm read
// after the fused, device-clipped AdamW has been queued. (Before they
// stayed on the device there were two more: the per-position losses of
// each micro-batch, and the gradients' sums of squares for the host's
// clipping.)
const maxSyncsPerStep = 1

// TestSteadyStateEmulated trains a small Llama on a fake GPU and checks
// that, once two warm-up steps have run at each batch shape, a step makes
// no cuMemAlloc and no cuMemFree (the caching allocator reuses every
// block, the scratch buffers have grown) and at most maxSyncsPerStep host
// synchronisations; and that the backend's counts equal those the fake
// library saw. (A device of its own: the fake counts per device.)
func TestSteadyStateEmulated(t *testing.T) {
	const dev = 7
	fakeCUDA(t)
	for _, act := range []engine.DType{engine.F32, engine.BF16} {
		t.Run(act.String(), func(t *testing.T) {
			testSteadyState(t, newFake, dev, func() Counters { return fakeCounters(t, dev) }, act)
		})
	}
}

// testSteadyState runs the steady-state check on device dev with
// activations of dtype act (llama.Options.Activations; with BF16 the
// step also refreshes the weights' bf16 copies, in AdamWStep); lib, when
// not nil, reads the library's own counts to compare with the backend's.
func testSteadyState(t *testing.T, newBackend maker, dev int, lib func() Counters, act engine.DType) {
	b := newBackend(t, dev, GemmF32)
	cfg := testConfig()
	m := randomModelWith(t, b, cfg, llama.Options{Activations: act})
	o, err := finetune.NewOptimizer(b, m.Params(), finetune.OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Free()
	shapes := []llama.Batch{randomBatch(cfg, 2, 24), randomBatch(cfg, 3, 11)}
	step := func(batch llama.Batch) Counters {
		t.Helper()
		before := b.Counters()
		if _, err := finetune.TrainStep(m, o, []llama.Batch{batch}, 1e-3, 1); err != nil {
			t.Fatal(err)
		}
		return b.Counters().Sub(before)
	}
	for i, batch := range shapes {
		c := step(batch)
		t.Logf("warm-up step %d (B=%d, T=%d): %d cuMemAlloc, %d cuMemFree, %d synchronisations", i+1, batch.B, batch.T, c.Allocs, c.Frees, c.Syncs)
	}
	goStart := b.Counters()
	var libStart Counters
	if lib != nil {
		libStart = lib()
	}
	for i, batch := range shapes {
		c := step(batch)
		t.Logf("step %d (B=%d, T=%d): %d cuMemAlloc, %d cuMemFree, %d synchronisations", len(shapes)+i+1, batch.B, batch.T, c.Allocs, c.Frees, c.Syncs)
		if c.Allocs != 0 || c.Frees != 0 || c.Syncs > maxSyncsPerStep {
			t.Errorf("step %d (B=%d, T=%d): %d cuMemAlloc, %d cuMemFree, %d synchronisations; want 0, 0, at most %d",
				len(shapes)+i+1, batch.B, batch.T, c.Allocs, c.Frees, c.Syncs, maxSyncsPerStep)
		}
	}
	if lib != nil {
		if gotGo, gotLib := b.Counters().Sub(goStart), lib().Sub(libStart); gotGo != gotLib {
			t.Errorf("the backend counted %+v, the library %+v", gotGo, gotLib)
		}
	}
	if r, c := b.Reserved(); r < b.MemStats().Allocated || c > r {
		t.Errorf("Reserved() = %d, %d with %d bytes of tensors live", r, c, b.MemStats().Allocated)
	}
}
