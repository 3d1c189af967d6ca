package cuda

import (
	"github.com/memtrain/memtrain/engine"
)

// RoPE rotates x [N, heads, D] in place by the rotary position embedding,
// HuggingFace's rotate-half layout (kernel rope, one block per row); see
// engine.Backend for the rounding of θ, which this follows.
func (b *Backend) RoPE(x, pos, invFreq *engine.Tensor) {
	b.rope("RoPE", x, pos, invFreq, 1)
}

// RoPEBackward rotates the gradient dx [N, heads, D] back by −θ in place.
func (b *Backend) RoPEBackward(dx, pos, invFreq *engine.Tensor) {
	b.rope("RoPEBackward", dx, pos, invFreq, -1)
}

func (b *Backend) rope(op string, x, pos, invFreq *engine.Tensor, sign float32) {
	b.do(func() {
		xs, ps, fs := b.floatView(op, "x", x), b.intView(op, "pos", pos), b.floatView(op, "invFreq", invFreq)
		half := fs.n
		d := 2 * half
		n := ps.n
		if half == 0 {
			misuse(op, engine.MisuseShape, "empty invFreq")
		}
		if n == 0 || xs.n%(n*d) != 0 {
			misuse(op, engine.MisuseShape, "%v is not [%d, heads, %d]", x, n, d)
		}
		heads := xs.n / (n * d)
		b.launch(kRoPE, grid1(n), rowThreads(heads*half, 256),
			xs.ptr, xs.dt(), ps.ptr, fs.ptr, fs.dt(), int32(heads), int32(half), sign)
	})
}
