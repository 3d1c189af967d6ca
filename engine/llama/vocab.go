package llama

import (
	"math"

	"github.com/memtrain/memtrain/engine"
)

// ceScratch is what the vocabulary-parallel cross-entropy and argmax
// need for up to n rows of logits when Y ranks split the vocabulary.
type ceScratch struct {
	idx   *engine.Tensor // I32 [n]: each row's argmax within this rank's slice
	flat  *engine.Tensor // I32 [2n]: positions in the flattened logits: the argmaxes, then the targets
	vals  *engine.Tensor // [2n]: the logits there
	ones  *engine.Tensor // [n]
	r     *engine.Tensor // [n]: log Σ_j exp(l_j − max) over the slice
	all   *engine.Tensor // [Y·2n]: what every Y rank brings to an all-gather
	stats *engine.Tensor // [2n]: sums of exponentials and target logits
	corr  *engine.Tensor // [n]: corrections of the gradient at the targets

	// Host side: each row's target within this slice (0 when it is in
	// another, with inSlice false), and copies of the statistics.
	tloc                         []int32
	inSlice                      []bool
	hIdx, hFlat                  []int32
	hVals, hR, hAll, hSent, hSum []float32
	hW, hCorr                    []float32
}

func cePlan(d dims, n int) []tensorPlan {
	if d.y == 1 {
		return nil
	}
	return []tensorPlan{
		{"ce_idx", engine.I32, []int{n}},
		{"ce_flat", engine.I32, []int{2 * n}},
		{"ce_vals", engine.F32, []int{2 * n, 1}},
		{"ce_ones", engine.F32, []int{n}},
		{"ce_r", engine.F32, []int{n}},
		{"ce_all", engine.F32, []int{d.y * 2 * n}},
		{"ce_stats", engine.F32, []int{2 * n}},
		{"ce_corr", engine.F32, []int{n, 1}},
	}
}

func newCEScratch(d dims, n int, next func() *engine.Tensor) *ceScratch {
	if cePlan(d, n) == nil {
		return nil
	}
	c := &ceScratch{idx: next(), flat: next(), vals: next(), ones: next(), r: next(), all: next(), stats: next(), corr: next()}
	c.tloc, c.inSlice = make([]int32, n), make([]bool, n)
	c.hIdx, c.hFlat = make([]int32, n), make([]int32, 2*n)
	c.hVals, c.hR, c.hAll = make([]float32, 2*n), make([]float32, n), make([]float32, d.y*2*n)
	c.hSent, c.hSum = make([]float32, 2*n), make([]float32, 2*n)
	c.hW, c.hCorr = make([]float32, n), make([]float32, n)
	return c
}

func (c *ceScratch) tensors() []*engine.Tensor {
	if c == nil {
		return nil
	}
	return []*engine.Tensor{c.idx, c.flat, c.vals, c.ones, c.r, c.all, c.stats, c.corr}
}

// sliceTargets maps targets (valid ids, or anything where no weight
// needs them) to this rank's vocabulary slice: the local id, or 0 with
// inSlice false when another rank holds it. It returns the local ids.
func (m *Model) sliceTargets(c *ceScratch, targets []int32) []int32 {
	for i, t := range targets {
		local := int(t) - m.d.v0
		c.inSlice[i] = local >= 0 && local < m.d.V
		c.tloc[i] = 0
		if c.inSlice[i] {
			c.tloc[i] = int32(local)
		}
	}
	return c.tloc[:len(targets)]
}

