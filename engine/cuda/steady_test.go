package cuda

import (
	"fmt"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
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
	for _, c := range steadyStates() {
		t.Run(c.name, func(t *testing.T) {
			testSteadyState(t, newFake, dev, func() Counters { return fakeCounters(t, dev) }, c)
		})
	}
}

// steadyState is a model's precision and AdamW state for the
// steady-state check.
type steadyState struct {
	name    string
	act     engine.DType // llama.Options.Activations
	split   bool         // llama.Options.SplitMaster
	moments string       // finetune.OptimizerConfig.Moments
}

// steadyStates are float32, bf16 activations (the step also refreshes the
// weights' bf16 copies, in AdamWStep), and bf16 with the compact state of
// the planner's cheapest answers (a split master, 8-bit moments).
func steadyStates() []steadyState {
	return []steadyState{{"f32", engine.F32, false, ""}, {"bf16", engine.BF16, false, ""}, {"bf16, split master, int8 moments", engine.BF16, true, "int8"}}
}

// testSteadyState runs the steady-state check on device dev in state c;
// lib, when not nil, reads the library's own counts to compare with the
// backend's.
func testSteadyState(t *testing.T, newBackend maker, dev int, lib func() Counters, c steadyState) {
	b := newBackend(t, dev, GemmF32)
	cfg := testConfig()
	m := randomModelWith(t, b, cfg, llama.Options{Activations: c.act, SplitMaster: c.split})
	o, err := finetune.NewOptimizer(b, m.Params(), finetune.OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Moments: c.moments})
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

// inFlightComm passes its communicator's collectives on and, for each
// non-blocking all-reduce (a gradient bucket), notes the backend's
// counts when it is issued and when it is waited for: a cuMemAlloc,
// cuMemFree or host synchronisation in between would have run while the
// bucket may have been in flight.
type inFlightComm struct {
	comm.Comm
	b     *Backend
	spans *[]Counters // each bucket's counts between issue and wait
}

var _ comm.Grouper = (*inFlightComm)(nil)

func (c *inFlightComm) track(r comm.Request) comm.Request {
	return &inFlightRequest{r, c, c.b.Counters()}
}

func (c *inFlightComm) IAllReduce(t *engine.Tensor) comm.Request {
	return c.track(c.Comm.IAllReduce(t))
}

func (c *inFlightComm) IAllReduceGroup(ts []*engine.Tensor) comm.Request {
	return c.track(comm.IAllReduceGroup(c.Comm, ts))
}

type inFlightRequest struct {
	comm.Request
	c      *inFlightComm
	issued Counters
}

func (r *inFlightRequest) Wait() error {
	*r.c.spans = append(*r.c.spans, r.c.b.Counters().Sub(r.issued))
	return r.Request.Wait()
}

// TestSteadyStateGridEmulated trains the small Llama on data-parallel
// grids of fake GPUs over NCCL, the gradient buckets issued during the
// backward (small ones, many a step): in a steady state a step makes no
// cuMemAlloc or cuMemFree, and while any bucket is in flight — from its
// issue in the backward to its wait in ReduceGradients — the rank makes
// no allocation, free or host synchronisation at all. (A grid's step has
// more synchronisations than one rank's: SumBatch adds the ranks' loss
// weights on the host before it.)
func TestSteadyStateGridEmulated(t *testing.T) {
	fakeCUDA(t)
	cfg := gridConfig()
	weights := checkpoints.RandomWeights(cfg, 5)
	batches := gridBatches(cfg)
	for _, shape := range []comm.Grid{{Data: 2, X: 1, Y: 1, Z: 1}, {Data: 2, X: 1, Y: 1, Z: 2}} {
		t.Run(fmt.Sprintf("dp=%d,z=%d", shape.Data, shape.Z), func(t *testing.T) {
			backends := make([]*Backend, shape.Size())
			for i := range backends {
				backends[i] = newFake(t, i, GemmF32)
			}
			worlds, err := NewNCCLGroup(backends)
			if err != nil {
				t.Fatal(err)
			}
			spans := make([][]Counters, len(backends))
			steps := make([][]Counters, len(backends))
			err = parallel.LaunchWorlds(worlds, shape, parallel.AllOverlap(), func(g *parallel.Grid) error {
				r := g.Rank()
				b := backends[r]
				groups := *g.Groups
				for _, c := range []*comm.Comm{&groups.Data, &groups.DataZ} {
					*c = &inFlightComm{Comm: *c, b: b, spans: &spans[r]}
				}
				grid := &parallel.Grid{Groups: &groups, At: g.At, Overlap: g.Overlap}
				m, err := llama.New(b, cfg, llama.Options{Parallel: grid, GradientBucketBytes: 4 << 10})
				if err != nil {
					return err
				}
				defer m.Free()
				if err := m.SetWeights(weights); err != nil {
					return err
				}
				o, err := finetune.NewOptimizer(b, m.Params(), finetune.OptimizerConfig{Name: "adamw", Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1})
				if err != nil {
					return err
				}
				defer o.Free()
				for i := range 4 {
					before := b.Counters()
					if i == 2 {
						spans[r] = spans[r][:0] // the steady steps' buckets only
					}
					if _, err := finetune.TrainStep(m, o, gridShare(batches[i%len(batches)], g.BatchRanks(), g.BatchRank()), 1e-2, 1); err != nil {
						return fmt.Errorf("step %d: %w", i+1, err)
					}
					steps[r] = append(steps[r], b.Counters().Sub(before))
				}
				return b.Synchronize()
			})
			if err != nil {
				t.Fatal(err)
			}
			for r := range backends {
				for i, c := range steps[r][2:] {
					t.Logf("rank %d, step %d: %d cuMemAlloc, %d cuMemFree, %d synchronisations", r, i+3, c.Allocs, c.Frees, c.Syncs)
					if c.Allocs != 0 || c.Frees != 0 {
						t.Errorf("rank %d, step %d: %d cuMemAlloc, %d cuMemFree; want none", r, i+3, c.Allocs, c.Frees)
					}
				}
				if len(spans[r]) < 4 {
					t.Fatalf("rank %d: %d buckets in two steps: the test wants several a step", r, len(spans[r]))
				}
				for i, c := range spans[r] {
					if c != (Counters{}) {
						t.Errorf("rank %d: bucket %d of the steady steps: %+v while in flight, want none", r, i+1, c)
					}
				}
			}
			t.Logf("%d buckets on rank 0 in the two steady steps", len(spans[0]))
		})
	}
}
