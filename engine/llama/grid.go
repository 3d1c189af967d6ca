package llama

// The layers on a grid of ranks (Options.Parallel), after AxoNN; DESIGN.md
// ("AxoNN 4D algorithm") and engine/perfmodel have the layout. In short,
// for m tokens of one (data, z) coordinate, shared by its X·Y ranks:
//
//   - the residual stream is [m, H/X] on every rank, replicated over Y;
//   - q/k/v, gate/up and the LM head take it and multiply by their (x, y)
//     block [out/Y, H/X]: partial sums over X, all-reduced over X, give
//     heads, intermediate features or vocabulary split over Y; o_proj and
//     down_proj ("transposed", blocks [H/X, in/Y]) take those and give
//     partial sums over Y of the stream, all-reduced over Y. In the
//     backward pass the roles swap: input gradients are all-reduced over
//     the other axis, weight gradients are local;
//   - attention needs nothing: each rank has whole heads (Y divides the
//     query and key/value heads);
//   - RMSNorm all-reduces each token's sum of squares over X (and, in the
//     backward pass, its Σ dy·y);
//   - the embedding looks up the ids of this rank's vocabulary slice (the
//     others give zero rows) and all-reduces over Y; the cross-entropy is
//     vocabulary-parallel over Y;
//   - Z: every weight block is split over Z; it is all-gathered before use
//     (zWeights) and its gradient reduce-scattered (zGrads).
//
// On one rank every group has one rank: the helpers below then call the
// plain kernels, so the one-rank model is exactly what it always was.
//
// Small per-token statistics (a norm's rstd, the cross-entropy's maxima
// and sums) are combined on the host between kernels, in float64: a few
// numbers per token, where the backend has no kernel for the scalar math.
//
// Mixed precision (bf16 activations): a sum over ranks of partial
// products is formed in float32 and rounded to bf16 once — each rank's
// partial product goes into a float32 accumulator (scratch.acc, through
// partial), the accumulators are all-reduced in float32, and the sum is
// rounded into the bf16 activation (roundSum) — rather than rounding
// each partial product and then their sum. The norms' statistics, the
// logits and the cross-entropy stay float32 as on one rank; the Z
// all-gathers move the bf16 weight copies (zshard.go).

