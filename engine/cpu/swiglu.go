package cpu

import (
	"math"

	"github.com/memtrain/memtrain/engine"
)

// sigmoid is 1/(1+e^−x) in float64, which neither overflows nor loses
// precision for float32 inputs: a large e^−x saturates to +Inf, which
// gives exactly 0.
func sigmoid(x float32) float64 { return 1 / (1 + math.Exp(-float64(x))) }

// SwiGLU computes out = silu(gate) ⊙ up, silu(x) = x·σ(x), each element in
// float64 and rounded once. out may be gate or up itself.
func (b *Backend) SwiGLU(out, gate, up *engine.Tensor) {
	o, g, u := Float32s(out), Float32s(gate), Float32s(up)
	check(len(o) == len(g) && len(o) == len(u), "SwiGLU of %v and %v into %v", gate, up, out)
	b.parallelFor(len(o), elementGrain/8, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o[i] = float32(float64(g[i]) * sigmoid(g[i]) * float64(u[i]))
		}
	})
}

// SwiGLUBackward writes dGate and dUp from dOut:
//
//	dUp   = dOut ⊙ silu(gate)
//	dGate = dOut ⊙ up ⊙ σ(gate)·(1 + gate·(1 − σ(gate)))
//
// the second factor being silu's derivative. dGate may be gate and dUp up
// (or dOut) itself: each element is read before it is written.
func (b *Backend) SwiGLUBackward(dGate, dUp, dOut, gate, up *engine.Tensor) {
	dg, du, do, g, u := Float32s(dGate), Float32s(dUp), Float32s(dOut), Float32s(gate), Float32s(up)
	n := len(do)
	check(len(dg) == n && len(du) == n && len(g) == n && len(u) == n,
		"SwiGLUBackward: %v, %v, %v, %v, %v differ in size", dGate, dUp, dOut, gate, up)
	b.parallelFor(n, elementGrain/8, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x, y, d := float64(g[i]), float64(u[i]), float64(do[i])
			s := sigmoid(g[i])
			dg[i] = float32(d * y * s * (1 + x*(1-s)))
			du[i] = float32(d * x * s)
		}
	})
}
