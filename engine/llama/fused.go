package llama

import (
	"errors"
	"fmt"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
)

// The optimizer step fused into the backward pass (Options.FusedOptimizer).
//
// A model built for it allocates no gradients. FusedStep runs one
// micro-batch's forward pass and a backward that takes the units of the
// model one at a time, in the order their gradients become final
// (buckets.go's readiness rule): the LM head (untied), the final norm,
// each decoder layer from the last (its seven linears and two norms),
// the embedding. When the backward reaches a unit its gradients are
// allocated zeroed (fusedBegin); when it leaves it (fusedDone) the
// unit's Z reduce-scatters are completed and its data-parallel buckets
// issued and waited for, so its gradients are final and summed; then the
// Updater updates the unit's parameters and the gradients are freed. A
// tied embedding's gradient is allocated at the head, which writes it
// first, and lives until the embedding's backward, its last write.
//
// So a rank holds the gradients of one unit at a time, plus a tied
// embedding's through the whole backward (fusedGradElements counts
// exactly this, and Itemize with it). The price on a grid: a unit's
// sums are waited for before its update, so they no longer overlap the
// backward of the units after it (perfmodel counts them blocking).
//
// Exactness. Each gradient is computed by the same kernels in the same
// order as in ForwardBackwardSum (a zeroed allocation in place of
// ZeroGrads' fill), summed by the same collectives, and updated by the
// same AdamWStep, elementwise, with the same control values — so the
// weights and moments after the step are bit for bit those of
// ForwardBackwardSum, ReduceGradients, FinishStep and one AdamWStep over
// every parameter, when the step is of one micro-batch (several would
// need every gradient whole until the last). The tests hold it on one
// rank and on grids.
//
// Clipping. The clip coefficient needs the global norm before the first
// update. With a positive maxNorm the step first runs a norm-only pass —
// the same forward and backward, each unit's squares summed into its
// slots of the step's sums (as FinishStep sums them, so the norm is the
// same float32) and its gradients freed — then the pass that updates,
// every unit's AdamWStep reading that norm. The cost is one more forward
// and backward: about twice the step's compute, the optimizer's apart.
// Its memory is the same.
//
// A non-finite loss or norm. The loss is summed (over the grid too)
// before the first update and every update reads it, so a non-finite
// loss changes nothing; with clipping the norm is known first, and a
// non-finite one changes nothing either. Without clipping the global
// norm is known only at the end: each unit's AdamWStep reads the unit's
// own squared norm instead (ctl[0]; maxNorm 0 does not clip), so a unit
// whose gradient is not finite is not updated, but the units before it
// were: the step is applied in part. FusedStep leaves the global ‖g‖²
// in the sums at the end, so the caller can tell (finetune's TrainStep
// returns an error that says so).

// An Updater applies the optimizer step to the parameters of one unit of
// a fused step (Options.FusedOptimizer), whose gradients (engine.Param.
// Grad) are final and summed over the grid when it is called, and freed
// after. ctl and maxNorm are Backend.AdamWStep's: ctl (2 elements, F32)
// holds a squared gradient norm and the step's loss, and an update must
// change nothing when either is not finite, and clip the gradients by
// engine.ClipCoefficient(ctl[0], maxNorm) first.
type Updater interface {
	UpdateUnit(params []*engine.Param, ctl *engine.Tensor, maxNorm float32)
}

var errFusedPass = errors.New("llama: a model with a fused optimizer trains by FusedStep only")

// checkFused refuses Options.FusedOptimizer where it cannot run.
func checkFused(opt Options) error {
	switch {
	case !opt.FusedOptimizer:
		return nil
	case opt.LoRA != nil:
		return errors.New("llama: a fused optimizer is for full fine-tuning, not adapters")
	case opt.ReduceAfterBackward:
		return errors.New("llama: a fused optimizer sums each unit's gradients in the backward, not after it (ReduceAfterBackward)")
	}
	return nil
}

// fusedPass is a fused step's pass in progress.
type fusedPass struct {
	u    Updater // nil in the norm-only pass
	s    *StepSums
	clip float32
}

