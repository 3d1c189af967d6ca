package enginetest

import "math"

// The references: every kernel of engine.Backend as the plainest float64
// loops, written from the interface's doc comments. They are slow, obvious
// and proven by finite differences (gradcheck_test.go); the suite compares
// backends against them.

// refGemm computes C = alpha·op(A)·op(B) + beta·C in place, row-major.
// With beta = 0, C's old contents are ignored, NaN included.
func refGemm(transA, transB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	at := func(i, p int) float64 {
		if transA {
			return a[p*lda+i]
		}
		return a[i*lda+p]
	}
	bt := func(p, j int) float64 {
		if transB {
			return b[j*ldb+p]
		}
		return b[p*ldb+j]
	}
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += at(i, p) * bt(p, j)
			}
			old := 0.0
			if beta != 0 {
				old = beta * c[i*ldc+j]
			}
			c[i*ldc+j] = alpha*s + old
		}
	}
}

// refGemmBackward returns the gradients of L = Σ dC ⊙ C with respect to A,
// B and the old C, for C = alpha·op(A)·op(B) + beta·C, all stored densely
// (lda = columns as stored). The model's linear layers use exactly these
// products.
func refGemmBackward(transA, transB bool, m, n, k int, alpha float64, a, b []float64, beta float64, dC []float64) (dA, dB, dC0 []float64) {
	// dop(A) = alpha·dC·op(B)ᵀ is m×k; dop(B) = alpha·op(A)ᵀ·dC is k×n.
	opA := make([]float64, m*k)
	opB := make([]float64, k*n)
	for i := 0; i < m; i++ {
		for p := 0; p < k; p++ {
			if transA {
				opA[i*k+p] = a[p*m+i]
			} else {
				opA[i*k+p] = a[i*k+p]
			}
		}
	}
	for p := 0; p < k; p++ {
		for j := 0; j < n; j++ {
			if transB {
				opB[p*n+j] = b[j*k+p]
			} else {
				opB[p*n+j] = b[p*n+j]
			}
		}
	}
	dOpA := make([]float64, m*k)
	refGemm(false, true, m, k, n, alpha, dC, n, opB, n, 0, dOpA, k)
	dOpB := make([]float64, k*n)
	refGemm(true, false, k, n, m, alpha, opA, k, dC, n, 0, dOpB, n)
	dA = make([]float64, m*k)
	dB = make([]float64, k*n)
	for i := 0; i < m; i++ {
		for p := 0; p < k; p++ {
			if transA {
				dA[p*m+i] = dOpA[i*k+p]
			} else {
				dA[i*k+p] = dOpA[i*k+p]
			}
		}
	}
	for p := 0; p < k; p++ {
		for j := 0; j < n; j++ {
			if transB {
				dB[j*k+p] = dOpB[p*n+j]
			} else {
				dB[p*n+j] = dOpB[p*n+j]
			}
		}
	}
	dC0 = make([]float64, m*n)
	for i := range dC0 {
		dC0[i] = beta * dC[i]
	}
	return dA, dB, dC0
}

// refEmbedding gathers out[i] = table[ids[i]] with rows of h.
func refEmbedding(table []float64, ids []int32, h int) []float64 {
	out := make([]float64, len(ids)*h)
	for i, id := range ids {
		copy(out[i*h:(i+1)*h], table[int(id)*h:(int(id)+1)*h])
	}
	return out
}

// refEmbeddingBackward returns the table gradient Σ_i onehot(ids[i]) ⊗
// dOut[i] for a table of v rows of h.
func refEmbeddingBackward(dOut []float64, ids []int32, v, h int) []float64 {
	dt := make([]float64, v*h)
	for i, id := range ids {
		for j := 0; j < h; j++ {
			dt[int(id)*h+j] += dOut[i*h+j]
		}
	}
	return dt
}

// refRMSNorm returns out = x/rms(x) ⊙ w row by row, rms =
// sqrt(mean(x²)+eps), and rstd = 1/rms.
func refRMSNorm(x, w []float64, n, h int, eps float64) (out, rstd []float64) {
	out = make([]float64, n*h)
	rstd = make([]float64, n)
	for i := 0; i < n; i++ {
		var ss float64
		for j := 0; j < h; j++ {
			ss += x[i*h+j] * x[i*h+j]
		}
		r := 1 / math.Sqrt(ss/float64(h)+eps)
		rstd[i] = r
		for j := 0; j < h; j++ {
			out[i*h+j] = x[i*h+j] * r * w[j]
		}
	}
	return out, rstd
}

