package llama

import (
	"fmt"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
)

// watcher is a fused step's Updater that updates nothing: it records
// which parameters each unit hands it and the backend's allocation
// while the unit's gradients exist.
type watcher struct {
	b       engine.Backend
	units   [][]string
	most    int64 // the most allocated at an update
	missing []string
}

func (w *watcher) UpdateUnit(ps []*engine.Param, ctl *engine.Tensor, maxNorm float32) {
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
		if p.Grad == nil {
			w.missing = append(w.missing, p.Name)
		}
	}
	w.units = append(w.units, names)
	w.most = max(w.most, w.b.MemStats().Allocated)
}

// checkFusedMemory runs a fused step with and without clipping on a rank
// of a model of cfg built with opt and checks its allocations against
// Itemize: New allocates the weights and Z buffers and no gradient; at
// each update the backend holds at most the accounted total, and at the
// most, exactly it (the gradients of the units in flight); each trainable
// tensor is updated once a pass, in its unit; nothing is left allocated
// but the workspace and the step's sums.
func checkFusedMemory(name string, cfg *checkpoints.Config, opt Options, seed uint64) error {
	b := newBackend(1)
	opt.FusedOptimizer = true
	m, err := New(b, cfg, opt)
	if err != nil {
		return err
	}
	defer m.Free()
	if err := m.SetWeights(checkpoints.RandomWeights(cfg, 1)); err != nil {
		return err
	}
	w := Work{FusedOptimizer: true, Activations: opt.Activations}
	if g := opt.Parallel; g != nil {
		w.Grid, w.Overlap = g.Shape(), g.Overlap
	}
	held := Itemize(cfg, w)
	if got, want := b.MemStats().Allocated, held.Weights+held.Gathered; got != want {
		return fmt.Errorf("%s: New allocated %d, accounted %d (weights and Z buffers, no gradients)", name, got, want)
	}
	w.Train, w.Batch, w.SeqLen, w.Micro = true, 2, 6, 1
	want := Itemize(cfg, w)
	for _, clip := range []float32{0, 1} {
		u := &watcher{b: b}
		s := m.StepSums(1)
		if err := m.FusedStep(randomBatch(cfg, 2, 6, seed), 0.1, s, u, clip); err != nil {
			return err
		}
		if u.most != want.Total() {
			return fmt.Errorf("%s clip %v: %d allocated at the most during the updates, accounted %d (gradients %d)", name, clip, u.most, want.Total(), want.Gradients)
		}
		if got, idle := b.MemStats().Allocated, want.Total()-want.Gradients; got != idle {
			return fmt.Errorf("%s clip %v: %d allocated after the step, accounted %d without gradients", name, clip, got, idle)
		}
		if len(u.missing) > 0 {
			return fmt.Errorf("%s clip %v: updated without a gradient: %v", name, clip, u.missing)
		}
		seen := map[string]int{}
		for _, unit := range u.units {
			for _, n := range unit {
				seen[n]++
			}
		}
		for _, p := range m.Trainable() {
			if seen[p.Name] != 1 {
				return fmt.Errorf("%s clip %v: %s updated %d times", name, clip, p.Name, seen[p.Name])
			}
		}
		if v := s.Read(); !(v.NormSquared > 0) {
			return fmt.Errorf("%s clip %v: squared gradient norm %v", name, clip, v.NormSquared)
		}
	}
	return nil
}

