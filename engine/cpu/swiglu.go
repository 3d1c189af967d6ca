package cpu

import (
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu/vec"
)

// SwiGLU computes out = silu(gate) ⊙ up, silu(x) = x·σ(x), with
// vec.SwiGLU: in float32 from vec's exponential, σ(x) = 1/(1+e^−x), on
// amd64; in float64, rounded once, elsewhere. out may be gate or up
// itself. Elements are independent and computed the same wherever a
// chunk boundary falls, so the result does not depend on the thread
// count.
func (b *Backend) SwiGLU(out, gate, up *engine.Tensor) {
	if hasBF16(out, gate, up) {
		b.widened("SwiGLU", []*engine.Tensor{out, gate, up}, 1, func(t []*engine.Tensor) { b.SwiGLU(t[0], t[1], t[2]) })
		return
	}
	o, g, u := floats("SwiGLU", out), floats("SwiGLU", gate), floats("SwiGLU", up)
	check(len(o) == len(g) && len(o) == len(u), "SwiGLU", engine.MisuseShape, "%v and %v into %v", gate, up, out)
	b.parallelFor(len(o), elementGrain/2, func(lo, hi int) {
		vec.SwiGLU(o[lo:hi], g[lo:hi], u[lo:hi])
	})
}

// SwiGLUBackward writes dGate and dUp from dOut:
//
//	dUp   = dOut ⊙ silu(gate)
//	dGate = dOut ⊙ up ⊙ σ(gate)·(1 + gate·(1 − σ(gate)))
//
// the second factor being silu's derivative (see vec.SwiGLUBackward).
// dGate may be gate and dUp up (or dOut) itself: each element is read
// before it is written.
func (b *Backend) SwiGLUBackward(dGate, dUp, dOut, gate, up *engine.Tensor) {
	if hasBF16(dGate, dUp, dOut, gate, up) {
		b.widened("SwiGLUBackward", []*engine.Tensor{dGate, dUp, dOut, gate, up}, 0b11, func(t []*engine.Tensor) { b.SwiGLUBackward(t[0], t[1], t[2], t[3], t[4]) })
		return
	}
	dg, du, do, g, u := floats("SwiGLUBackward", dGate), floats("SwiGLUBackward", dUp), floats("SwiGLUBackward", dOut), floats("SwiGLUBackward", gate), floats("SwiGLUBackward", up)
	n := len(do)
	check(len(dg) == n && len(du) == n && len(g) == n && len(u) == n,
		"SwiGLUBackward", engine.MisuseShape, "%v, %v, %v, %v, %v differ in size", dGate, dUp, dOut, gate, up)
	b.parallelFor(n, elementGrain/2, func(lo, hi int) {
		vec.SwiGLUBackward(dg[lo:hi], du[lo:hi], do[lo:hi], g[lo:hi], u[lo:hi])
	})
}
