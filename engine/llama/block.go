package llama

import "github.com/memtrain/memtrain/engine"

// linear computes out = in·Wᵀ (+ out when accumulate): in [N,In], W
// [Out,In] as HuggingFace stores Linear weights, out [N,Out].
func (m *Model) linear(out, in *engine.Tensor, w *engine.Param, accumulate bool) {
	n, k, o := in.Dim(0), in.Dim(1), w.Full[0]
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	m.backend.Gemm(engine.GemmParams{TransB: true, M: n, N: o, K: k, Alpha: 1, Beta: beta, LDA: k, LDB: k, LDC: o},
		in, w.Value, out)
}

// linearBackward is linear's backward: din = dout·W (+ din when
// accumulate) and W's gradient += doutᵀ·in.
func (m *Model) linearBackward(din, dout, in *engine.Tensor, w *engine.Param, accumulate bool) {
	n, k, o := in.Dim(0), in.Dim(1), w.Full[0]
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	m.backend.Gemm(engine.GemmParams{M: n, N: k, K: o, Alpha: 1, Beta: beta, LDA: o, LDB: k, LDC: k},
		dout, w.Value, din)
	m.backend.Gemm(engine.GemmParams{TransA: true, M: o, N: k, K: n, Alpha: 1, Beta: 1, LDA: o, LDB: k, LDC: k},
		dout, in, w.Grad)
}

// blockForward runs decoder block l on x [N,H] (B sequences of T tokens),
// saving its activations in a and writing the block's output to out.
//
//	h   = x + o_proj(attention(rope(q), rope(k), v))   with q,k,v from norm₁(x)
//	out = h + down_proj(silu(gate_proj(n)) ⊙ up_proj(n)), n = norm₂(h)
func (m *Model) blockForward(l int, a *layerActs, x, out, pos *engine.Tensor, B, T int) {
	b, cfg, p := m.backend, m.Config, m.Layers[l]
	eps := float32(cfg.RMSNormEps)
	N, D := B*T, cfg.HeadDimension()
	heads, kvHeads := cfg.NumAttentionHeads, cfg.NumKeyValueHeads

	b.RMSNorm(a.ln1, a.rstd1, x, p.AttnNorm.Value, eps)
	m.linear(a.q, a.ln1, p.Q, false)
	m.linear(a.k, a.ln1, p.K, false)
	m.linear(a.v, a.ln1, p.V, false)
	b.RoPE(a.q.Reshape(N, heads, D), pos, m.invFreq)
	b.RoPE(a.k.Reshape(N, kvHeads, D), pos, m.invFreq)
	b.Attention(a.att.Reshape(B, T, heads, D), a.probs,
		a.q.Reshape(B, T, heads, D), a.k.Reshape(B, T, kvHeads, D), a.v.Reshape(B, T, kvHeads, D))
	b.Copy(a.h, x)
	m.linear(a.h, a.att, p.O, true)

	b.RMSNorm(a.ln2, a.rstd2, a.h, p.MLPNorm.Value, eps)
	m.linear(a.gate, a.ln2, p.Gate, false)
	m.linear(a.up, a.ln2, p.Up, false)
	b.SwiGLU(a.act, a.gate, a.up)
	if out != nil {
		b.Copy(out, a.h)
		m.linear(out, a.act, p.Down, true)
	}
}

// blockBackward is blockForward's backward: from dOut, the gradient with
// respect to the block's output, it adds the parameter gradients and
// writes g.dx, the gradient with respect to the block's input x. dOut may
// be g.dx itself.
func (m *Model) blockBackward(l int, a *layerActs, x, dOut, pos *engine.Tensor, g *grads, B, T int) {
	b, cfg, p := m.backend, m.Config, m.Layers[l]
	N, D := B*T, cfg.HeadDimension()
	heads, kvHeads := cfg.NumAttentionHeads, cfg.NumKeyValueHeads

	// out = h + act·Wdownᵀ
	m.linearBackward(g.dact, dOut, a.act, p.Down, false)
	b.SwiGLUBackward(g.dgate, g.dup, g.dact, a.gate, a.up)
	m.linearBackward(g.dln, g.dgate, a.ln2, p.Gate, false)
	m.linearBackward(g.dln, g.dup, a.ln2, p.Up, true)
	b.RMSNormBackward(g.dnorm, p.MLPNorm.Grad, g.dln, a.h, p.MLPNorm.Value, a.rstd2)
	b.Add(g.dh, dOut, g.dnorm)

	// h = x + att·Woᵀ
	m.linearBackward(g.datt, g.dh, a.att, p.O, false)
	b.AttentionBackward(g.dq.Reshape(B, T, heads, D), g.dk.Reshape(B, T, kvHeads, D), g.dv.Reshape(B, T, kvHeads, D),
		g.datt.Reshape(B, T, heads, D),
		a.q.Reshape(B, T, heads, D), a.k.Reshape(B, T, kvHeads, D), a.v.Reshape(B, T, kvHeads, D), a.probs)
	b.RoPEBackward(g.dq.Reshape(N, heads, D), pos, m.invFreq)
	b.RoPEBackward(g.dk.Reshape(N, kvHeads, D), pos, m.invFreq)
	m.linearBackward(g.dln, g.dq, a.ln1, p.Q, false)
	m.linearBackward(g.dln, g.dk, a.ln1, p.K, true)
	m.linearBackward(g.dln, g.dv, a.ln1, p.V, true)
	b.RMSNormBackward(g.dnorm, p.AttnNorm.Grad, g.dln, x, p.AttnNorm.Value, a.rstd1)
	b.Add(g.dx, g.dh, g.dnorm)
}
