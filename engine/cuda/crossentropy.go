package cuda

import (
	"fmt"

	"github.com/memtrain/memtrain/engine"
)

// logitsDims returns V for per-row kernels over logits [N,V] with n rows.
func logitsDims(op string, logits view, n int) int {
	if n <= 0 || logits.n%n != 0 || logits.n == 0 {
		panic(fmt.Sprintf("cuda: %s: %d logits do not make %d rows", op, logits.n, n))
	}
	return logits.n / n
}

// CrossEntropy computes each row's weighted loss and, when dLogits is not
// nil, its gradient, in one kernel (cross_entropy, one block per row) that
// follows the CPU backend's arithmetic: see engine/cpu.CrossEntropy. Rows
// of weight 0 get zero loss and gradient whatever their target. dLogits
// may be logits itself. A weighted row whose target is outside [0, V)
// gets NaN (the CPU backend panics; here the weights are on the device).
func (b *Backend) CrossEntropy(losses, dLogits, logits, targets, weights *engine.Tensor, scale float32) {
	b.do(func() {
		t := b.intView("CrossEntropy", "targets", targets)
		x := b.floatView("CrossEntropy", "logits", logits)
		l, w := b.floatView("CrossEntropy", "losses", losses), b.floatView("CrossEntropy", "weights", weights)
		n := t.n
		v := logitsDims("CrossEntropy", x, n)
		if l.n != n || w.n != n {
			panic(fmt.Sprintf("cuda: CrossEntropy: losses %v and weights %v for %d rows", losses, weights, n))
		}
		d, ddt := devptr(0), int32(engine.F32)
		if dLogits != nil {
			dv := b.floatView("CrossEntropy", "dLogits", dLogits)
			if dv.n != n*v {
				panic(fmt.Sprintf("cuda: CrossEntropy: dLogits %v for logits %v", dLogits, logits))
			}
			d, ddt = dv.ptr, dv.dt()
		}
		b.launch(kCrossEntropy, grid1(n), rowThreads(v, crossEntropyThreads),
			l.ptr, l.dt(), d, ddt, x.ptr, x.dt(), t.ptr, w.ptr, w.dt(), int32(v), scale)
	})
}

// Argmax writes, for each row of logits [N,V], the index of the largest
// value into out I32 [N]: the lowest index on ties, the first NaN's when
// there is one (kernel argmax, one block per row).
func (b *Backend) Argmax(out, logits *engine.Tensor) {
	b.do(func() {
		o, x := b.intView("Argmax", "out", out), b.floatView("Argmax", "logits", logits)
		v := logitsDims("Argmax", x, o.n)
		b.launch(kArgmax, grid1(o.n), block1(argmaxThreads), o.ptr, x.ptr, x.dt(), int32(v))
		o.deviceWroteInts()
	})
}
