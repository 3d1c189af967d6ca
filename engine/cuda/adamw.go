package cuda

import (
	"fmt"
	"math"

	"github.com/memtrain/memtrain/engine"
)

// AdamW updates param in place from grad and the moments m and v (kernel
// adamw), exactly as the CPU backend does (see engine/cpu.AdamW): the
// scalar coefficients are computed here in float64 and rounded to
// float32, and the kernel rounds each elementwise operation to float32 in
// PyTorch's order. The tensors may be F32 or BF16 (master weights and
// moments are F32 in memtrain).
func (b *Backend) AdamW(param, grad, m, v *engine.Tensor, h engine.AdamWParams) {
	b.do(func() {
		p, g := b.floatView("AdamW", "param", param), b.floatView("AdamW", "grad", grad)
		ms, vs := b.floatView("AdamW", "m", m), b.floatView("AdamW", "v", v)
		n := p.n
		if g.n != n || ms.n != n || vs.n != n {
			panic(fmt.Sprintf("cuda: AdamW: param %v, grad %v, m %v and v %v differ in size", param, grad, m, v))
		}
		if h.Step < 1 {
			panic(fmt.Sprintf("cuda: AdamW: Step = %d, want ≥ 1 (it counts from 1)", h.Step))
		}
		lr, wd := float64(h.LR), float64(h.WeightDecay)
		beta1, beta2 := float64(h.Beta1), float64(h.Beta2)
		step := float64(h.Step)
		b.launch(kAdamW, elementGrid(n), block1(elementThreads),
			p.ptr, p.dt(), g.ptr, g.dt(), ms.ptr, ms.dt(), vs.ptr, vs.dt(), int64(n),
			float32(1-lr*wd), float32(beta1), float32(1-beta1), float32(beta2), float32(1-beta2),
			float32(-(lr / (1 - math.Pow(beta1, step)))), float32(math.Sqrt(1-math.Pow(beta2, step))), h.Eps)
	})
}
