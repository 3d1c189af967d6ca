package llama

import (
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// blockForward runs decoder block l on x [N,H], saving its activations in
// a and writing the block's output to out (nothing when out is nil:
// recomputation needs only the activations).
//
//	h   = x + o_proj(attention(rope(q), rope(k), v))   with q,k,v from norm₁(x)
//	out = h + down_proj(silu(gate_proj(n)) ⊙ up_proj(n)), n = norm₂(h)
//
// It is the one block of every pass: a training or evaluation pass's B
// sequences of T tokens (N = B·T, kv nil), and a decoding step's T new
// tokens of B sequences against the KV cache (kv, generate.go), whose a
// is the decoder's scratch. A family's variations (checkpoints.Family)
// are written here once: q/k/v biases added in the projections
// (linearBias), q and k normalised per head before RoPE (qkNorm), and a
// sliding window of the attention.
//
// w holds the weight blocks to multiply with. On a grid (grid.go) H is
// this rank's H/X columns of the stream and the heads and intermediate
// features its 1/Y of them: q, k, v, gate and up sum their partial
// products over X, o_proj and down_proj theirs over Y.
//
// With adapters (lora.go) each adapted projection adds its low-rank
// product after the base one; ls is the training pass's adapter scratch
// (nil when only evaluating: no dropout).
func (m *Model) blockForward(l int, w blockWeights, a *layerActs, x, out, pos *engine.Tensor, s *scratch, ls *loraScratch, B, T int, kv *kvStep) {
	b, d, p := m.backend, m.d, m.Layers[l]
	N, D := B*T, d.D

	m.rmsnorm(a.ln1, a.rstd1, x, p.AttnNorm, s)
	q, k := a.projQ(), a.projK() // the projections' outputs, before the head norms
	m.linearBias(q, a.ln1, w.q, p.QBias, m.gx)
	m.linearBias(k, a.ln1, w.k, p.KBias, m.gx)
	m.linearBias(a.v, a.ln1, w.v, p.VBias, m.gx)
	if m.lora != nil {
		m.loraForward(l, projQ, a.z[projQ], a.ln1, q, ls)
		m.loraForward(l, projK, a.z[projK], a.ln1, k, ls)
		m.loraForward(l, projV, a.z[projV], a.ln1, a.v, ls)
	}
	if p.QNorm != nil {
		m.headNorm(a.q, a.rstdq, q, p.QNorm, d.heads)
		m.headNorm(a.k, a.rstdk, k, p.KNorm, d.kvHeads)
	}
	b.RoPE(a.q.Reshape(N, d.heads, D), pos, m.invFreq)
	b.RoPE(a.k.Reshape(N, d.kvHeads, D), pos, m.invFreq)
	if kv != nil {
		kv.attend(l, a)
	} else {
		b.Attention(a.att.Reshape(B, T, d.heads, D), a.lse,
			a.q.Reshape(B, T, d.heads, D), a.k.Reshape(B, T, d.kvHeads, D), a.v.Reshape(B, T, d.kvHeads, D), m.window)
	}
	// The residual rides on o_proj's GEMM (β = 1 over a copy of x), not
	// on engine.Backend.AddRMSNorm: adding it in the norm would round the
	// bf16 stream twice, and change the order of the sums on a grid and
	// with an adapter on o_proj.
	m.linearResidual(a.h, a.att, w.o, x, m.gy)
	m.loraForward(l, projO, a.z[projO], a.att, a.h, ls)

	m.rmsnorm(a.ln2, a.rstd2, a.h, p.MLPNorm, s)
	m.linear(a.gate, a.ln2, w.gate, m.gx)
	m.linear(a.up, a.ln2, w.up, m.gx)
	m.loraForward(l, projGate, a.z[projGate], a.ln2, a.gate, ls)
	m.loraForward(l, projUp, a.z[projUp], a.ln2, a.up, ls)
	b.SwiGLU(a.act, a.gate, a.up)
	if out != nil {
		m.linearResidual(out, a.act, w.down, a.h, m.gy)
		m.loraForward(l, projDown, a.z[projDown], a.act, out, ls)
	} else if m.Layers[l].LoRA[projDown] != nil {
		// Recomputation: the down adapter's z is an activation too.
		m.loraZ(l, projDown, a.z[projDown], a.act, ls)
	}
}

// blockBackward is blockForward's backward: from dOut, the gradient with
// respect to the block's output, it adds the parameter gradients and
// writes g.dx, the gradient with respect to the block's input x. dOut may
// be g.dx itself.
//
// Each linear's input gradient is a partial sum over the ranks that split
// its output features; the linears that share an input (q, k, v; gate,
// up) add theirs before one all-reduce, which runs while their weight
// gradients are computed (OAR).
func (m *Model) blockBackward(l int, w blockWeights, a *layerActs, x, dOut, pos *engine.Tensor, g *grads, s *scratch, ls *loraScratch, B, T int) {
	b, d, p := m.backend, m.d, m.Layers[l]
	N, D := B*T, d.D

	// out = h + act·Wdownᵀ
	m.inputGrad(g.dact, dOut, w.down, false)
	m.loraBackward(l, projDown, a.z[projDown], a.act, dOut, g.dact, ls)
	sum := m.startSum(g.dact, m.gx)
	m.weightGrad(p.Down, dOut, a.act)
	sum.wait()
	b.SwiGLUBackward(g.dgate, g.dup, g.dact, a.gate, a.up)
	m.inputGrad(g.dln, g.dgate, w.gate, false)
	m.inputGrad(g.dln, g.dup, w.up, true)
	m.loraBackward(l, projGate, a.z[projGate], a.ln2, g.dgate, g.dln, ls)
	m.loraBackward(l, projUp, a.z[projUp], a.ln2, g.dup, g.dln, ls)
	sum = m.startSum(g.dln, m.gy)
	m.weightGrad(p.Gate, g.dgate, a.ln2)
	m.weightGrad(p.Up, g.dup, a.ln2)
	sum.wait()
	m.rmsnormBackward(g.dnorm, p.MLPNorm, g.dln, a.h, a.ln2, a.rstd2, s)
	b.Add(g.dh, dOut, g.dnorm)

	// h = x + att·Woᵀ
	m.inputGrad(g.datt, g.dh, w.o, false)
	m.loraBackward(l, projO, a.z[projO], a.att, g.dh, g.datt, ls)
	sum = m.startSum(g.datt, m.gx)
	m.weightGrad(p.O, g.dh, a.att)
	sum.wait()
	b.AttentionBackward(g.dq.Reshape(B, T, d.heads, D), g.dk.Reshape(B, T, d.kvHeads, D), g.dv.Reshape(B, T, d.kvHeads, D),
		g.datt.Reshape(B, T, d.heads, D),
		a.q.Reshape(B, T, d.heads, D), a.k.Reshape(B, T, d.kvHeads, D), a.v.Reshape(B, T, d.kvHeads, D),
		a.att.Reshape(B, T, d.heads, D), a.lse, m.window)
	b.RoPEBackward(g.dq.Reshape(N, d.heads, D), pos, m.invFreq)
	b.RoPEBackward(g.dk.Reshape(N, d.kvHeads, D), pos, m.invFreq)
	// dq and dk are now the gradients of the head norms' outputs; the
	// projections' are those of their inputs.
	dq, dk := g.dq, g.dk
	if p.QNorm != nil {
		dq, dk = g.dqn, g.dkn
		m.headNormBackward(dq, p.QNorm, g.dq, a.projQ(), a.rstdq, d.heads)
		m.headNormBackward(dk, p.KNorm, g.dk, a.projK(), a.rstdk, d.kvHeads)
	}
	m.biasGrad(p.QBias, dq)
	m.biasGrad(p.KBias, dk)
	m.biasGrad(p.VBias, g.dv)
	m.inputGrad(g.dln, dq, w.q, false)
	m.inputGrad(g.dln, dk, w.k, true)
	m.inputGrad(g.dln, g.dv, w.v, true)
	m.loraBackward(l, projQ, a.z[projQ], a.ln1, dq, g.dln, ls)
	m.loraBackward(l, projK, a.z[projK], a.ln1, dk, g.dln, ls)
	m.loraBackward(l, projV, a.z[projV], a.ln1, g.dv, g.dln, ls)
	sum = m.startSum(g.dln, m.gy)
	m.weightGrad(p.Q, dq, a.ln1)
	m.weightGrad(p.K, dk, a.ln1)
	m.weightGrad(p.V, g.dv, a.ln1)
	sum.wait()
	m.rmsnormBackward(g.dnorm, p.AttnNorm, g.dln, x, a.ln1, a.rstd1, s)
	b.Add(g.dx, g.dh, g.dnorm)
}

// projQ is the q projection's output: a.q itself, or with head norms
// (Qwen3) the norm's input, a.qraw.
func (a *layerActs) projQ() *engine.Tensor {
	if a.qraw != nil {
		return a.qraw
	}
	return a.q
}

// projK is projQ's for k.
func (a *layerActs) projK() *engine.Tensor {
	if a.kraw != nil {
		return a.kraw
	}
	return a.k
}

// headNorm is Qwen3's q_norm or k_norm: an RMSNorm of each of the heads
// of x [N, heads·D] over its D features, into out. A head is whole on its
// rank (heads split over Y, never a head's features), so nothing is
// summed over ranks.
func (m *Model) headNorm(out, rstd, x *engine.Tensor, w *engine.Param, heads int) {
	n, D := x.Dim(0)*heads, m.d.D
	m.backend.RMSNorm(out.Reshape(n, D), rstd, x.Reshape(n, D), w.Value, float32(m.Config.RMSNormEps))
}

// headNormBackward is headNorm's backward: dx from dy, and w's gradient
// (discarded when frozen, under adapters).
func (m *Model) headNormBackward(dx *engine.Tensor, w *engine.Param, dy, x, rstd *engine.Tensor, heads int) {
	n, D := x.Dim(0)*heads, m.d.D
	dw := w.Grad
	if dw == nil {
		dw = m.lora.frozenDW.View(0, D)
	}
	m.backend.RMSNormBackward(dx.Reshape(n, D), dw, dy.Reshape(n, D), x.Reshape(n, D), w.Value, rstd)
}

// linearBias is linear with a bias (Qwen2's q/k/v; nil: none): out =
// in·Wᵀ + b. The bias is laid into the sum's float32 accumulator before
// the product adds into it (β = 1), on one rank of the group that sums
// the partial products, so that a bf16 output is rounded once, from the
// float32 sum, as a GEMM with a bias epilogue rounds.
func (m *Model) linearBias(out, in, w *engine.Tensor, bias *engine.Param, sum comm.Comm) {
	if bias == nil {
		m.linear(out, in, w, sum)
		return
	}
	acc := m.partial(out)
	beta := float32(0)
	if sum == nil || sum.Rank() == 0 {
		m.backend.Fill(acc, 0)
		m.backend.AddBias(acc, bias.Value)
		beta = 1
	}
	m.gemmLinear(acc, in, w, beta)
	m.roundSum(out, acc, sum)
}

// biasGrad adds the rows of dy, the gradient of a projection's output,
// into its bias's gradient (nothing without a bias or when frozen).
func (m *Model) biasGrad(bias *engine.Param, dy *engine.Tensor) {
	if bias == nil || bias.Grad == nil {
		return
	}
	m.backend.BiasGrad(bias.Grad, dy)
}
