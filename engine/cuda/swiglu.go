package cuda

import (
	"github.com/memtrain/memtrain/engine"
)

// SwiGLU computes out = silu(gate) ⊙ up, silu(x) = x·σ(x) (kernel
// swiglu). out may be gate or up.
func (b *Backend) SwiGLU(out, gate, up *engine.Tensor) {
	b.do(func() {
		o, g, u := b.floatView("SwiGLU", "out", out), b.floatView("SwiGLU", "gate", gate), b.floatView("SwiGLU", "up", up)
		if o.n != g.n || o.n != u.n {
			misuse("SwiGLU", engine.MisuseShape, "%v and %v into %v", gate, up, out)
		}
		b.launch(kSwiGLU, vecGrid(o.n), block1(elementThreads), o.ptr, o.dt(), g.ptr, g.dt(), u.ptr, u.dt(), int64(o.n))
	})
}

// SwiGLUBackward writes dGate and dUp from dOut (kernel swiglu_backward).
// dGate may be gate and dUp up or dOut.
func (b *Backend) SwiGLUBackward(dGate, dUp, dOut, gate, up *engine.Tensor) {
	b.do(func() {
		dg, du := b.floatView("SwiGLUBackward", "dGate", dGate), b.floatView("SwiGLUBackward", "dUp", dUp)
		do := b.floatView("SwiGLUBackward", "dOut", dOut)
		g, u := b.floatView("SwiGLUBackward", "gate", gate), b.floatView("SwiGLUBackward", "up", up)
		n := do.n
		if dg.n != n || du.n != n || g.n != n || u.n != n {
			misuse("SwiGLUBackward", engine.MisuseShape, "%v, %v, %v, %v, %v differ in size", dGate, dUp, dOut, gate, up)
		}
		b.launch(kSwiGLUBackward, vecGrid(n), block1(elementThreads),
			dg.ptr, dg.dt(), du.ptr, du.dt(), do.ptr, do.dt(), g.ptr, g.dt(), u.ptr, u.dt(), int64(n))
	})
}

// swigluTraffic is SwiGLU of n elements (kernel swiglu): gate and up
// read, out written; σ (a negation, an exponential, an addition and a
// division) and two products each.
func swigluTraffic(n int, out, gate, up engine.DType) traffic {
	return traffic{bytes: moved(n, out, gate, up), flops: 6 * float64(n)}
}

// swigluBackwardTraffic is SwiGLUBackward of n elements (kernel
// swiglu_backward): dOut, gate and up read, dGate and dUp written; σ
// (4) and the two gradients' 9 operations each.
func swigluBackwardTraffic(n int, dGate, dUp, dOut, gate, up engine.DType) traffic {
	return traffic{bytes: moved(n, dGate, dUp, dOut, gate, up), flops: 13 * float64(n)}
}
