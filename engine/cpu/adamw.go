package cpu

import (
	"math"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu/vec"
)

// AdamW updates param in place from grad and the moments m and v (all the
// same length), with decoupled weight decay, exactly as PyTorch's
// torch.optim.AdamW (1.13, _single_tensor_adamw) computes it for float32
// tensors:
//
//	param.mul_(1 − lr·wd)
//	m.mul_(β1).add_(g, alpha=1−β1)
//	v.mul_(β2).addcmul_(g, g, value=1−β2)
//	denom = v.sqrt() / sqrt(1−β2^t) + eps
//	param.addcdiv_(m, denom, value=−lr/(1−β1^t))
//
// The scalar coefficients are computed in float64, as Python does, then
// rounded to float32, as ATen does before a float32 kernel; each
// elementwise operation is then rounded to float32 in ATen's order
// (addcmul is (value·g)·g and addcdiv (value·m)/denom). The explicit
// float32 conversions stop a compiler from fusing multiply-adds, which
// would change the bits on arm64. (ATen built with FMA contraction can
// itself differ from this in the last bit.)
func (b *Backend) AdamW(param, grad, m, v *engine.Tensor, h engine.AdamWParams) {
	p, g, ms, vs := floats("AdamW", param), floats("AdamW", grad), floats("AdamW", m), floats("AdamW", v)
	n := len(p)
	check(len(g) == n && len(ms) == n && len(vs) == n,
		"AdamW", engine.MisuseShape, "param %v, grad %v, m %v and v %v differ in size", param, grad, m, v)
	check(h.Step >= 1, "AdamW", engine.MisuseRange, "Step = %d, want ≥ 1 (it counts from 1)", h.Step)
	c := adamWCoefficients(h)
	b.parallelFor(n, elementGrain/4, func(lo, hi int) {
		vec.AdamW(p[lo:hi], g[lo:hi], ms[lo:hi], vs[lo:hi], &c)
	})
}

// adamWCoefficients are the float32 scalars of one AdamW step, computed
// in float64 and rounded once (see AdamW).
func adamWCoefficients(h engine.AdamWParams) vec.AdamWStep {
	lr, wd := float64(h.LR), float64(h.WeightDecay)
	beta1, beta2 := float64(h.Beta1), float64(h.Beta2)
	step := float64(h.Step)
	return vec.AdamWStep{
		Decay: float32(1 - lr*wd),
		B1:    float32(beta1), A1: float32(1 - beta1),
		B2: float32(beta2), A2: float32(1 - beta2),
		StepSize: float32(-(lr / (1 - math.Pow(beta1, step)))),
		BC2Sqrt:  float32(math.Sqrt(1 - math.Pow(beta2, step))),
		Eps:      h.Eps,
	}
}

// AdamWStep clips every gradient by engine.ClipCoefficient of ctl[0] and
// applies AdamW to each parameter with its own weight decay, unless ctl's
// norm or loss is not finite (see engine.Backend), and refreshes each
// parameter's Copy from it. On the CPU it is AdamW a tensor: the host
// reads ctl at no cost.
func (b *Backend) AdamWStep(ts []engine.AdamWTensors, h engine.AdamWParams, maxNorm float32, ctl *engine.Tensor) {
	c := floats("AdamWStep", ctl)
	check(len(c) == 2, "AdamWStep", engine.MisuseShape, "control %v, want 2 elements (squared norm, loss)", ctl)
	check(h.Step >= 1, "AdamWStep", engine.MisuseRange, "Step = %d, want ≥ 1 (it counts from 1)", h.Step)
	// Every tensor is checked before any is updated, in the names of
	// AdamWStep rather than of the AdamW, Scale and Copy it runs.
	for i, t := range ts {
		if compact(t) {
			checkCompact(i, t)
			continue
		}
		n := len(floats("AdamWStep", t.Param))
		check(len(floats("AdamWStep", t.Grad)) == n && len(floats("AdamWStep", t.M)) == n && len(floats("AdamWStep", t.V)) == n,
			"AdamWStep", engine.MisuseShape, "tensor %d: param %v, grad %v, m %v and v %v differ in size", i, t.Param, t.Grad, t.M, t.V)
		if t.Copy != nil {
			cs := storageOf("AdamWStep", t.Copy)
			check(cs.dtype != engine.I32, "AdamWStep", engine.MisuseDType, "tensor %d: copy %v, want F32 or BF16", i, t.Copy)
			check(t.Copy.Len() == n, "AdamWStep", engine.MisuseShape, "tensor %d: copy %v of param %v differs in size", i, t.Copy, t.Param)
		}
	}
	if !engine.StepIsFinite(c[0], c[1]) {
		return
	}
	coef := engine.ClipCoefficient(c[0], maxNorm)
	for _, t := range ts {
		if coef != 1 {
			b.Scale(t.Grad, coef)
		}
		h.WeightDecay = t.WeightDecay
		if compact(t) {
			b.adamWCompact(t, h)
			continue
		}
		b.AdamW(t.Param, t.Grad, t.M, t.V, h)
		if t.Copy != nil {
			b.Copy(t.Copy, t.Param)
		}
	}
}