// refRMSNormBackward returns dx and dw (the increment) for refRMSNorm.
// With r = (mean(x²)+eps)^(−1/2), ∂r/∂x_k = −r³·x_k/H, so
// dx_k = r·w_k·g_k − x_k·r³/H·Σ_j g_j·w_j·x_j.
func refRMSNormBackward(dOut, x, w []float64, n, h int, eps float64) (dx, dw []float64) {
	dx = make([]float64, n*h)
	dw = make([]float64, h)
	for i := 0; i < n; i++ {
		var ss float64
		for j := 0; j < h; j++ {
			ss += x[i*h+j] * x[i*h+j]
		}
		r := 1 / math.Sqrt(ss/float64(h)+eps)
		var dot float64
		for j := 0; j < h; j++ {
			dot += dOut[i*h+j] * w[j] * x[i*h+j]
			dw[j] += dOut[i*h+j] * x[i*h+j] * r
		}
		for j := 0; j < h; j++ {
			dx[i*h+j] = r*w[j]*dOut[i*h+j] - x[i*h+j]*r*r*r/float64(h)*dot
		}
	}
	return dx, dw
}

// refAddBias returns y + bias over y's rows of len(bias).
func refAddBias(y, bias []float64) []float64 {
	out := make([]float64, len(y))
	h := len(bias)
	for i := range y {
		out[i] = y[i] + bias[i%h]
	}
	return out
}

// refBiasGrad returns the bias's gradient (the increment) for refAddBias:
// dy summed over its rows of h.
func refBiasGrad(dy []float64, h int) []float64 {
	db := make([]float64, h)
	for i, v := range dy {
		db[i%h] += v
	}
	return db
}

// ropeAngle is θ = pos·invFreq[j] rounded to float32, as HuggingFace
// computes it (in float32): the backends must round it the same way.
func ropeAngle(pos int32, invFreq float32) float64 {
	return float64(float32(float32(pos) * invFreq))
}

// refRoPE rotates x [n, heads, d] by sign·θ, rotate-half layout.
func refRoPE(x []float64, pos []int32, invFreq []float32, heads int, sign float64) []float64 {
	half := len(invFreq)
	d := 2 * half
	out := make([]float64, len(x))
	for i, p := range pos {
		for hd := 0; hd < heads; hd++ {
			base := (i*heads + hd) * d
			for j := 0; j < half; j++ {
				th := sign * ropeAngle(p, invFreq[j])
				c, s := math.Cos(th), math.Sin(th)
				x0, x1 := x[base+j], x[base+j+half]
				out[base+j] = x0*c - x1*s
				out[base+j+half] = x1*c + x0*s
			}
		}
	}
	return out
}

// geometry is an attention shape; W is its sliding window (0: plain
// causal).
type geometry struct{ B, T, heads, kvHeads, D, W int }

// first is the first key that query i sees: i−W+1 in a window of W, 0
// without one.
func (g geometry) first(i int) int { return windowStart(i, g.W) }

// windowStart is the first of the keys (i−W, i] that query i sees in a
// sliding window of W keys, 0 without one (W = 0).
func windowStart(i, W int) int {
	if W == 0 {
		return 0
	}
	return max(0, i-W+1)
}

func (g geometry) qLen() int  { return g.B * g.T * g.heads * g.D }
func (g geometry) kvLen() int { return g.B * g.T * g.kvHeads * g.D }

// qi and ki index q [B,T,heads,D] and k [B,T,kvHeads,D].
func (g geometry) qi(b, t, h, d int) int { return ((b*g.T+t)*g.heads+h)*g.D + d }
func (g geometry) ki(b, t, h, d int) int { return ((b*g.T+t)*g.kvHeads+h)*g.D + d }

// refAttention is causal grouped-query attention, query i seeing keys
// first(i)..i: out [B,T,heads,D] and each row's log-sum-exp of its scaled
// scores, lse [B,heads,T].
func refAttention(q, k, v []float64, g geometry) (out, lse []float64) {
	out, _, lse = refAttentionProbs(q, k, v, g)
	return out, lse
}

