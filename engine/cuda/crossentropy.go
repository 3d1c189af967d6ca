package cuda

import (
	"github.com/memtrain/memtrain/engine"
)

// logitsDims returns V for per-row kernels over logits [N,V] with n rows.
func logitsDims(op string, logits view, n int) int {
	if n <= 0 || logits.n%n != 0 || logits.n == 0 {
		misuse(op, engine.MisuseShape, "%d logits do not make %d rows", logits.n, n)
	}
	return logits.n / n
}

// CrossEntropy computes each row's weighted loss and, when dLogits is not
// nil, its gradient, in one kernel (cross_entropy, one block per row) that
// follows the CPU backend's arithmetic: see engine/cpu.CrossEntropy. Rows
// of weight 0 get zero loss and gradient whatever their target. dLogits
// may be logits itself, not a partial overlap of it. losses, logits and
// weights are F32; dLogits may be BF16. A weighted row whose target is
// outside [0, V) is refused, as on the CPU: the targets are checked on
// the host (their host copy, see Storage), and only when one is out of
// range are the weights read back to see whether its row counts — a
// synchronisation that a caller who gives weight-0 rows a valid id
// (llama does) never pays.
func (b *Backend) CrossEntropy(losses, dLogits, logits, targets, weights *engine.Tensor, scale float32) {
	b.do(func() {
		t := b.intView("CrossEntropy", "targets", targets)
		x := b.f32View("CrossEntropy", "logits", logits)
		l, w := b.f32View("CrossEntropy", "losses", losses), b.f32View("CrossEntropy", "weights", weights)
		n := t.n
		v := logitsDims("CrossEntropy", x, n)
		if l.n != n || w.n != n {
			misuse("CrossEntropy", engine.MisuseShape, "losses %v and weights %v for %d rows", losses, weights, n)
		}
		d, ddt := devptr(0), int32(engine.F32)
		if dLogits != nil {
			dv := b.floatView("CrossEntropy", "dLogits", dLogits)
			if dv.n != n*v {
				misuse("CrossEntropy", engine.MisuseShape, "dLogits %v for logits %v", dLogits, logits)
			}
			checkPartial("CrossEntropy", dLogits, "dLogits", logits, "logits")
			d, ddt = dv.ptr, dv.dt()
		}
		b.checkTargets(b.hostInts(t), w, v)
		b.launch(kCrossEntropy, grid1(n), rowThreads((v+vecElems-1)/vecElems, crossEntropyThreads),
			l.ptr, l.dt(), d, ddt, x.ptr, x.dt(), t.ptr, w.ptr, w.dt(), int32(v), scale)
	})
}

// checkTargets refuses (MisuseRange) a target outside [0, v) on a row of
// nonzero weight. The weights are read back, which waits for the
// kernels issued so far, only when some target is out of range. It runs
// on the worker thread.
func (b *Backend) checkTargets(ts []int32, w view, v int) {
	var ws []float32
	for i, t := range ts {
		if t >= 0 && int(t) < v {
			continue
		}
		if ws == nil {
			ws = make([]float32, w.n)
			b.copyToHost(pointerTo(ws), w.ptr, w.bytes())
		}
		if ws[i] != 0 {
			misuse("CrossEntropy", engine.MisuseRange, "targets[%d] = %d is outside the vocabulary of %d on a row of weight %g", i, t, v, ws[i])
		}
	}
}

// Argmax writes, for each row of logits [N,V], the index of the largest
// value into out I32 [N]: the lowest index on ties, the first NaN's when
// there is one (kernel argmax, one block per row).
func (b *Backend) Argmax(out, logits *engine.Tensor) {
	b.do(func() {
		o, x := b.intView("Argmax", "out", out), b.f32View("Argmax", "logits", logits)
		v := logitsDims("Argmax", x, o.n)
		b.launch(kArgmax, grid1(o.n), block1(argmaxThreads), o.ptr, x.ptr, x.dt(), int32(v))
		o.deviceWroteInts()
	})
}

// crossEntropyTraffic is CrossEntropy of n rows of v logits (kernel
// cross_entropy): the logits read, the gradient written when hasD (of
// dtype d), the targets and weights read and the losses written; a
// maximum, a subtraction, an exponential and a sum a logit, and with the
// gradient a subtraction, an exponential and a product more. The kernel
// passes over each row two times (three with the gradient); the later
// passes are counted as cache hits, which they are for rows up to some
// hundred KiB (L1 and L2), not for a 128k vocabulary's 512 KiB of
// float32, where they read the row from memory again: a planner should
// count (passes − 1)·n·v·4 bytes more there.
func crossEntropyTraffic(n, v int, logits engine.DType, hasD bool, d engine.DType) traffic {
	t := traffic{bytes: moved(n*v, logits) + moved(n, engine.I32, engine.F32, engine.F32), flops: 4 * float64(n) * float64(v)}
	if hasD {
		t.bytes += moved(n*v, d)
		t.flops += 3 * float64(n) * float64(v)
	}
	return t
}