// TestFusedMemoryIsWhatIsAllocated: a fused step's gradients are those
// Itemize counts with Work.FusedOptimizer — the largest unit's, and a
// tied embedding's beside a layer's — on one rank (where the backend's
// peak is the accounted total) and on data, X·Y, Y·Z and X·Z grids,
// with and without overlap, in float32 and mixed precision.
func TestFusedMemoryIsWhatIsAllocated(t *testing.T) {
	for _, tie := range []bool{false, true} {
		for _, act := range []engine.DType{engine.F32, engine.BF16} {
			cfg := testConfig(tie, 2)
			name := fmt.Sprintf("tie=%v/%v", tie, act)
			if err := checkFusedMemory(name, cfg, Options{Activations: act}, 1); err != nil {
				t.Error(err)
			}
			// Nothing but the model allocates on one rank: the peak is the total.
			b := newBackend(1)
			m := randomModel(t, b, cfg, Options{Activations: act, FusedOptimizer: true}, 1)
			if err := m.FusedStep(randomBatch(cfg, 2, 6, 1), 0.1, m.StepSums(1), &watcher{b: b}, 1); err != nil {
				t.Fatal(err)
			}
			want := Memory(cfg, Work{FusedOptimizer: true, Activations: act, Train: true, Batch: 2, SeqLen: 6, Micro: 1}).Total()
			if got := b.MemStats().Peak; got != want {
				t.Errorf("%s: peaked at %d, accounted %d", name, got, want)
			}
			m.Free()
		}
	}
	grids := []comm.Grid{{Data: 2, X: 1, Y: 1, Z: 1}, {Data: 1, X: 2, Y: 2, Z: 1}, {Data: 1, X: 1, Y: 2, Z: 2}, {Data: 1, X: 2, Y: 1, Z: 4}}
	for _, tie := range []bool{false, true} {
		cfg := gridConfig(tie)
		for _, shape := range grids {
			for _, ov := range []parallel.Overlap{{}, parallel.AllOverlap()} {
				for _, act := range []engine.DType{engine.F32, engine.BF16} {
					name := fmt.Sprintf("tie=%v/%v/%v/%v", tie, shape, ov, act)
					var mu sync.Mutex
					err := launch.Local(shape, ov, func(g *parallel.Grid) error {
						err := checkFusedMemory(name, cfg, Options{Parallel: g, Activations: act}, uint64(g.BatchRank()))
						mu.Lock()
						defer mu.Unlock()
						if err != nil {
							t.Errorf("rank %d: %v", g.Rank(), err)
						}
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

// TestFusedRefuses: a fused optimizer's model refuses adapters, the
// reduction after the backward and the unfused passes.
func TestFusedRefuses(t *testing.T) {
	cfg := testConfig(false, 2)
	b := newBackend(1)
	for _, opt := range []Options{
		{FusedOptimizer: true, LoRA: testAdapter(2, false, 0, "q_proj")},
		{FusedOptimizer: true, ReduceAfterBackward: true},
	} {
		if m, err := New(b, cfg, opt); err == nil {
			m.Free()
			t.Errorf("New(%+v) accepted", opt)
		}
	}
	m := randomModel(t, b, cfg, Options{FusedOptimizer: true}, 1)
	defer m.Free()
	batch := randomBatch(cfg, 2, 6, 1)
	if _, err := m.ForwardBackward(batch, 1); err == nil {
		t.Error("ForwardBackward accepted")
	}
	if err := m.ForwardBackwardSum(batch, 1, m.StepSums(1), 0); err == nil {
		t.Error("ForwardBackwardSum accepted")
	}
	if _, err := m.GradNorm(); err == nil {
		t.Error("GradNorm accepted")
	}
	plain := randomModel(t, b, cfg, Options{}, 1)
	defer plain.Free()
	if err := plain.FusedStep(batch, 1, plain.StepSums(1), &watcher{b: b}, 0); err == nil {
		t.Error("FusedStep on a model without a fused optimizer accepted")
	}
}

// fusedKernelStep is kernelStep's step with the optimizer fused into the
// backward: each unit's AdamWStep over its parameters, with the moments
// of kernelStep's.
type fusedKernelStep struct {
	*kernelStep
	clip float32
}

func (s fusedKernelStep) UpdateUnit(ps []*engine.Param, ctl *engine.Tensor, maxNorm float32) {
	var ts []engine.AdamWTensors
	for _, p := range ps {
		for i, q := range s.m.Params() {
			if q == p {
				t := s.ts[i]
				t.Grad = p.Grad
				ts = append(ts, t)
			}
		}
	}
	s.m.Backend().AdamWStep(ts, engine.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: s.step}, maxNorm, ctl)
}

func (s fusedKernelStep) run(batch Batch) error {
	s.step++
	sums := s.m.StepSums(1)
	if err := s.m.FusedStep(batch, 1/float32(batch.B*batch.T), sums, s, s.clip); err != nil {
		return err
	}
	sums.Read()
	return nil
}

// allocations drops the allocation calls from calls, which the kernel
// list does not hold, and counts the Empty and Free calls.
func allocations(calls []engine.Kernel) (kernels []engine.Kernel, empty, free int) {
	for _, c := range calls {
		switch c.Op {
		case "Empty":
			empty++
		case "Free":
			free++
		default:
			kernels = append(kernels, c)
		}
	}
	return kernels, empty, free
}

// TestFusedKernelsAreWhatTheStepLaunches records the backend calls of a
// fused step (the second) on one rank and on rank 0 of grids, with and
// without clipping, and holds them equal, call for call, to Kernels'
// list with Work.FusedOptimizer — but for the gradients' allocations,
// which the list does not hold: one Empty and one Free a gradient a
// pass.
func TestFusedKernelsAreWhatTheStepLaunches(t *testing.T) {
	cases := []struct {
		shape     comm.Grid
		tie       bool
		recompute Recompute
		act       engine.DType
		serial    bool
	}{
		{act: engine.F32},
		{tie: true, recompute: RecomputeFull, act: engine.BF16},
		{recompute: RecomputeSelective, act: engine.F32},
		{shape: comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}, act: engine.BF16},
		{shape: comm.Grid{Data: 1, X: 2, Y: 1, Z: 1}, act: engine.F32}, // the list does not hold bf16 on X grids (nor unfused)
		{shape: comm.Grid{Data: 1, X: 1, Y: 2, Z: 1}, act: engine.F32, tie: true},
		{shape: comm.Grid{Data: 1, X: 1, Y: 1, Z: 2}, act: engine.F32, tie: true},
		{shape: comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, act: engine.F32, serial: true},
		{shape: comm.Grid{Data: 1, X: 2, Y: 2, Z: 2}, act: engine.F32, recompute: RecomputeFull},
		{shape: comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, act: engine.F32, recompute: RecomputeSelective, tie: true},
	}
	for _, c := range cases {
		for _, clip := range []float32{0, 1} {
			name := fmt.Sprintf("%v %v tie=%v recompute=%v serial=%v clip=%v", c.shape, c.act, c.tie, c.recompute, c.serial, clip)
			cfg := gridConfig(c.tie)
			weights := checkpoints.RandomWeights(cfg, 5)
			ov := parallel.AllOverlap()
			if c.serial {
				ov = parallel.Overlap{}
			}
			var got []engine.Kernel
			tensors := 0
			run := func(g *parallel.Grid) error {
				r := &recorder{b: newBackend(1)}
				m, err := New(r, cfg, Options{Parallel: g, Activations: c.act, Recompute: c.recompute, FusedOptimizer: true})
				if err != nil {
					return err
				}
				defer m.Free()
				if err := m.SetWeights(weights); err != nil {
					return err
				}
				rank := 0
				if g != nil {
					rank = g.BatchRank()
				}
				batch := randomBatch(cfg, 2, 5, uint64(3+rank))
				s := fusedKernelStep{newKernelStep(m), clip}
				if err := s.run(batch); err != nil {
					return err
				}
				r.start()
				if err := s.run(batch); err != nil {
					return err
				}
				if g == nil || g.World.Rank() == 0 {
					got, tensors = r.calls, len(m.Trainable())
				}
				return nil
			}
			var err error
			if c.shape == (comm.Grid{}) {
				err = run(nil)
			} else {
				err = launch.Local(c.shape, ov, func(g *parallel.Grid) error { return run(g) })
			}
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			w := Work{Overlap: ov, Train: true, Recompute: c.recompute, Micro: 1, Moments: 2, Batch: 2, SeqLen: 5, Activations: c.act,
				FusedOptimizer: true, Clip: clip > 0}
			if c.shape != (comm.Grid{}) {
				w.Grid = c.shape
			}
			list, err := Kernels(cfg, w)
			if err != nil {
				t.Fatal(err)
			}
			kernels, empty, free := allocations(got)
			passes := 1
			if clip > 0 {
				passes = 2
			}
			if empty != passes*tensors || free != empty {
				t.Errorf("%s: %d Empty and %d Free calls, want %d of each (a gradient a pass)", name, empty, free, passes*tensors)
			}
			if d := firstDifference(kernels, list); d != "" {
				t.Errorf("%s: %s", name, d)
			}
		}
	}
}
