package llama

import (
	"errors"
	"fmt"
	"math"

	"github.com/memtrain/memtrain/engine"
)

// A Batch is B sequences of T tokens with their targets and per-target
// loss weights, flattened row-major (index b·T + t).
type Batch struct {
	B, T    int
	IDs     []int32
	Targets []int32   // the token each position predicts; ignored where the weight is 0
	Weights []float32 // 0/1 per target (goldfish mask, padding); nil means all ones
	// ReportWeights, if not nil, weight a second loss that is only
	// reported, not trained on: e.g. every non-padding target, while
	// Weights also drops the goldfish-masked ones.
	ReportWeights []float32
}

// Loss is the weighted cross-entropy of a batch, unnormalised so that
// callers can normalise over a whole global batch:
//
//	Sum = Σ w·(−log p(target)),  Weight = Σ w
type Loss struct {
	Sum, Weight float64
	// PerSeq and PerSeqWeight are the same sums for each sequence.
	PerSeq, PerSeqWeight []float64
	// ReportSum and ReportWeight are the sums under Batch.ReportWeights
	// (zero when it is nil).
	ReportSum, ReportWeight float64
}

// Mean is Sum / Weight, the loss as reported (NaN when nothing is weighted).
func (l Loss) Mean() float64 {
	if l.Weight == 0 {
		return math.NaN()
	}
	return l.Sum / l.Weight
}

// Validate checks a batch against the model before any kernel sees it.
func (m *Model) Validate(batch Batch) error {
	cfg := m.Config
	n := batch.B * batch.T
	switch {
	case batch.B <= 0 || batch.T <= 0:
		return fmt.Errorf("llama: empty batch (%d sequences of %d tokens)", batch.B, batch.T)
	case batch.T > cfg.MaxPositionEmbeddings:
		return fmt.Errorf("llama: sequence length %d exceeds max_position_embeddings %d", batch.T, cfg.MaxPositionEmbeddings)
	case len(batch.IDs) != n || len(batch.Targets) != n:
		return fmt.Errorf("llama: batch of %d×%d needs %d ids and targets, got %d and %d", batch.B, batch.T, n, len(batch.IDs), len(batch.Targets))
	case batch.Weights != nil && len(batch.Weights) != n:
		return fmt.Errorf("llama: batch of %d×%d needs %d weights, got %d", batch.B, batch.T, n, len(batch.Weights))
	case batch.ReportWeights != nil && len(batch.ReportWeights) != n:
		return fmt.Errorf("llama: batch of %d×%d needs %d report weights, got %d", batch.B, batch.T, n, len(batch.ReportWeights))
	}
	v := int32(cfg.VocabSize)
	for i, id := range batch.IDs {
		if id < 0 || id >= v {
			return fmt.Errorf("llama: token id %d at position %d outside the vocabulary [0, %d)", id, i, v)
		}
	}
	for i, t := range batch.Targets {
		w := float32(1)
		if batch.Weights != nil {
			w = batch.Weights[i]
		}
		if w < 0 || math.IsNaN(float64(w)) || math.IsInf(float64(w), 0) {
			return fmt.Errorf("llama: loss weight %v at position %d (want a finite non-negative number)", w, i)
		}
		if batch.ReportWeights != nil {
			r := batch.ReportWeights[i]
			if r < 0 || math.IsNaN(float64(r)) || math.IsInf(float64(r), 0) {
				return fmt.Errorf("llama: report weight %v at position %d (want a finite non-negative number)", r, i)
			}
			w += r
		}
		if w != 0 && (t < 0 || t >= v) {
			return fmt.Errorf("llama: target id %d at position %d outside the vocabulary [0, %d)", t, i, v)
		}
	}
	return nil
}

// upload validates the batch and copies it into the workspace.
func (m *Model) upload(batch Batch, train bool) (*workspace, error) {
	if err := m.Validate(batch); err != nil {
		return nil, err
	}
	ws := m.prepare(batch.B, batch.T, train)
	b := m.backend
	b.UploadInt32(ws.ids, batch.IDs)
	targets := batch.Targets
	weights := m.trainWeights(batch)
	// Zero-weight targets may be anything (−1, −100); give the kernels a
	// valid id so that no backend has to special-case them.
	clean := make([]int32, len(targets))
	for i, t := range targets {
		if weights[i] != 0 || (batch.ReportWeights != nil && batch.ReportWeights[i] != 0) {
			clean[i] = t
		}
	}
	b.UploadInt32(ws.targets, clean)
	b.Upload(ws.weights, weights)
	return ws, nil
}

// trainWeights returns the batch's loss weights, all ones when none are given.
func (m *Model) trainWeights(batch Batch) []float32 {
	if batch.Weights != nil {
		return batch.Weights
	}
	w := make([]float32, len(batch.Targets))
	for i := range w {
		w[i] = 1
	}
	return w
}

// forward runs the model to the logits. In training mode every layer's
// activations are kept (or only its input, with recomputation).
func (m *Model) forward(ws *workspace) {
	b := m.backend
	B, T := ws.B, ws.T
	b.Embedding(ws.inputs[0], m.Embed.Value, ws.ids)
	L := len(m.Layers)
	for l := 0; l < L; l++ {
		a := ws.layers[min(l, len(ws.layers)-1)]
		var in, out *engine.Tensor
		if ws.train {
			in, out = ws.inputs[l], ws.inputs[l+1]
		} else {
			in, out = ws.inputs[l%2], ws.inputs[(l+1)%2]
		}
		m.blockForward(l, a, in, out, ws.pos, B, T)
	}
	var last *engine.Tensor
	if ws.train {
		last = ws.inputs[L]
	} else {
		last = ws.inputs[L%2]
	}
	b.RMSNorm(ws.lnf, ws.rstdf, last, m.Norm.Value, float32(m.Config.RMSNormEps))
	m.linear(ws.logits, ws.lnf, m.Head, false)
}