// refAttentionProbs is refAttention with the probabilities
// [B,heads,T,T] (zero outside the window) as well.
func refAttentionProbs(q, k, v []float64, g geometry) (out, probs, lse []float64) {
	out = make([]float64, g.qLen())
	probs = make([]float64, g.B*g.heads*g.T*g.T)
	lse = make([]float64, g.B*g.heads*g.T)
	group := g.heads / g.kvHeads
	scale := 1 / math.Sqrt(float64(g.D))
	for b := 0; b < g.B; b++ {
		for h := 0; h < g.heads; h++ {
			kv := h / group
			for i := 0; i < g.T; i++ {
				p := probs[((b*g.heads+h)*g.T+i)*g.T:][:g.T]
				m := math.Inf(-1)
				for j := g.first(i); j <= i; j++ {
					var s float64
					for d := 0; d < g.D; d++ {
						s += q[g.qi(b, i, h, d)] * k[g.ki(b, j, kv, d)]
					}
					p[j] = s * scale
					m = math.Max(m, p[j])
				}
				var sum float64
				for j := g.first(i); j <= i; j++ {
					p[j] = math.Exp(p[j] - m)
					sum += p[j]
				}
				lse[(b*g.heads+h)*g.T+i] = m + math.Log(sum)
				for j := g.first(i); j <= i; j++ {
					p[j] /= sum
					for d := 0; d < g.D; d++ {
						out[g.qi(b, i, h, d)] += p[j] * v[g.ki(b, j, kv, d)]
					}
				}
			}
		}
	}
	return out, probs, lse
}

// refAttentionBackward returns dq, dk, dv for refAttention, recomputing
// the probabilities. dk and dv sum over the query heads of each group.
func refAttentionBackward(dOut, q, k, v []float64, g geometry) (dq, dk, dv []float64) {
	return refAttentionBackwardOut(dOut, q, k, v, nil, g)
}

// refAttentionBackwardOut is refAttentionBackward with δ = rowsum(dOut ⊙
// out) taken from out, the forward's output as a backend stored it (in
// bf16, say), as the kernels take it; nil is the exact output, where
// δ = Σ_j P_j·dP_j.
func refAttentionBackwardOut(dOut, q, k, v, out []float64, g geometry) (dq, dk, dv []float64) {
	_, probs, _ := refAttentionProbs(q, k, v, g)
	dq = make([]float64, g.qLen())
	dk = make([]float64, g.kvLen())
	dv = make([]float64, g.kvLen())
	group := g.heads / g.kvHeads
	scale := 1 / math.Sqrt(float64(g.D))
	for b := 0; b < g.B; b++ {
		for h := 0; h < g.heads; h++ {
			kv := h / group
			for i := 0; i < g.T; i++ {
				p := probs[((b*g.heads+h)*g.T+i)*g.T:][:g.T]
				// dP_j = dOut_i·v_j; dS_j = P_j(dP_j − Σ P·dP).
				dp := make([]float64, i+1)
				var dot float64
				for j := g.first(i); j <= i; j++ {
					for d := 0; d < g.D; d++ {
						dp[j] += dOut[g.qi(b, i, h, d)] * v[g.ki(b, j, kv, d)]
					}
					dot += p[j] * dp[j]
				}
				if out != nil {
					dot = 0
					for d := 0; d < g.D; d++ {
						dot += dOut[g.qi(b, i, h, d)] * out[g.qi(b, i, h, d)]
					}
				}
				for j := g.first(i); j <= i; j++ {
					ds := p[j] * (dp[j] - dot) * scale
					for d := 0; d < g.D; d++ {
						dq[g.qi(b, i, h, d)] += ds * k[g.ki(b, j, kv, d)]
						dk[g.ki(b, j, kv, d)] += ds * q[g.qi(b, i, h, d)]
						dv[g.ki(b, j, kv, d)] += p[j] * dOut[g.qi(b, i, h, d)]
					}
				}
			}
		}
	}
	return dq, dk, dv
}

