package finetune

import (
	"errors"
	"fmt"
	"math"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

// StepResult describes one optimizer step.
type StepResult struct {
	Loss     float64 // mean over the kept targets of the global batch
	LossAll  float64 // mean under the micro-batches' ReportWeights (e.g. all non-padding targets); Loss when none are given
	Weight   float64 // kept targets (Σ of the loss weights)
	GradNorm float64 // global gradient norm before clipping
	LR       float64
	Clipped  bool
}

// ErrNonFinite reports a NaN or infinite loss or gradient norm; the step
// that met it changed no weights — unless the error also wraps
// ErrPartialStep.
var ErrNonFinite = errors.New("loss or gradient norm is not finite")

// ErrPartialStep reports a fused step (llama.Options.FusedOptimizer)
// without clipping that met a non-finite gradient norm: the units updated
// before the gradient that was not finite kept their update (a unit's own
// non-finite gradient is never applied). The model and optimizer are then
// not a state to go on from: a run stops on it (as on any ErrNonFinite)
// and saves nothing of the step. Always wrapped with ErrNonFinite.
var ErrPartialStep = errors.New("the fused step was applied in part")

// TrainStep runs one optimizer step over a global batch given as
// micro-batches: the gradient of the mean loss over every kept target of
// the whole global batch (so that any split into micro-batches, and any
// parallel grid, equals one big batch), clipped to maxNorm (≤ 0: no
// clipping), then an optimizer update at learning rate lr. A global batch
// with nothing to learn from (every weight 0) changes nothing.
//
// On a grid (m.Grid() not nil) every rank calls it with its share of the
// global batch — the same number of micro-batches on every rank, the X·Y
// ranks of one data·Z coordinate with the same ones — and gets the same
// result: the loss and weight sums are added up over the data·Z ranks,
// the gradients reduced (m.ReduceGradients) and their norm taken over
// every shard.
//
// The step makes one host synchronisation on one rank: the loss sums and
// the gradient norm stay on the device (llama.StepSums) until AdamW's
// update, clipped and checked for a non-finite loss or norm there
// (Backend.AdamWStep), has been issued, and are read after it. SGD reads
// them before its update, which it clips on the host.
//
// A model with a fused optimizer (llama.Options.FusedOptimizer) takes the
// step unit by unit in the backward (fusedTrainStep): one micro-batch,
// AdamW without ZeRO; the same weights, bit for bit.
//
// With a ZeRO optimizer (NewShardedOptimizer) each data rank updates its
// chunk of every parameter and the updated chunks are all-gathered before
// TrainStep returns (zero.go): the result, and every rank's weights, are
// bit for bit those of the unsharded step.
func TrainStep(m *llama.Model, o *Optimizer, micro []llama.Batch, lr, maxNorm float64) (StepResult, error) {
	res := StepResult{LR: lr}
	var repWeight float64
	for _, b := range micro {
		if b.Weights == nil {
			res.Weight += float64(b.B * b.T)
		} else {
			for _, w := range b.Weights {
				res.Weight += float64(w)
			}
		}
		for _, w := range b.ReportWeights {
			repWeight += float64(w)
		}
	}
	total := []float64{res.Weight, repWeight}
	if err := m.SumBatch(total); err != nil {
		return res, fmt.Errorf("finetune: %w", err)
	}
	res.Weight, repWeight = total[0], total[1]
	if res.Weight == 0 {
		res.Loss = math.NaN()
		return res, nil
	}
	if m.Options.FusedOptimizer {
		return fusedTrainStep(m, o, micro, lr, maxNorm, res, repWeight)
	}
	m.ZeroGrads()
	sums := m.StepSums(len(micro))
	for i, b := range micro {
		if err := m.ForwardBackwardSum(b, float32(1/res.Weight), sums, i); err != nil {
			return res, fmt.Errorf("finetune: micro-batch %d: %w", i, err)
		}
	}
	if err := m.ReduceGradients(); err != nil {
		return res, fmt.Errorf("finetune: %w", err)
	}
	if err := m.FinishStep(sums, len(micro)); err != nil {
		return res, fmt.Errorf("finetune: %w", err)
	}
	fused := o.cfg.Name == "adamw"
	if fused {
		if err := o.updateClipped(lr, maxNorm, sums.Control()); err != nil {
			return res, err
		}
	}
	v := sums.Read()
	res.Loss = v.Loss / res.Weight
	res.LossAll = res.Loss
	if repWeight > 0 {
		res.LossAll = v.Report / repWeight
	}
	res.GradNorm = math.Sqrt(v.NormSquared)
	if !engine.StepIsFinite(float32(v.NormSquared), float32(v.Loss)) {
		if fused {
			o.Step-- // the device skipped the update
		}
		return res, fmt.Errorf("%w (loss %v, gradient norm %v)", ErrNonFinite, res.Loss, res.GradNorm)
	}
	if fused {
		res.Clipped = engine.ClipCoefficient(float32(v.NormSquared), float32(maxNorm)) < 1
		return res, nil
	}
	res.Clipped = clipTo(m.Backend(), m.Trainable(), res.GradNorm, maxNorm)
	o.Update(lr)
	return res, nil
}

// fusedTrainStep is TrainStep on a model with a fused optimizer: the
// AdamW update applied unit by unit in the backward (llama.FusedStep),
// clipped through a norm-only pass first when maxNorm > 0 — one more
// forward and backward. Bit for bit the unfused step. A non-finite loss,
// or with clipping a non-finite norm, changes nothing (ErrNonFinite);
// without clipping a non-finite norm is known only at the end, and the
// error wraps ErrPartialStep too.
func fusedTrainStep(m *llama.Model, o *Optimizer, micro []llama.Batch, lr, maxNorm float64, res StepResult, repWeight float64) (StepResult, error) {
	switch {
	case len(micro) != 1:
		return res, fmt.Errorf("finetune: a fused optimizer step takes one micro-batch, not %d (every gradient would be needed whole until the last)", len(micro))
	case o.cfg.Name != "adamw":
		return res, fmt.Errorf("finetune: a fused optimizer step is AdamW's, not %s", o.cfg.Name)
	case o.zero != nil:
		return res, errors.New("finetune: a fused optimizer step does not shard the moments over the data ranks (ZeRO)")
	}
	sums := m.StepSums(1)
	o.Step++
	if err := m.FusedStep(micro[0], float32(1/res.Weight), sums, unitStep{o, o.hyper(lr)}, float32(maxNorm)); err != nil {
		return res, fmt.Errorf("finetune: %w", err)
	}
	v := sums.Read()
	res.Loss = v.Loss / res.Weight
	res.LossAll = res.Loss
	if repWeight > 0 {
		res.LossAll = v.Report / repWeight
	}
	res.GradNorm = math.Sqrt(v.NormSquared)
	if !engine.StepIsFinite(float32(v.NormSquared), float32(v.Loss)) {
		err := fmt.Errorf("%w (loss %v, gradient norm %v)", ErrNonFinite, res.Loss, res.GradNorm)
		if maxNorm > 0 || !engine.StepIsFinite(0, float32(v.Loss)) {
			o.Step-- // every unit's update was skipped
			return res, err
		}
		return res, fmt.Errorf("%w: %w: some tensors were updated, the rest not", err, ErrPartialStep)
	}
	res.Clipped = engine.ClipCoefficient(float32(v.NormSquared), float32(maxNorm)) < 1
	return res, nil
}
