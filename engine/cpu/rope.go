package cpu

import (
	"math"

	"github.com/memtrain/memtrain/engine"
)

// RoPE rotates x [N, heads, D] in place by the rotary position embedding,
// HuggingFace's rotate-half layout: for j < D/2, with θ = pos·invFreq[j],
//
//	x'[j]     = x[j]·cos θ − x[j+D/2]·sin θ
//	x'[j+D/2] = x[j+D/2]·cos θ + x[j]·sin θ
//
// θ is the float32 product pos·invFreq[j], as HuggingFace computes it in
// float32 (the rounding of θ matters at large positions: it moves cos θ by
// up to half an ulp of θ); cos and sin are then evaluated in float64 and
// rounded.
func (b *Backend) RoPE(x, pos, invFreq *engine.Tensor) {
	b.rope("RoPE", x, pos, invFreq, 1)
}

// RoPEBackward rotates the gradient dx [N, heads, D] by −θ in place: the
// rotation is orthogonal, so its transpose is its inverse.
func (b *Backend) RoPEBackward(dx, pos, invFreq *engine.Tensor) {
	b.rope("RoPEBackward", dx, pos, invFreq, -1)
}

// rope rotates by sign·θ.
func (b *Backend) rope(op string, x, pos, invFreq *engine.Tensor, sign float64) {
	if hasBF16(x, invFreq) {
		b.widened([]*engine.Tensor{x, pos, invFreq}, 1, func(t []*engine.Tensor) { b.rope(op, t[0], t[1], t[2], sign) })
		return
	}
	half := invFreq.Len()
	d := 2 * half
	n := pos.Len()
	check(half > 0, "%s: empty invFreq", op)
	check(n > 0 && x.Len()%(n*d) == 0, "%s: %v is not [%d, heads, %d]", op, x, n, d)
	heads := x.Len() / (n * d)
	xs, ps, fs := floats(op, x), Int32s(pos), floats(op, invFreq)
	b.parallelFor(n, max(1, elementGrain/(heads*d)), func(lo, hi int) {
		cos := make([]float32, half)
		sin := make([]float32, half)
		for i := lo; i < hi; i++ {
			// The angles depend on the row's position only: compute them
			// once for all its heads.
			p := float32(ps[i])
			for j := range half {
				theta := float64(float32(p * fs[j]))
				s, c := math.Sincos(theta)
				cos[j], sin[j] = float32(c), float32(sign*s)
			}
			for hd := range heads {
				v := xs[(i*heads+hd)*d : (i*heads+hd+1)*d]
				for j := range half {
					x0, x1 := v[j], v[j+half]
					v[j] = float32(x0*cos[j]) - float32(x1*sin[j])
					v[j+half] = float32(x1*cos[j]) + float32(x0*sin[j])
				}
			}
		}
	})
}
