package finetune

import (
	"errors"
	"fmt"
	"math"

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
// that met it changed no weights.
var ErrNonFinite = errors.New("loss or gradient norm is not finite")

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
func TrainStep(m *llama.Model, o *Optimizer, micro []llama.Batch, lr, maxNorm float64) (StepResult, error) {
	res := StepResult{LR: lr}
	for _, b := range micro {
		if b.Weights == nil {
			res.Weight += float64(b.B * b.T)
			continue
		}
		for _, w := range b.Weights {
			res.Weight += float64(w)
		}
	}
	total := []float64{res.Weight}
	if err := m.SumBatch(total); err != nil {
		return res, fmt.Errorf("finetune: %w", err)
	}
	res.Weight = total[0]
	if res.Weight == 0 {
		res.Loss = math.NaN()
		return res, nil
	}
	m.ZeroGrads()
	var sum, repSum, repWeight float64
	for i, b := range micro {
		l, err := m.ForwardBackward(b, float32(1/res.Weight))
		if err != nil {
			return res, fmt.Errorf("finetune: micro-batch %d: %w", i, err)
		}
		sum += l.Sum
		repSum += l.ReportSum
		repWeight += l.ReportWeight
	}
	if err := m.ReduceGradients(); err != nil {
		return res, fmt.Errorf("finetune: %w", err)
	}
	sums := []float64{sum, repSum, repWeight}
	if err := m.SumBatch(sums); err != nil {
		return res, fmt.Errorf("finetune: %w", err)
	}
	sum, repSum, repWeight = sums[0], sums[1], sums[2]
	res.Loss = sum / res.Weight
	res.LossAll = res.Loss
	if repWeight > 0 {
		res.LossAll = repSum / repWeight
	}
	var err error
	if res.GradNorm, res.Clipped, err = clipModel(m, maxNorm); err != nil {
		return res, fmt.Errorf("finetune: %w", err)
	}
	if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) || math.IsNaN(res.GradNorm) || math.IsInf(res.GradNorm, 0) {
		return res, fmt.Errorf("%w (loss %v, gradient norm %v)", ErrNonFinite, res.Loss, res.GradNorm)
	}
	o.Update(lr)
	return res, nil
}

// clipModel is ClipGradNorm with the model's global norm, which on a grid
// covers every rank's shards.
func clipModel(m *llama.Model, maxNorm float64) (norm float64, clipped bool, err error) {
	if norm, err = m.GradNorm(); err != nil {
		return 0, false, err
	}
	return norm, clipTo(m.Backend(), m.Trainable(), norm, maxNorm), nil
}
