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
	// Keys, if not nil, name the B sequences for the adapters' dropout
	// (lora.go): a sequence's masks are a function of its key alone, so
	// that they do not depend on how a global batch is split into
	// micro-batches and over ranks, nor on a resume. nil keys the
	// sequences by their index in the batch.
	Keys []uint64
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
	case batch.Keys != nil && len(batch.Keys) != batch.B:
		return fmt.Errorf("llama: batch of %d sequences has %d dropout keys", batch.B, len(batch.Keys))
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
	m.vocabSlice(ws.sc, batch.IDs)
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
	if ws.ce != nil {
		clean = m.sliceTargets(ws.ce, clean)
	}
	b.UploadInt32(ws.targets, clean)
	b.Upload(ws.weights, weights)
	if train && batch.ReportWeights != nil {
		b.Upload(ws.reportWeights, batch.ReportWeights)
	}
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
// activations are kept (or those Options.Recompute keeps), and the pass
// goes on into backward.
func (m *Model) forward(ws *workspace) {
	B, T := ws.B, ws.T
	m.beginPass(m.units.forward(ws.train))
	m.embed(ws.inputs[0], m.nextWeights(m.units.embed)[0], ws.ids, ws.sc)
	L := len(m.Layers)
	for l := 0; l < L; l++ {
		w := blockOf(m.nextWeights(m.units.layers[l]))
		a := ws.layers[min(l, len(ws.layers)-1)]
		var in, out *engine.Tensor
		if ws.train {
			in, out = ws.inputs[l], ws.inputs[l+1]
		} else {
			in, out = ws.inputs[l%2], ws.inputs[(l+1)%2]
		}
		m.blockForward(l, w, a, in, out, ws.pos, ws.sc, ws.lora, B, T, nil)
	}
	var last *engine.Tensor
	if ws.train {
		last = ws.inputs[L]
	} else {
		last = ws.inputs[L%2]
	}
	m.rmsnorm(ws.lnf, ws.rstdf, last, m.Norm, ws.sc)
	ws.head = m.nextWeights(m.units.head)[0]
	if !ws.train { // a training pass goes on in headLoss, chunk by chunk
		m.linear(ws.logits, ws.lnf, ws.head, m.gx)
	}
}

// headLoss is a training pass's LM head, loss and head backward, a chunk
// of ws.logits' rows of token positions at a time (dims.headRows): each
// chunk's logits, its reported loss (report, under ws.reportWeights)
// while they are still logits, its loss and gradient in their place,
// then dlnf's rows and the head's weight gradient from them, so that the
// logits of the whole batch are never held. The losses are left in
// ws.losses and ws.reportLosses — or, from the vocabulary-parallel
// cross-entropy (Y > 1), returned on the host, chunk by chunk.
func (m *Model) headLoss(ws *workspace, batch Batch, scale float32, report bool) (hostLosses, hostReport []float32) {
	b, g := m.backend, ws.g
	N, H, V := ws.B*ws.T, m.d.H, m.d.V
	rows := ws.logits.Dim(0)
	var block *engine.Tensor // the head's Z-gradient block, across chunks
	for r0 := 0; r0 < N; r0 += rows {
		n := min(rows, N-r0)
		logits, lnf := ws.logits.View(0, n, V), ws.lnf.View(r0*H, n, H)
		m.linear(logits, lnf, ws.head, m.gx)
		// Mixed precision: the gradient, computed in float32, enters the
		// head's two products rounded to bf16 (as cuBLAS's bf16 compute
		// mode would round it anyway), so that they multiply bf16 by
		// bf16 and the float32 head is never needed; their sums stay
		// float32. Otherwise it replaces the logits in place.
		dlogits := logits
		if ws.dlogits != nil {
			dlogits = ws.dlogits.View(0, n, V)
		}
		if ws.ce != nil {
			var rep []float32
			if report {
				rep = batch.ReportWeights
			}
			if hostLosses == nil {
				hostLosses = make([]float32, N)
				if report {
					hostReport = make([]float32, N)
				}
			}
			l, lr := m.vocabCrossEntropy(ws, logits, r0, m.trainWeights(batch), rep, scale, true)
			copy(hostLosses[r0:], l)
			if report {
				copy(hostReport[r0:], lr)
			}
			if dlogits != logits {
				b.Copy(dlogits, logits)
			}
		} else {
			targets, weights, losses := ws.targets.View(r0, n), ws.weights.View(r0, n), ws.losses.View(r0, n)
			if report {
				b.CrossEntropy(ws.reportLosses.View(r0, n), nil, logits, targets, ws.reportWeights.View(r0, n), 0)
			}
			// CrossEntropy rounds a bf16 gradient row by row.
			b.CrossEntropy(losses, dlogits, logits, targets, weights, scale)
		}
		dlnf := g.dlnf.View(r0*H, n, H)
		m.inputGrad(dlnf, dlogits, ws.head, false)
		sum := m.startSum(dlnf, m.gy)
		block = m.headWeightGrad(dlogits, lnf, block, r0 == 0, r0+n == N)
		sum.wait()
	}
	return hostLosses, hostReport
}