// vocabCrossEntropy is the weighted cross-entropy of logits [n, V/Y]
// (this rank's vocabulary slice of rows r0 … r0+n−1 of the batch: all of
// ws.logits, or a training pass's head chunk of them, headLoss) against
// the targets that upload mapped to the slice (ws.targets, ce.tloc): the
// losses −w·log p(target) of those rows on the host, under weights and,
// if not nil, under report (both indexed by the batch's rows). With grad
// it also leaves scale·w·(p − onehot), the gradient of scale·Σ w·CE, in
// logits, as the one-rank kernel does.
//
// Per row, with M the maximum logit over the whole vocabulary:
//
//	this slice: its maximum and r = log Σ_slice exp(l − max) (Argmax, and
//	  CrossEntropy against the argmax with weight 1), and the target's
//	  logit if the slice holds it (an Embedding of single elements);
//	all-gather over Y of the slices' maxima → M;
//	all-reduce over Y of s = Σ_slice exp(l − M) and the target logit
//	  (zero where the slice does not hold it) → S, l_t;
//	loss = M + log S − l_t.
//
// The gradient is the kernel's on this slice with the row's weight w
// scaled by ρ = s/S, the slice's share of the probability, which makes
// its softmax the global one; the kernel then subtracts w·ρ at the local
// target (or at id 0 when the target is elsewhere) where w (or nothing)
// is due, which one element per row, added with an EmbeddingBackward,
// corrects. The statistics stay float32 (float64 on the host), whatever
// the activations' dtype: the logits are float32.
func (m *Model) vocabCrossEntropy(ws *workspace, logits *engine.Tensor, r0 int, weights, report []float32, scale float32, grad bool) (losses, reportLosses []float32) {
	b, c, Y := m.backend, ws.ce, m.d.y
	n, V := logits.Dim(0), m.d.V
	per := m.flatRows(V)
	idx, flat, vals, ones, r := c.idx.View(0, n), c.flat.View(0, 2*n), c.vals.View(0, 2*n, 1), c.ones.View(0, n), c.r.View(0, n)
	stats, corr, all := c.stats.View(0, 2*n), c.corr.View(0, n, 1), c.all.View(0, Y*n)
	hIdx, hFlat, hVals, hR, hAll := c.hIdx[:n], c.hFlat[:2*n], c.hVals[:2*n], c.hR[:n], c.hAll[:Y*n]
	hSent, hSum := c.hSent[:2*n], c.hSum[:2*n]
	tloc, inSlice := c.tloc[r0:r0+n], c.inSlice[r0:r0+n]
	targets, tw, tl := ws.targets.View(r0, n), ws.weights.View(r0, n), ws.losses.View(r0, n)

	b.Argmax(idx, logits)
	b.DownloadInt32(hIdx, idx)
	for i := 0; i < n; i++ {
		base := int32((i % per) * V) // within its chunk's flat table
		hFlat[i] = base + hIdx[i]
		hFlat[n+i] = base + tloc[i]
	}
	b.UploadInt32(flat, hFlat)
	m.eachFlatChunk(logits, n, V, func(q0, q1 int, table *engine.Tensor) {
		for _, part := range [2]int{0, n} { // the argmaxes, then the targets
			b.Embedding(vals.View(part+q0, q1-q0, 1), table, flat.View(part+q0, q1-q0))
		}
	})
	b.Fill(ones, 1)
	b.CrossEntropy(r, nil, logits, idx, ones, 0)
	check(m.gy.AllGather(all, vals.View(0, n)))
	b.Download(hVals, vals)
	b.Download(hR, r)
	b.Download(hAll, all)

	maxOf := make([]float64, n)
	for i := 0; i < n; i++ {
		mx := float64(hAll[i])
		for y := 1; y < Y; y++ {
			mx = math.Max(mx, float64(hAll[y*n+i]))
		}
		maxOf[i] = mx
		hSent[i] = float32(math.Exp(float64(hVals[i]) - mx + float64(hR[i])))
		hSent[n+i] = 0
		if inSlice[i] {
			hSent[n+i] = hVals[n+i]
		}
	}
	b.Upload(stats, hSent)
	allReduce(stats, m.gy)
	b.Download(hSum, stats)

	losses = make([]float32, n)
	if report != nil {
		reportLosses = make([]float32, n)
	}
	for i := 0; i < n; i++ {
		ce := maxOf[i] + math.Log(float64(hSum[i])) - float64(hSum[n+i])
		if w := weights[r0+i]; w != 0 {
			losses[i] = float32(float64(w) * ce)
		}
		if report != nil && report[r0+i] != 0 {
			reportLosses[i] = float32(float64(report[r0+i]) * ce)
		}
	}
	if !grad {
		return losses, reportLosses
	}
	hW, hCorr := c.hW[:n], c.hCorr[:n]
	for i := 0; i < n; i++ {
		w := weights[r0+i]
		hW[i], hCorr[i] = 0, 0
		if w == 0 {
			continue
		}
		rho := float64(hSent[i]) / float64(hSum[i])
		hW[i] = float32(float64(w) * rho)
		due := 0.0
		if inSlice[i] {
			due = float64(w)
		}
		hCorr[i] = float32(float64(scale) * (float64(hW[i]) - due))
	}
	b.Upload(tw, hW)
	b.CrossEntropy(tl, logits, logits, targets, tw, scale)
	b.Upload(corr, hCorr)
	m.eachFlatChunk(logits, n, V, func(q0, q1 int, table *engine.Tensor) {
		b.EmbeddingBackward(table, corr.View(q0, q1-q0, 1), flat.View(n+q0, q1-q0))
	})
	return losses, reportLosses
}

