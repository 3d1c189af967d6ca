package llama

import "github.com/memtrain/memtrain/engine"

// blockForward runs decoder block l on x [N,H] (B sequences of T tokens),
// saving its activations in a and writing the block's output to out
// (nothing when out is nil: recomputation needs only the activations).
//
//	h   = x + o_proj(attention(rope(q), rope(k), v))   with q,k,v from norm₁(x)
//	out = h + down_proj(silu(gate_proj(n)) ⊙ up_proj(n)), n = norm₂(h)
//
// w holds the weight blocks to multiply with. On a grid (grid.go) H is
// this rank's H/X columns of the stream and the heads and intermediate
// features its 1/Y of them: q, k, v, gate and up sum their partial
// products over X, o_proj and down_proj theirs over Y.
//
// With adapters (lora.go) each adapted projection adds its low-rank
// product after the base one; ls is the training pass's adapter scratch
// (nil when only evaluating: no dropout).
func (m *Model) blockForward(l int, w blockWeights, a *layerActs, x, out, pos *engine.Tensor, s *scratch, ls *loraScratch, B, T int) {
	b, d, p := m.backend, m.d, m.Layers[l]
	N, D := B*T, d.D

	m.rmsnorm(a.ln1, a.rstd1, x, p.AttnNorm, s)
	m.linear(a.q, a.ln1, w.q, m.gx)
	m.linear(a.k, a.ln1, w.k, m.gx)
	m.linear(a.v, a.ln1, w.v, m.gx)
	if m.lora != nil {
		m.loraForward(l, projQ, a.z[projQ], a.ln1, a.q, ls)
		m.loraForward(l, projK, a.z[projK], a.ln1, a.k, ls)
		m.loraForward(l, projV, a.z[projV], a.ln1, a.v, ls)
	}
	b.RoPE(a.q.Reshape(N, d.heads, D), pos, m.invFreq)
	b.RoPE(a.k.Reshape(N, d.kvHeads, D), pos, m.invFreq)
	b.Attention(a.att.Reshape(B, T, d.heads, D), a.lse,
		a.q.Reshape(B, T, d.heads, D), a.k.Reshape(B, T, d.kvHeads, D), a.v.Reshape(B, T, d.kvHeads, D), 0)
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
		a.att.Reshape(B, T, d.heads, D), a.lse, 0)
	b.RoPEBackward(g.dq.Reshape(N, d.heads, D), pos, m.invFreq)
	b.RoPEBackward(g.dk.Reshape(N, d.kvHeads, D), pos, m.invFreq)
	m.inputGrad(g.dln, g.dq, w.q, false)
	m.inputGrad(g.dln, g.dk, w.k, true)
	m.inputGrad(g.dln, g.dv, w.v, true)
	m.loraBackward(l, projQ, a.z[projQ], a.ln1, g.dq, g.dln, ls)
	m.loraBackward(l, projK, a.z[projK], a.ln1, g.dk, g.dln, ls)
	m.loraBackward(l, projV, a.z[projV], a.ln1, g.dv, g.dln, ls)
	sum = m.startSum(g.dln, m.gy)
	m.weightGrad(p.Q, g.dq, a.ln1)
	m.weightGrad(p.K, g.dk, a.ln1)
	m.weightGrad(p.V, g.dv, a.ln1)
	sum.wait()
	m.rmsnormBackward(g.dnorm, p.AttnNorm, g.dln, x, a.ln1, a.rstd1, s)
	b.Add(g.dx, g.dh, g.dnorm)
}