// tokenLosses computes each position's weighted loss −w·log p(target) of
// a forward-only pass on the host. On Y ranks the vocabulary-parallel
// cross-entropy does it (vocab.go).
func (m *Model) tokenLosses(ws *workspace, batch Batch) []float32 {
	if ws.ce != nil {
		losses, _ := m.vocabCrossEntropy(ws, ws.logits, 0, m.trainWeights(batch), nil, 0, false)
		return losses
	}
	b := m.backend
	b.CrossEntropy(ws.losses, nil, ws.logits, ws.targets, ws.weights, 0)
	losses := make([]float32, ws.B*ws.T)
	b.Download(losses, ws.losses)
	return losses
}

// lossOf sums per-position losses in a fixed order, with weights (nil:
// all ones) for the weight sums.
func lossOf(losses []float32, B, T int, weights []float32) Loss {
	l := Loss{PerSeq: make([]float64, B), PerSeqWeight: make([]float64, B)}
	for s := 0; s < B; s++ {
		for t := 0; t < T; t++ {
			i := s*T + t
			w := 1.0
			if weights != nil {
				w = float64(weights[i])
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
// layer's activations at a time. On a grid the loss is of this rank's
// batch (its data·Z coordinate's); SumBatch adds the ranks' up.
func (m *Model) Evaluate(batch Batch) (l Loss, err error) {
	defer recoverComm(&err)
	ws, err := m.upload(batch, false)
	if err != nil {
		return Loss{}, err
	}
	m.forward(ws)
	losses := m.tokenLosses(ws, batch)
	return lossOf(losses, ws.B, ws.T, batch.Weights), nil
}

// TokenLosses runs a forward pass and returns each position's weighted
// negative log-likelihood, −w·log p(target) (B·T values, 0 where the weight
// is 0): what per-token scores such as min-k% probability need.
func (m *Model) TokenLosses(batch Batch) (out []float32, err error) {
	defer recoverComm(&err)
	ws, err := m.upload(batch, false)
	if err != nil {
		return nil, err
	}
	m.forward(ws)
	losses := m.tokenLosses(ws, batch)
	return losses, nil
}

// ForwardBackward computes the batch's loss and adds scale × its gradient
// (the gradient of scale·Σ w·CE) into the parameters' gradients. To train
// on the mean over a global batch of many micro-batches, pass
// scale = 1 / (the global batch's total weight) to each.
//
// On a grid every rank calls it with its data·Z coordinate's batch (the
// X·Y ranks of a coordinate with the same one), and the same scale; the
// loss returned is that batch's, and the gradients are this rank's
// shards', still to be summed over the data-parallel replicas
// (ReduceGradients, after the last micro-batch; call LastMicroBatch
// before the last one to overlap those sums with its backward).
func (m *Model) ForwardBackward(batch Batch, scale float32) (l Loss, err error) {
	if scale == 0 || math.IsNaN(float64(scale)) {
		return Loss{}, errors.New("llama: gradient scale must be non-zero")
	}
	if m.Options.FusedOptimizer {
		return Loss{}, errFusedPass
	}
	defer recoverComm(&err)
	ws, err := m.upload(batch, true)
	if err != nil {
		return Loss{}, err
	}
	if m.lora != nil {
		m.lora.keys = batch.Keys
	}
	m.forward(ws)
	if err := m.beginReduce(false); err != nil {
		return Loss{}, err
	}
	report := batch.ReportWeights != nil
	losses, reported := m.headLoss(ws, batch, scale, report)
	m.backward(ws)
	n := ws.B * ws.T
	if losses == nil {
		losses = make([]float32, n)
		b := m.backend
		b.Download(losses, ws.losses)
		if report {
			reported = make([]float32, n)
			b.Download(reported, ws.reportLosses)
		}
	}
	l = lossOf(losses, ws.B, ws.T, batch.Weights)
	if report {
		r := lossOf(reported, ws.B, ws.T, batch.ReportWeights)
		l.ReportSum, l.ReportWeight = r.Sum, r.Weight
	}
	return l, nil
}

// backward propagates the final norm's output gradient (left in dlnf by
// headLoss) back through the model.
func (m *Model) backward(ws *workspace) {
	g := ws.g
	B, T, L := ws.B, ws.T, len(m.Layers)
	if m.Head != m.Embed {
		m.wroteGrad(m.Head) // headLoss wrote its last chunk (a tied head's is not the last write)
		m.fusedDone(m.Head)
	}
	m.fusedBegin(m.Norm)
	m.rmsnormBackward(g.dx, m.Norm, g.dlnf, ws.inputs[L], ws.lnf, ws.rstdf, ws.sc)
	m.wroteGrad(m.Norm)
	m.fusedDone(m.Norm)
	for l := L - 1; l >= 0; l-- {
		w := blockOf(m.nextWeights(m.units.layers[l]))
		a := ws.layers[min(l, len(ws.layers)-1)]
		switch m.Options.Recompute {
		case RecomputeFull:
			m.blockForward(l, w, a, ws.inputs[l], nil, ws.pos, ws.sc, ws.lora, B, T, nil)
		case RecomputeSelective:
			// The last layer's are still in the shared buffers, from the
			// forward pass.
			if l < L-1 {
				m.recomputeSelective(l, a, ws.inputs[l], ws.sc)
			}
		}
		m.fusedBegin(m.layerParams(l)...)
		m.blockBackward(l, w, a, ws.inputs[l], g.dx, ws.pos, g, ws.sc, ws.lora, B, T)
		m.layerGradsFinal(l)
		m.fusedDone(m.layerParams(l)...)
	}
	m.fusedBegin(m.Embed)
	if m.Embed.Grad != nil { // a frozen embedding (adapters) takes no gradient
		m.embedBackward(g.dx, ws.ids, ws.sc)
		m.wroteGrad(m.Embed)
	}
	if m.zg != nil {
		m.zg.finish(m, nil)
	}
	m.fusedDone(m.Embed)
	m.endBackwardReduce()
}

// Logits runs a forward pass and returns the logits [B·T·V] on the host.
// On Y ranks each slice of the vocabulary is gathered from its rank (over
// the y group).
func (m *Model) Logits(batch Batch) (out []float32, err error) {
	defer recoverComm(&err)
	if batch.Targets == nil {
		batch.Targets = make([]int32, len(batch.IDs))
		batch.Weights = make([]float32, len(batch.IDs))
	}
	ws, err := m.upload(batch, false)
	if err != nil {
		return nil, err
	}
	m.forward(ws)
	local := make([]float32, ws.logits.Len())
	m.backend.Download(local, ws.logits)
	if m.gy == nil {
		return local, nil
	}
	n, V, Y := ws.B*ws.T, m.d.V, m.d.y
	all := m.backend.Alloc(engine.F32, Y*len(local))
	defer m.backend.Free(all)
	check(m.gy.AllGather(all, ws.logits))
	slices := make([]float32, all.Len())
	m.backend.Download(slices, all)
	out = make([]float32, n*V*Y)
	for y := 0; y < Y; y++ {
		for i := 0; i < n; i++ {
			copy(out[i*V*Y+y*V:i*V*Y+(y+1)*V], slices[(y*n+i)*V:(y*n+i+1)*V])
		}
	}
	return out, nil
}

// FLOPsPerToken is the model FLOPs one trained token costs at sequence
// length T (engine.ModelFLOPsPerToken).
func (m *Model) FLOPsPerToken(T int) float64 { return engine.ModelFLOPsPerToken(m.Config, T) }
