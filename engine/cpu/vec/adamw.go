package vec

import "math"

// AdamWStep holds one AdamW step's float32 coefficients, computed once per
// tensor (see engine/cpu's AdamW for how they derive from the
// hyperparameters, as PyTorch computes them).
type AdamWStep struct {
	Decay    float32 // 1 − lr·wd
	B1, A1   float32 // β1, 1 − β1
	B2, A2   float32 // β2, 1 − β2
	StepSize float32 // −lr / (1 − β1^t)
	BC2Sqrt  float32 // √(1 − β2^t)
	Eps      float32
}

// AdamW updates p, m and v in place from g (all the same length), each
// operation rounded to float32 in this order, with no fused multiply-add:
//
//	p ← p·Decay
//	m ← m·B1 + A1·g
//	v ← v·B2 + (A2·g)·g
//	p ← p + (StepSize·m) / (√v / BC2Sqrt + Eps)
//
// The assembly computes exactly the same bits as the Go loop (√ is the
// correctly rounded float32 square root in both).
func AdamW(p, g, m, v []float32, c *AdamWStep) {
	n := len(p)
	g, m, v = g[:n], m[:n], v[:n]
	i := 0
	if level != levelGo && n >= 8 {
		i = n &^ 7
		adamwKernel(&p[0], &g[0], &m[0], &v[0], i, c)
	}
	for ; i < n; i++ {
		gi := g[i]
		pi := p[i] * c.Decay
		mi := float32(m[i]*c.B1) + float32(c.A1*gi)
		vi := float32(v[i]*c.B2) + float32(float32(c.A2*gi)*gi)
		// float64 square root rounded to float32 is the correctly
		// rounded float32 square root.
		denom := float32(float32(math.Sqrt(float64(vi)))/c.BC2Sqrt) + c.Eps
		p[i] = pi + float32(float32(c.StepSize*mi)/denom)
		m[i], v[i] = mi, vi
	}
}