// lossOf downloads the per-position losses and sums them in a fixed order.
func (m *Model) lossOf(ws *workspace, batch Batch) Loss {
	losses := make([]float32, ws.B*ws.T)
	m.backend.Download(losses, ws.losses)
	l := Loss{PerSeq: make([]float64, ws.B), PerSeqWeight: make([]float64, ws.B)}
	for s := 0; s < ws.B; s++ {
		for t := 0; t < ws.T; t++ {
			i := s*ws.T + t
			w := 1.0
			if batch.Weights != nil {
				w = float64(batch.Weights[i])
			}
			l.PerSeq[s] += float64(losses[i])
			l.PerSeqWeight[s] += w
		}
		l.Sum += l.PerSeq[s]
		l.Weight += l.PerSeqWeight[s]
	}
	return l
}

// Evaluate computes the batch's loss without gradients, keeping only one
// layer's activations at a time.
func (m *Model) Evaluate(batch Batch) (Loss, error) {
	ws, err := m.upload(batch, false)
	if err != nil {
		return Loss{}, err
	}
	m.forward(ws)
	m.backend.CrossEntropy(ws.losses, nil, ws.logits, ws.targets, ws.weights, 0)
	return m.lossOf(ws, batch), nil
}

// TokenLosses runs a forward pass and returns each position's weighted
// negative log-likelihood, −w·log p(target) (B·T values, 0 where the weight
// is 0): what per-token scores such as min-k% probability need.
func (m *Model) TokenLosses(batch Batch) ([]float32, error) {
	ws, err := m.upload(batch, false)
	if err != nil {
		return nil, err
	}
	m.forward(ws)
	m.backend.CrossEntropy(ws.losses, nil, ws.logits, ws.targets, ws.weights, 0)
	out := make([]float32, batch.B*batch.T)
	m.backend.Download(out, ws.losses)
	return out, nil
}

// ForwardBackward computes the batch's loss and adds scale × its gradient
// (the gradient of scale·Σ w·CE) into the parameters' gradients. To train
// on the mean over a global batch of many micro-batches, pass
// scale = 1 / (the global batch's total weight) to each.
func (m *Model) ForwardBackward(batch Batch, scale float32) (Loss, error) {
	if scale == 0 || math.IsNaN(float64(scale)) {
		return Loss{}, errors.New("llama: gradient scale must be non-zero")
	}
	ws, err := m.upload(batch, true)
	if err != nil {
		return Loss{}, err
	}
	m.forward(ws)
	var report Loss
	if batch.ReportWeights != nil {
		// The reported loss first, while the logits are still logits.
		m.backend.Upload(ws.weights, batch.ReportWeights)
		m.backend.CrossEntropy(ws.losses, nil, ws.logits, ws.targets, ws.weights, 0)
		report = m.lossOf(ws, Batch{B: batch.B, T: batch.T, Weights: batch.ReportWeights})
		m.backend.Upload(ws.weights, m.trainWeights(batch))
	}
	m.backend.CrossEntropy(ws.losses, ws.logits, ws.logits, ws.targets, ws.weights, scale)
	m.backward(ws)
	l := m.lossOf(ws, batch)
	l.ReportSum, l.ReportWeight = report.Sum, report.Weight
	return l, nil
}

// backward propagates the logits' gradient (left in ws.logits by the
// loss) back through the model.
func (m *Model) backward(ws *workspace) {
	b, g := m.backend, ws.g
	B, T, L := ws.B, ws.T, len(m.Layers)
	m.linearBackward(g.dlnf, ws.logits, ws.lnf, m.Head, false)
	b.RMSNormBackward(g.dx, m.Norm.Grad, g.dlnf, ws.inputs[L], m.Norm.Value, ws.rstdf)
	for l := L - 1; l >= 0; l-- {
		a := ws.layers[min(l, len(ws.layers)-1)]
		if m.Options.Recompute {
			m.blockForward(l, a, ws.inputs[l], nil, ws.pos, B, T)
		}
		m.blockBackward(l, a, ws.inputs[l], g.dx, ws.pos, g, B, T)
	}
	b.EmbeddingBackward(m.Embed.Grad, g.dx, ws.ids)
}

// Logits runs a forward pass and returns the logits [B·T·V] on the host.
func (m *Model) Logits(batch Batch) ([]float32, error) {
	if batch.Targets == nil {
		batch.Targets = make([]int32, len(batch.IDs))
		batch.Weights = make([]float32, len(batch.IDs))
	}
	ws, err := m.upload(batch, false)
	if err != nil {
		return nil, err
	}
	m.forward(ws)
	out := make([]float32, ws.logits.Len())
	m.backend.Download(out, ws.logits)
	return out, nil
}

// FLOPsPerToken is the model FLOPs one trained token costs at sequence
// length T (engine.ModelFLOPsPerToken).
func (m *Model) FLOPsPerToken(T int) float64 { return engine.ModelFLOPsPerToken(m.Config, T) }