// argmax writes the index of each row's largest logit (the lowest on
// ties; NaN counts as largest, as torch.argmax) into out, for logits
// [n, V/Y]: on Y ranks each slice's winner and its value are all-gathered
// and the best taken, slices in vocabulary order.
func (m *Model) argmax(out []int32, logits *engine.Tensor, c *ceScratch) {
	b := m.backend
	n := logits.Dim(0)
	if m.gy == nil {
		idx := c.idx.View(0, n)
		b.Argmax(idx, logits)
		b.DownloadInt32(out, idx)
		return
	}
	V, Y := m.d.V, m.d.y
	idx, flatIDs, vals := c.idx.View(0, n), c.flat.View(0, n), c.vals.View(0, n, 1)
	b.Argmax(idx, logits)
	b.DownloadInt32(c.hIdx[:n], idx)
	per := m.flatRows(V)
	for i := 0; i < n; i++ {
		c.hFlat[i] = int32((i%per)*V) + c.hIdx[i]
	}
	b.UploadInt32(flatIDs, c.hFlat[:n])
	m.eachFlatChunk(logits, n, V, func(r0, r1 int, table *engine.Tensor) {
		b.Embedding(vals.View(r0, r1-r0, 1), table, flatIDs.View(r0, r1-r0))
	})
	b.Download(c.hVals[:n], vals)
	// Each slice sends its best value and, as the float32 with the same
	// bits, its global id: an all-gather copies bits, so any id survives.
	for i := 0; i < n; i++ {
		c.hSent[i] = c.hVals[i]
		c.hSent[n+i] = math.Float32frombits(uint32(int32(m.d.v0) + c.hIdx[i]))
	}
	sent, all := c.stats.View(0, 2*n), c.all.View(0, Y*2*n)
	b.Upload(sent, c.hSent[:2*n])
	check(m.gy.AllGather(all, sent))
	b.Download(c.hAll[:Y*2*n], all)
	for i := 0; i < n; i++ {
		best := float32(0)
		for y := 0; y < Y; y++ {
			v := c.hAll[y*2*n+i]
			id := int32(math.Float32bits(c.hAll[y*2*n+n+i]))
			switch {
			case y == 0, v > best && !isNaN(best), isNaN(v) && !isNaN(best):
				best, out[i] = v, id
			}
		}
	}
}

func isNaN(v float32) bool { return v != v }

// flatRows is how many rows of logits [n, V] one flat gather takes. The
// cross-entropy reads and corrects one logit a row by viewing rows as a
// flat [rows·V, 1] table for Embedding and EmbeddingBackward, whose ids
// are int32: rows·V must stay below 2³¹ (16K tokens of a 128K vocabulary
// slice already reach it), so larger batches go in chunks of rows.
func (m *Model) flatRows(V int) int {
	if m.flatRowsLimit > 0 {
		return m.flatRowsLimit
	}
	return max(1, math.MaxInt32/V)
}

// eachFlatChunk calls f for each chunk [r0, r1) of flatRows rows of logits
// [n, V], with the chunk viewed as one flat table [(r1−r0)·V, 1]; a row i's
// ids in it are (i mod flatRows)·V + column.
func (m *Model) eachFlatChunk(logits *engine.Tensor, n, V int, f func(r0, r1 int, table *engine.Tensor)) {
	per := m.flatRows(V)
	for r0 := 0; r0 < n; r0 += per {
		r1 := min(n, r0+per)
		f(r0, r1, logits.View(r0*V, (r1-r0)*V, 1))
	}
}