import (
	"math"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// commFailure carries a collective's error from deep inside a pass up to
// the exported method, which returns it (recoverComm). A rank whose
// collective failed must not be used further: its group is broken.
type commFailure struct{ err error }

func check(err error) {
	if err != nil {
		panic(commFailure{err})
	}
}

// recoverComm turns a commFailure panic into *err; other panics go on.
func recoverComm(err *error) {
	if r := recover(); r != nil {
		f, ok := r.(commFailure)
		if !ok {
			panic(r)
		}
		*err = f.err
	}
}

// allReduce sums t over group c; nil is a group of one rank.
func allReduce(t *engine.Tensor, c comm.Comm) {
	if c != nil {
		check(c.AllReduce(t))
	}
}

// pendingSum is an all-reduce that may still be running, and the
// rounding of its float32 sum into a bf16 activation gradient after it.
type pendingSum struct {
	m        *Model
	req      comm.Request
	out, acc *engine.Tensor
}

func (p pendingSum) wait() {
	if p.req != nil {
		check(p.req.Wait())
	}
	if p.acc != p.out {
		p.m.backend.Copy(p.out, p.acc)
	}
}

// startSum all-reduces an input gradient over c: in the background with
// OAR, so that the weight gradient is computed meanwhile, or at once. A
// bf16 gradient t was accumulated in float32 (inputGrad: partial(t)),
// which is what is summed; wait rounds the sum into t.
func (m *Model) startSum(t *engine.Tensor, c comm.Comm) pendingSum {
	p := pendingSum{m: m, out: t, acc: m.partial(t)}
	switch {
	case c == nil:
	case m.Options.Parallel.Overlap.AllReduce:
		p.req = c.IAllReduce(p.acc)
	default:
		check(c.AllReduce(p.acc))
	}
	return p
}

// partial returns the float32 tensor in which the partial sums of out,
// a bf16 activation or its gradient on a grid, are formed before they
// are summed over ranks and rounded once into out (roundSum, startSum):
// a view of the grid's accumulator shaped as out. Otherwise it returns
// out itself: a float32 tensor, or one rank's bf16 one, which its kernel
// rounds once anyway. One accumulator serves every sum, so a sum must be
// rounded into its output before the next one starts: the passes form
// and sum them one at a time.
func (m *Model) partial(out *engine.Tensor) *engine.Tensor {
	if m.ws == nil || m.ws.sc == nil || m.ws.sc.acc == nil || out.DType() != engine.BF16 {
		return out
	}
	return m.ws.sc.acc.View(0, out.Shape...)
}

// roundSum all-reduces acc (partial(out)) over c, a nil c being a group
// of one rank, and rounds the float32 sum once into out.
func (m *Model) roundSum(out, acc *engine.Tensor, c comm.Comm) {
	allReduce(acc, c)
	if acc != out {
		m.backend.Copy(out, acc)
	}
}

// rowDots writes dst[i] = Σ_j a[i,j]·b[i,j] for a, b [n,k]: a batch of n
// one-by-one GEMMs.
func (m *Model) rowDots(dst, a, b *engine.Tensor) {
	n, k := a.Dim(0), a.Dim(1)
	m.backend.Gemm(engine.GemmParams{TransB: true, M: 1, N: 1, K: k, Alpha: 1, LDA: k, LDB: k, LDC: 1,
		Batch: n, StrideA: k, StrideB: k, StrideC: 1}, a, b, dst)
}

// scaleRows writes dst[i] = s[i]·src[i] + beta·dst[i] for rows of [n,k]:
// a batch of n rank-one GEMMs. dst and src must not overlap.
func (m *Model) scaleRows(dst, src, s *engine.Tensor, beta float32) {
	n, k := src.Dim(0), src.Dim(1)
	m.backend.Gemm(engine.GemmParams{M: 1, N: k, K: 1, Alpha: 1, Beta: beta, LDA: 1, LDB: k, LDC: k,
		Batch: n, StrideA: 1, StrideB: k, StrideC: k}, s, src, dst)
}

// scratch is what the grid's norms and embedding need for up to rows
// token positions, with host copies of the per-token statistics.
type scratch struct {
	tmp         *engine.Tensor // [rows, H/X]: RMSNorm's local output, the embedding's looked-up rows
	acc         *engine.Tensor // F32 [rows·max(H/X, Q/Y, I/Y)] with bf16 activations (partial); else nil
	stat, stat2 *engine.Tensor // [rows]
	ids         *engine.Tensor // I32 [rows]: ids within this rank's vocabulary slice, 0 outside it
	mask        *engine.Tensor // [rows]: 1 for ids in the slice, 0 outside
	h1, h2, h3  []float32
	hids        []int32
}

// scratchPlan lists the scratch tensors a rank needs for n token
// positions: none on one rank.
func scratchPlan(d dims, n int) []tensorPlan {
	if d.x == 1 && d.y == 1 {
		return nil
	}
	p := []tensorPlan{
		{"grid_tmp", engine.F32, []int{n, d.H}},
		{"grid_stat", engine.F32, []int{n}},
		{"grid_stat2", engine.F32, []int{n}},
		{"grid_ids", engine.I32, []int{n}},
		{"grid_mask", engine.F32, []int{n}},
	}
	if d.act == engine.BF16 {
		// The widest activation summed over ranks: the stream [n, H/X],
		// the attention's [n, Q/Y] or the MLP's [n, I/Y] (K and V are
		// narrower than Q).
		p = append(p, tensorPlan{"grid_acc", engine.F32, []int{n * max(d.H, d.Q, d.I)}})
	}
	return p
}

func newScratch(d dims, n int, next func() *engine.Tensor) *scratch {
	if scratchPlan(d, n) == nil {
		return nil
	}
	s := &scratch{tmp: next(), stat: next(), stat2: next(), ids: next(), mask: next()}
	if d.act == engine.BF16 {
		s.acc = next()
	}
	s.h1, s.h2, s.h3 = make([]float32, n), make([]float32, n), make([]float32, n)
	s.hids = make([]int32, n)
	return s
}

func (s *scratch) tensors() []*engine.Tensor {
	if s == nil {
		return nil
	}
	ts := []*engine.Tensor{s.tmp, s.stat, s.stat2, s.ids, s.mask}
	if s.acc != nil {
		ts = append(ts, s.acc)
	}
	return ts
}

// vocabSlice uploads, for token ids on the host, their ids within this
// rank's vocabulary slice and the mask of those in it (the embedding's
// lookup on Y ranks). It does nothing when the vocabulary is not split.
func (m *Model) vocabSlice(s *scratch, ids []int32) {
	if m.gy == nil {
		return
	}
	n := len(ids)
	for i, id := range ids {
		local := int(id) - m.d.v0
		s.hids[i], s.h1[i] = 0, 0
		if local >= 0 && local < m.d.V {
			s.hids[i], s.h1[i] = int32(local), 1
		}
	}
	m.backend.UploadInt32(s.ids.View(0, n), s.hids[:n])
	m.backend.Upload(s.mask.View(0, n), s.h1[:n])
}

// rmsnorm normalises x [n, H/X] with weight w: on X ranks over the whole
// hidden size, each token's sum of squares all-reduced over X. It saves
// 1/rms in rstd for the backward pass, as the kernel does.
//
// The kernel normalises by this rank's columns only; the grid's rstd is
// put in afterwards, as the ratio of the two per token (a row scaling),
// so that the kernel still applies the weight and rounds as HF does.
func (m *Model) rmsnorm(out, rstd, x *engine.Tensor, w *engine.Param, s *scratch) {
	b, eps := m.backend, m.Config.RMSNormEps
	if m.gx == nil {
		b.RMSNorm(out, rstd, x, w.Value, float32(eps))
		return
	}
	n := x.Dim(0)
	ss, tmp := s.stat.View(0, n), s.tmp.View(0, n, m.d.H)
	m.rowDots(ss, x, x)
	allReduce(ss, m.gx)
	b.RMSNorm(tmp, rstd, x, w.Value, float32(eps))
	hs, hr := s.h1[:n], s.h2[:n]
	b.Download(hs, ss)
	b.Download(hr, rstd)
	epsf := float64(float32(eps)) // as the kernel adds it
	for i := range hs {
		r := 1 / math.Sqrt(float64(hs[i])/float64(m.Config.HiddenSize)+epsf)
		hs[i] = float32(r / float64(hr[i]))
		hr[i] = float32(r)
	}
	b.Upload(rstd, hr)
	b.Upload(ss, hs)
	// A bf16 out is rounded once, from the float32 scaled rows.
	acc := m.partial(out)
	m.scaleRows(acc, tmp, ss, 0)
	m.roundSum(out, acc, nil)
}

// rmsnormBackward is rmsnorm's backward: it writes dx and adds into w's
// gradient, from dy, the forward's input x, output y and rstd. With
// y = x·r ⊙ w,
//
//	dx = r·(w⊙dy) − x·r²/H·Σ_k dy_k·y_k
//
// where on X ranks the sum runs over every rank's columns. The kernel
// computes the weight gradient exactly and dx with this rank's columns'
// sum over its own H/X; a row scaling of x swaps that term for the
// grid's.
func (m *Model) rmsnormBackward(dx *engine.Tensor, w *engine.Param, dy, x, y, rstd *engine.Tensor, s *scratch) {
	b := m.backend
	dw := w.Grad
	if dw == nil { // frozen: the kernel's weight gradient is discarded
		dw = m.lora.frozenDW
	}
	if m.gx == nil {
		b.RMSNormBackward(dx, dw, dy, x, w.Value, rstd)
		return
	}
	n := x.Dim(0)
	sum, local := s.stat.View(0, n), s.stat2.View(0, n)
	m.rowDots(local, dy, y)
	b.Copy(sum, local)
	allReduce(sum, m.gx)
	// A bf16 dx is rounded once, after the row scaling below.
	acc := m.partial(dx)
	b.RMSNormBackward(acc, dw, dy, x, w.Value, rstd)
	hs, hl, hr := s.h1[:n], s.h2[:n], s.h3[:n]
	b.Download(hs, sum)
	b.Download(hl, local)
	b.Download(hr, rstd)
	h, hx := float64(m.Config.HiddenSize), float64(m.d.H)
	for i := range hs {
		r := float64(hr[i])
		hl[i] = float32(r * r * (float64(hl[i])/hx - float64(hs[i])/h))
	}
	b.Upload(local, hl)
	m.scaleRows(acc, x, local, 1)
	m.roundSum(dx, acc, nil)
}

// embed looks up the rows of ids (uploaded with vocabSlice on Y ranks)
// in the embedding's weight block table [V/Y, H/X]: on Y ranks each
// holds a slice of the vocabulary, gives zero rows for the others' ids,
// and the rows are all-reduced over Y.
func (m *Model) embed(out, table, ids *engine.Tensor, s *scratch) {
	b := m.backend
	if m.gy == nil {
		b.Embedding(out, table, ids)
		return
	}
	n := out.Dim(0)
	tmp := s.tmp.View(0, n, m.d.H)
	b.Embedding(tmp, table, s.ids.View(0, n))
	acc := m.partial(out)
	m.scaleRows(acc, tmp, s.mask.View(0, n), 0)
	m.roundSum(out, acc, m.gy)
}

// embedBackward adds the embedding's gradient from dOut, the gradient of
// its output (complete and the same on every Y rank): each Y rank only
// for the ids of its slice. No communication but Z's reduce-scatter.
func (m *Model) embedBackward(dOut, ids *engine.Tensor, s *scratch) {
	b := m.backend
	grad := m.Embed.Grad
	if m.zg != nil {
		grad = m.zg.embedBlock(m)
	}
	if m.gy == nil {
		b.EmbeddingBackward(grad, dOut, ids)
	} else {
		n := dOut.Dim(0)
		tmp := s.tmp.View(0, n, m.d.H)
		m.scaleRows(tmp, dOut, s.mask.View(0, n), 0)
		b.EmbeddingBackward(grad, tmp, s.ids.View(0, n))
	}
	if m.zg != nil {
		m.zg.scatter(m, m.Embed, grad)
	}
}

// linear computes out = in·Wᵀ with w the weight block [rows, cols] this
// rank multiplies by: in [n, cols], out [n, rows]. The products of the
// ranks of group sum are partial sums over their slices of the input
// features, all-reduced into the output.
func (m *Model) linear(out, in, w *engine.Tensor, sum comm.Comm) {
	acc := m.partial(out)
	m.gemmLinear(acc, in, w, 0)
	m.roundSum(out, acc, sum)
}

// linearResidual computes out = res + in·Wᵀ, the residual joining the
// all-reduce of the partial products over sum on one rank of it.
func (m *Model) linearResidual(out, in, w, res *engine.Tensor, sum comm.Comm) {
	acc := m.partial(out)
	beta := float32(0)
	if sum == nil || sum.Rank() == 0 {
		m.backend.Copy(acc, res)
		beta = 1
	}
	m.gemmLinear(acc, in, w, beta)
	m.roundSum(out, acc, sum)
}

func (m *Model) gemmLinear(out, in, w *engine.Tensor, beta float32) {
	n, k, o := in.Dim(0), in.Dim(1), w.Dim(0)
	m.backend.Gemm(engine.GemmParams{TransB: true, M: n, N: o, K: k, Alpha: 1, Beta: beta, LDA: k, LDB: k, LDC: o},
		in, w, out)
}

// inputGrad computes din = dout·W (+ din when accumulate), linear's
// input gradient: on a grid a partial sum over the ranks that split W's
// output features, which the caller all-reduces (startSum) once for every
// linear that shares the input. A bf16 din is accumulated in float32
// (partial) until startSum rounds the sum into it.
func (m *Model) inputGrad(din, dout, w *engine.Tensor, accumulate bool) {
	n, o, k := dout.Dim(0), w.Dim(0), w.Dim(1)
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	m.backend.Gemm(engine.GemmParams{M: n, N: k, K: o, Alpha: 1, Beta: beta, LDA: o, LDB: k, LDC: k},
		dout, w, m.partial(din))
}

// weightGrad adds doutᵀ·in, linear's weight gradient, into p's gradient:
// directly, or, when the weight is Z-sharded, through a block buffer that
// is reduce-scattered over Z (zGrads).
func (m *Model) weightGrad(p *engine.Param, dout, in *engine.Tensor) {
	m.weightGradPart(p, dout, in, nil, true, true)
}

// headWeightGrad is weightGrad for the LM head over chunks of rows
// (headLoss): the first chunk's product starts the Z block and the others
// add into it, and the last scatters it. It returns the block, nil
// without Z-sharding.
func (m *Model) headWeightGrad(dout, in, block *engine.Tensor, first, last bool) *engine.Tensor {
	return m.weightGradPart(m.Head, dout, in, block, first, last)
}

// weightGradPart adds doutᵀ·in into p's gradient as one part of a sum
// over chunks of rows: into block, the Z block of the parts so far (nil
// for the first), which it returns.
func (m *Model) weightGradPart(p *engine.Param, dout, in, block *engine.Tensor, first, last bool) *engine.Tensor {
	if p.Grad == nil {
		return nil // frozen (a base weight under adapters)
	}
	n, o, k := in.Dim(0), dout.Dim(1), in.Dim(1)
	gemm := func(dst *engine.Tensor, beta float32) {
		m.backend.Gemm(engine.GemmParams{TransA: true, M: o, N: k, K: n, Alpha: 1, Beta: beta, LDA: o, LDB: k, LDC: k},
			dout, in, dst)
	}
	beta := float32(1)
	if first {
		beta = 0
	}
	switch {
	case m.zg == nil:
		gemm(p.Grad, 1)
		return nil
	case p == m.Embed:
		// The tied LM head: its gradient waits in the embedding's block
		// for the embedding's own, and the sum is reduce-scattered once.
		gemm(m.zg.tiedBlock(), beta)
		return nil
	}
	if first {
		block = m.zg.block(m, o, k)
	}
	gemm(block, beta)
	if last {
		m.zg.scatter(m, p, block)
	}
	return block
}
