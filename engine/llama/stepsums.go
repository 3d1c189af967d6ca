package llama

import (
	"errors"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
)

// StepSums are the scalars of one optimizer step, kept on the device until
// the step is queued: the micro-batches' loss sums, then the global loss
// and squared gradient norm that a fused update (Backend.AdamWStep) reads
// there. The host reads them once, with Read, after the update has been
// issued: on a GPU the step's one synchronisation, where a download of
// each micro-batch's losses and of every gradient's norm stalled the
// stream before.
//
// The tensor's layout:
//
//	[0]  ‖g‖² of the tensors this rank counts (countsGrad; all, on one rank) until Finish, then the total
//	[1]  Σ w·CE over the global batch (Finish)
//	[2]  ‖g‖² of the tensors it does not count (copies another rank counts), dropped
//	[3]  Σ of the reported loss (Batch.ReportWeights) over the global batch
//	[4, 4+n)        each micro-batch's Σ w·CE
//	[4+n, 4+2n)     each micro-batch's reported loss sum (0 without one)
//	[4+2n, …)       each trainable tensor's ‖g‖², the counted ones first
type StepSums struct {
	b     engine.Backend
	t     *engine.Tensor
	micro int              // n, the micro-batches it has room for
	grads []*engine.Tensor // FinishStep's list of gradients, reused
	// steps is the micro-batch count of the step under way (StepSums'
	// argument): slot steps−1 is its last, whose backward begins the
	// gradients' reduction (buckets.go).
	steps int
	host  [4]float32
}

const stepSumsFixed = 4

// Control is the pair (‖g‖², loss) that Backend.AdamWStep reads, valid
// after Finish.
func (s *StepSums) Control() *engine.Tensor { return s.t.View(0, 2) }

// loss and report are micro-batch i's slots.
func (s *StepSums) loss(i int) *engine.Tensor { return s.t.View(stepSumsFixed+i, 1) }
func (s *StepSums) report(i int) *engine.Tensor {
	return s.t.View(stepSumsFixed+s.micro+i, 1)
}

// StepSums returns the model's step scalars for a step of micro
// micro-batches: one tensor, kept and reused from step to step (made
// again only for more micro-batches than before), so that a step in
// steady state allocates nothing.
func (m *Model) StepSums(micro int) *StepSums {
	if s := m.stepSums; s != nil && s.micro >= micro {
		s.steps = micro
		return s
	}
	if m.stepSums != nil {
		m.backend.Free(m.stepSums.t)
	}
	n := stepSumsFixed + 2*micro + len(m.Trainable())
	m.stepSums = &StepSums{b: m.backend, t: m.backend.Alloc(engine.F32, n), micro: micro, steps: micro}
	return m.stepSums
}

// stepSumsBytes is what StepSums(w.Micro) allocates for a model of cfg
// doing w (Itemize counts it with the workspace): one float a fixed
// scalar, two a micro-batch, one a trainable tensor.
func stepSumsBytes(cfg *checkpoints.Config, w Work) int64 {
	if !w.Train || w.Micro <= 0 {
		return 0
	}
	tensors := int64(cfg.TensorCount())
	if w.LoRA != nil {
		tensors = int64(len(cfg.AdapterTensorSpecs(w.LoRA)))
	}
	return engine.MulBytes(engine.SumBytes(stepSumsFixed, engine.MulBytes(2, int64(w.Micro)), tensors), 4)
}

// ForwardBackwardSum is ForwardBackward for an optimizer step: the batch's
// loss sums stay on the device, in micro-batch slot i of s, for Finish.
// The batch's weights (and report weights) are the caller's to sum: they
// are on the host already. Slot micro−1 of StepSums(micro) is the step's
// last micro-batch: on a grid its backward issues the gradients' sums
// over the data-parallel ranks as they become final (buckets.go), and
// ReduceGradients must follow.
func (m *Model) ForwardBackwardSum(batch Batch, scale float32, s *StepSums, i int) (err error) {
	if scale == 0 || math.IsNaN(float64(scale)) {
		return errors.New("llama: gradient scale must be non-zero")
	}
	if i < 0 || i >= s.micro {
		return errors.New("llama: micro-batch slot out of range of the step's sums")
	}
	if m.Options.FusedOptimizer {
		return errFusedPass
	}
	defer recoverComm(&err)
	ws, err := m.upload(batch, true)
	if err != nil {
		return err
	}
	if m.lora != nil {
		m.lora.keys = batch.Keys
	}
	m.forward(ws)
	if err := m.beginReduce(i == s.steps-1); err != nil {
		return err
	}
	m.tokenLossSums(ws, batch, scale, s.loss(i), s.report(i))
	m.backward(ws)
	return nil
}