// FusedStep runs one optimizer step of a model with a fused optimizer
// (Options.FusedOptimizer; fused.go's comment says how): batch's
// gradient, scaled by scale as ForwardBackwardSum scales it, is applied
// unit by unit through u, clipped to maxNorm (≤ 0: not clipped). s
// receives the step's sums as FinishStep leaves them — the loss sums and
// the global ‖g‖², read by s.Read — from s's first micro-batch slot.
//
// On a grid every rank calls it as it calls ForwardBackwardSum. A failure
// (a collective's) may leave the step applied in part.
func (m *Model) FusedStep(batch Batch, scale float32, s *StepSums, u Updater, maxNorm float32) (err error) {
	switch {
	case !m.Options.FusedOptimizer:
		return errors.New("llama: FusedStep on a model without a fused optimizer")
	case u == nil:
		return errors.New("llama: FusedStep without an updater")
	case scale == 0 || math.IsNaN(float64(scale)):
		return errors.New("llama: gradient scale must be non-zero")
	case s.micro < 1:
		return errors.New("llama: step sums without a micro-batch slot")
	}
	defer recoverComm(&err)
	defer m.freeFused()
	// The step's sums are FinishStep's, its calls and collective alike,
	// after the norm-only pass or at the end.
	finish := func() {
		m.sumLosses(s, 1)
		m.sumNorm(s)
		m.exchangeStep(s)
	}
	if maxNorm > 0 {
		if err := m.fusedPass(batch, scale, &fusedPass{s: s, clip: maxNorm}); err != nil {
			return err
		}
		finish()
		return m.fusedPass(batch, scale, &fusedPass{u: u, s: s, clip: maxNorm})
	}
	if err := m.fusedPass(batch, scale, &fusedPass{u: u, s: s}); err != nil {
		return err
	}
	finish()
	return nil
}

// fusedPass is one forward and backward of a fused step.
func (m *Model) fusedPass(batch Batch, scale float32, f *fusedPass) error {
	ws, err := m.upload(batch, true)
	if err != nil {
		return err
	}
	m.forward(ws)
	if err := m.beginReduce(true); err != nil {
		return err
	}
	m.fused = f
	defer func() { m.fused = nil }()
	// The head's gradient first; a tied one lives until the embedding's
	// backward (with Z-sharding only its reduce-scattered chunk is added
	// there, but weightGradPart takes a nil gradient for a frozen head).
	m.fusedBegin(m.Head)
	m.tokenLossSums(ws, batch, scale, f.s.loss(0), f.s.report(0))
	if f.u != nil && f.clip == 0 {
		// Every unit's update reads the global loss: summed before the
		// first (FinishStep's sums at the end sum it again).
		m.exchangeLoss(f.s)
	}
	m.backward(ws)
	// Every unit's sums were waited for in its fusedDone: nothing is in
	// flight.
	m.reduce.bs = nil
	return nil
}

// fusedBegin allocates the zeroed gradients of the unit ps that the
// backward is about to write, in a fused step; it does nothing
// otherwise, or for a gradient already allocated (a tied embedding's).
func (m *Model) fusedBegin(ps ...*engine.Param) {
	if m.fused == nil {
		return
	}
	for _, p := range ps {
		if p.Grad == nil {
			// Empty and Fill rather than Alloc: the zeroing is a kernel of
			// the step's list (Kernels), as ZeroGrads' fill is.
			p.Grad = m.backend.Empty(engine.F32, ShardShape(p)...)
			m.backend.Fill(p.Grad, 0)
		}
	}
}

// fusedDone completes the unit ps once the backward has made its last
// write into its gradients, in a fused step: their sums over Z and the
// data ranks, then the update — or in the norm-only pass their squares —
// and frees them.
func (m *Model) fusedDone(ps ...*engine.Param) {
	f := m.fused
	if f == nil {
		return
	}
	if m.zg != nil {
		m.zg.finish(m, nil)
	}
	if r := &m.reduce; r.bs != nil {
		// As ReduceGradients completes them: the first sums (a replicated
		// tensor's over Y), then those gradients' over their batch's ranks.
		r.bs.finish()
		for _, g := range r.later {
			r.bs.add(g, m.Options.Parallel.DataZ)
		}
		r.later = r.later[:0]
		r.bs.finish()
	}
	b, t := m.backend, f.s.t
	if f.u != nil && f.clip > 0 {
		f.u.UpdateUnit(ps, f.s.Control(), f.clip)
	} else {
		// The unit's squares in their slots (FinishStep's layout, so that
		// sumNorm adds them as it would), the tensors this rank counts
		// and its copies apart.
		var ranges [2][]*engine.Param
		for _, p := range ps {
			k := 0
			if !m.countsGrad(p) {
				k = 1
			}
			ranges[k] = append(ranges[k], p)
		}
		var unit [2]*engine.Tensor // the slots of each range
		for k, r := range ranges {
			if len(r) == 0 {
				continue
			}
			first := m.stepSlot(f.s, r[0])
			gs := make([]*engine.Tensor, len(r))
			for i, p := range r {
				if m.stepSlot(f.s, p) != first+i {
					panic(fmt.Sprintf("llama: fused unit's gradient %s out of its slots' order", p.Name))
				}
				gs[i] = p.Grad
			}
			unit[k] = t.View(first, len(r))
			b.SumSquaresMulti(unit[k], gs)
		}
		if f.u != nil {
			// No clipping: ctl[0] is this unit's ‖g‖², so that a
			// non-finite gradient is never applied (ctl[1] is the loss).
			switch {
			case unit[0] != nil && unit[1] != nil:
				b.Sum(t.View(0, 1), unit[0])
				b.Sum(t.View(2, 1), unit[1])
				b.Add(t.View(0, 1), t.View(0, 1), t.View(2, 1))
			case unit[0] != nil:
				b.Sum(t.View(0, 1), unit[0])
			default:
				b.Sum(t.View(0, 1), unit[1])
			}
			f.u.UpdateUnit(ps, f.s.Control(), 0)
		}
	}
	for _, p := range ps {
		b.Free(p.Grad)
		p.Grad = nil
	}
}