// refAttentionKV is attention against a cache: query i of sequence b, at
// position p = start[b]+i, attends to cache positions windowStart(p,
// W)..p. q [B,n,heads,D], caches [B,tmax,kvHeads,D].
func refAttentionKV(q, kc, vc []float64, start []int32, B, n, tmax, heads, kvHeads, D, W int) []float64 {
	out := make([]float64, B*n*heads*D)
	group := heads / kvHeads
	scale := 1 / math.Sqrt(float64(D))
	qi := func(b, i, h, d int) int { return ((b*n+i)*heads+h)*D + d }
	ci := func(b, t, h, d int) int { return ((b*tmax+t)*kvHeads+h)*D + d }
	for b := 0; b < B; b++ {
		for h := 0; h < heads; h++ {
			kv := h / group
			for i := 0; i < n; i++ {
				L := int(start[b]) + i + 1
				lo := windowStart(L-1, W)
				s := make([]float64, L-lo) // s[j] is key lo+j's
				m := math.Inf(-1)
				for j := range s {
					for d := 0; d < D; d++ {
						s[j] += q[qi(b, i, h, d)] * kc[ci(b, lo+j, kv, d)]
					}
					s[j] *= scale
					m = math.Max(m, s[j])
				}
				var sum float64
				for j := range s {
					s[j] = math.Exp(s[j] - m)
					sum += s[j]
				}
				for j := range s {
					for d := 0; d < D; d++ {
						out[qi(b, i, h, d)] += s[j] / sum * vc[ci(b, lo+j, kv, d)]
					}
				}
			}
		}
	}
	return out
}

// refSigmoid is 1/(1+e^−x).
func refSigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// refSwiGLU is silu(gate)·up.
func refSwiGLU(gate, up []float64) []float64 {
	out := make([]float64, len(gate))
	for i, g := range gate {
		out[i] = g * refSigmoid(g) * up[i]
	}
	return out
}

// refSwiGLUBackward returns dGate and dUp; silu'(x) = σ(x)(1 + x(1−σ(x))).
func refSwiGLUBackward(dOut, gate, up []float64) (dGate, dUp []float64) {
	dGate = make([]float64, len(gate))
	dUp = make([]float64, len(gate))
	for i, g := range gate {
		s := refSigmoid(g)
		dGate[i] = dOut[i] * up[i] * s * (1 + g*(1-s))
		dUp[i] = dOut[i] * g * s
	}
	return dGate, dUp
}

// refCrossEntropy returns losses[i] = −w[i]·log softmax(x[i])[t[i]] and
// dLogits[i] = scale·w[i]·(softmax(x[i]) − onehot(t[i])), the gradient of
// scale·Σ losses. Rows of weight 0 contribute nothing, whatever their
// target.
func refCrossEntropy(logits []float64, targets []int32, weights []float64, n, v int, scale float64) (losses, dLogits []float64) {
	losses = make([]float64, n)
	dLogits = make([]float64, n*v)
	for i := 0; i < n; i++ {
		if weights[i] == 0 {
			continue
		}
		x := logits[i*v : (i+1)*v]
		m := math.Inf(-1)
		for _, xj := range x {
			m = math.Max(m, xj)
		}
		var sum float64
		for _, xj := range x {
			sum += math.Exp(xj - m)
		}
		t := int(targets[i])
		losses[i] = weights[i] * (math.Log(sum) + m - x[t])
		for j, xj := range x {
			p := math.Exp(xj-m) / sum
			if j == t {
				p--
			}
			dLogits[i*v+j] = scale * weights[i] * p
		}
	}
	return losses, dLogits
}

// refArgmax returns each row's index of the largest value, the lowest on
// ties.
func refArgmax(x []float32, n, v int) []int32 {
	out := make([]int32, n)
	for i := 0; i < n; i++ {
		best := 0
		for j := 1; j < v; j++ {
			if x[i*v+j] > x[i*v+best] {
				best = j
			}
		}
		out[i] = int32(best)
	}
	return out
}

// adamw are AdamW hyper-parameters in float64.
type adamw struct {
	lr, beta1, beta2, eps, wd float64
	step                      int
}

// refAdamW takes one AdamW step in place (torch.optim.AdamW):
//
//	p ← p·(1 − lr·wd)
//	m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//	p ← p − lr/(1−β1^t) · m / (√v/√(1−β2^t) + eps)
func refAdamW(p, g, m, v []float64, h adamw) {
	bc1 := 1 - math.Pow(h.beta1, float64(h.step))
	bc2 := 1 - math.Pow(h.beta2, float64(h.step))
	for i := range p {
		p[i] *= 1 - h.lr*h.wd
		m[i] = h.beta1*m[i] + (1-h.beta1)*g[i]
		v[i] = h.beta2*v[i] + (1-h.beta2)*g[i]*g[i]
		p[i] -= h.lr / bc1 * m[i] / (math.Sqrt(v[i])/math.Sqrt(bc2) + h.eps)
	}
}