// tokenLossSums runs headLoss and writes its two loss sums to the
// device: summed there, or, from the vocabulary-parallel cross-entropy,
// which computes its losses on the host (vocab.go), uploaded.
func (m *Model) tokenLossSums(ws *workspace, batch Batch, scale float32, loss, report *engine.Tensor) {
	b := m.backend
	hasReport := batch.ReportWeights != nil
	losses, reported := m.headLoss(ws, batch, scale, hasReport)
	switch {
	case losses != nil:
		b.Upload(loss, []float32{float32(sum64(losses))})
		b.Upload(report, []float32{float32(sum64(reported))})
		return
	case hasReport:
		b.Sum(report, ws.reportLosses)
	default:
		b.Fill(report, 0)
	}
	b.Sum(loss, ws.losses)
}

func sum64(xs []float32) float64 {
	s := 0.0
	for _, x := range xs {
		s += float64(x)
	}
	return s
}

// FinishStep completes s once the gradients are reduced (ReduceGradients)
// after the step's micro micro-batches: the global loss sums and the
// squared global gradient norm, all on the device. On a grid the sums are
// all-reduced over the world in one collective, each counted once: the
// losses by one X·Y rank of each data·Z coordinate (as SumBatch counts
// them), each gradient's squares by the one rank that counts its copy
// (countsGrad, by its split: a weight shard's by the first data replica,
// a norm weight's by the rank at y = z = 0 of that replica, and adapters
// — whole on every rank — by world rank 0 alone).
func (m *Model) FinishStep(s *StepSums, micro int) (err error) {
	if micro < 1 || micro > s.micro {
		return errors.New("llama: micro-batch count out of range of the step's sums")
	}
	if m.Options.FusedOptimizer {
		return errFusedPass // FusedStep leaves the sums finished
	}
	if m.reduce.inFlight() {
		return errors.New("llama: FinishStep before ReduceGradients: the gradients' sums are still in flight")
	}
	defer recoverComm(&err)
	m.sumLosses(s, micro)
	// Every gradient's squares in one multi-tensor launch pair, the
	// counted ones first: the slots' layout.
	grads := s.grads[:0]
	for _, counted := range []bool{true, false} {
		for _, p := range m.Trainable() {
			if m.countsGrad(p) == counted {
				grads = append(grads, p.Grad)
			}
		}
	}
	s.grads = grads
	m.backend.SumSquaresMulti(s.t.View(stepSumsFixed+2*s.micro, len(grads)), grads)
	m.sumNorm(s)
	m.exchangeStep(s)
	return nil
}

// sumLosses writes the step's loss sums, [1] and [3], from its micro
// micro-batches' slots.
func (m *Model) sumLosses(s *StepSums, micro int) {
	b, t := m.backend, s.t
	b.Sum(t.View(1, 1), t.View(stepSumsFixed, micro))
	b.Sum(t.View(3, 1), t.View(stepSumsFixed+s.micro, micro))
}

// gradCounts are how many trainable tensors this rank counts in the
// gradient norm (countsGrad) and how many it holds copies of.
func (m *Model) gradCounts() (counted, copies int) {
	for _, p := range m.Trainable() {
		if m.countsGrad(p) {
			counted++
		} else {
			copies++
		}
	}
	return counted, copies
}

// sumNorm writes the squared norms of the tensors this rank counts, [0],
// and of its copies, [2], from the tensors' slots.
func (m *Model) sumNorm(s *StepSums) {
	b, t := m.backend, s.t
	slots := stepSumsFixed + 2*s.micro
	counted, copies := m.gradCounts()
	b.Sum(t.View(0, 1), t.View(slots, counted))
	b.Sum(t.View(2, 1), t.View(slots+counted, copies))
}

// exchangeStep sums the step's norm and loss sums, [0, 4), over a grid's
// world in one all-reduce, each counted once (FinishStep says by which
// ranks; the copies' sum dropped), and leaves the total ‖g‖² in [0].
func (m *Model) exchangeStep(s *StepSums) {
	b, t := m.backend, s.t
	if g := m.Options.Parallel; g.World.Size() > 1 {
		// The copies' sum is dropped where it holds any (it is zero
		// already where every tensor counts: rank 0).
		_, copies := m.gradCounts()
		counts := [4]bool{true, g.CountsBatch(), copies == 0, g.CountsBatch()}
		for k, c := range counts {
			if !c {
				b.Fill(t.View(k, 1), 0)
			}
		}
		check(g.World.AllReduce(t.View(0, 4)))
	}
	b.Add(t.View(0, 1), t.View(0, 1), t.View(2, 1))
}

// StepValues are what Read returns: the global batch's loss sums and the
// gradient norm's square, before clipping.
type StepValues struct {
	NormSquared, Loss, Report float64
}

// Read downloads the step's sums, after Finish — and, to keep the device
// busy, after the update that reads them has been issued.
func (s *StepSums) Read() StepValues {
	s.b.Download(s.host[:], s.t.View(0, 4))
	return StepValues{NormSquared: float64(s.host[0]), Loss: float64(s.host[1]), Report: float64(s.host[3])}
}