// exchangeLoss writes the step's global loss sums, [1] and [3], before a
// fused step's first update without clipping: summed over a grid's world
// in one all-reduce group, each counted once, as exchangeStep counts them.
func (m *Model) exchangeLoss(s *StepSums) {
	b, t := m.backend, s.t
	m.sumLosses(s, 1)
	g := m.Options.Parallel
	if g.World.Size() == 1 {
		return
	}
	ls := []*engine.Tensor{t.View(1, 1), t.View(3, 1)}
	if !g.CountsBatch() {
		for _, l := range ls {
			b.Fill(l, 0)
		}
	}
	check(comm.IAllReduceGroup(g.World, ls).Wait())
}

// freeFused frees the gradients a failed fused step left allocated.
func (m *Model) freeFused() {
	m.fused = nil
	m.reduce.abandon()
	for _, p := range m.Trainable() {
		if p.Grad != nil {
			m.backend.Free(p.Grad)
			p.Grad = nil
		}
	}
}

// stepSlot is the index of p's squared norm in the step's sums s:
// FinishStep's layout, the tensors this rank counts first, then its
// copies.
func (m *Model) stepSlot(s *StepSums, p *engine.Param) int {
	if m.slots == nil {
		m.slots = map[*engine.Param]int{}
		i := 0
		for _, counted := range []bool{true, false} {
			for _, q := range m.Trainable() {
				if m.countsGrad(q) == counted {
					m.slots[q] = i
					i++
				}
			}
		}
	}
	return stepSumsFixed + 2*s.micro + m.slots[p]
}

// layerParams are layer l's parameters, a fused step's unit: its seven
// linears, two norms and its family's variations, in Params' order.
func (m *Model) layerParams(l int) []*engine.Param { return m.Layers[l].params }

// ShardShape is the shape of p's shard on this rank, as New allocates
// its value (its split master's low half, which has no float32 value).
func ShardShape(p *engine.Param) []int {
	if p.Value != nil {
		return p.Value.Shape
	}
	return p.Low.Shape
}

// fusedGradElements is the most gradient elements a rank of grid g (the
// zero Grid: one rank) holds at once in a fused step of a model of cfg
// (fusedBegin, fusedDone): the largest unit's — the LM head, the final
// norm, a decoder layer's nine tensors, the embedding — or, with a tied
// embedding, whose gradient lives through the backward, the embedding's
// and the larger of a layer's and the final norm's beside it.
func fusedGradElements(cfg *checkpoints.Config, g comm.Grid) int64 {
	var layer, embed, head, norm int64
	for _, s := range oneLayer(cfg).TensorSpecs() {
		shape := s.Shape
		if g != (comm.Grid{}) {
			shape = parallel.LocalShape(s.Shape, parallel.ShardAt(g, 0, 0, 0, s.Split, s.Shape))
		}
		n := int64(engine.Elements(shape))
		switch {
		case s.Layer >= 0:
			layer += n
		case s.Role == checkpoints.RoleEmbedding:
			embed = n
		case s.Role == checkpoints.RoleHead:
			head = n
		default: // the final norm
			norm += n
		}
	}
	if cfg.TieWordEmbeddings {
		return embed + max(layer, norm)
	}
	return max(head, norm, layer, embed)
}
