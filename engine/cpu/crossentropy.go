package cpu

import (
	"math"

	"github.com/memtrain/memtrain/engine"
)

// logitsShape returns N and V for per-row kernels over logits [N,V] with
// n rows.
func logitsShape(op string, logits *engine.Tensor, n int) int {
	check(n > 0 && logits.Len()%n == 0 && logits.Len() > 0, "%s: %v does not hold %d rows", op, logits, n)
	return logits.Len() / n
}

// CrossEntropy computes, for each row i of logits [N,V] with target
// t[i] (I32) and weight w[i],
//
//	losses[i]  = −w[i]·log softmax(logits[i])[t[i]]
//	dLogits[i] = scale·w[i]·(softmax(logits[i]) − onehot(t[i]))
//
// the gradient only when dLogits is not nil. The softmax is taken after
// subtracting the row's maximum, with the exponentials summed and the
// logarithm taken in float64, so neither large nor very negative logits
// overflow or lose the loss.
//
// Rows with weight 0 get loss 0 and a zero gradient row whatever their
// target (padding may carry −1). A target outside [0, V) on a row with
// nonzero weight is a programming error and panics.
//
// dLogits may be logits itself: the gradient then replaces the logits in
// place, which saves the N×V buffer that dominates a small model's
// activations.
func (b *Backend) CrossEntropy(losses, dLogits, logits, targets, weights *engine.Tensor, scale float32) {
	n := targets.Len()
	v := logitsShape("CrossEntropy", logits, n)
	ls, xs, ts, ws := Float32s(losses), Float32s(logits), Int32s(targets), Float32s(weights)
	check(len(ls) == n && len(ws) == n, "CrossEntropy: losses %v and weights %v for %d rows", losses, weights, n)
	var ds []float32
	if dLogits != nil {
		ds = Float32s(dLogits)
		check(len(ds) == n*v, "CrossEntropy: dLogits %v for logits %v", dLogits, logits)
	}
	for i, t := range ts {
		check(ws[i] == 0 || (t >= 0 && int(t) < v),
			"CrossEntropy: targets[%d] = %d is outside the vocabulary of %d on a row of weight %g", i, t, v, ws[i])
	}

	// Rows cost about as much per element as SwiGLU's: an exponential.
	b.parallelFor(n, max(1, elementGrain/8/v), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := xs[i*v : (i+1)*v]
			var d []float32
			if ds != nil {
				d = ds[i*v : (i+1)*v]
			}
			w := float64(ws[i])
			if w == 0 {
				ls[i] = 0
				clear(d)
				continue
			}
			t := int(ts[i])
			m := x[0]
			for _, xj := range x[1:] {
				if xj > m {
					m = xj
				}
			}
			// Read the target's logit before d (which may be x) is
			// overwritten.
			zt := float64(x[t]) - float64(m)
			var sum float64
			if d == nil {
				for _, xj := range x {
					sum += math.Exp(float64(xj) - float64(m))
				}
			} else {
				// Keep each exponential in d so the gradient needs no
				// second exp.
				for j, xj := range x {
					e := math.Exp(float64(xj) - float64(m))
					d[j] = float32(e)
					sum += e
				}
			}
			ls[i] = float32(w * (math.Log(sum) - zt))
			if d == nil {
				continue
			}
			c := float64(scale) * w / sum
			for j, e := range d {
				d[j] = float32(float64(e) * c)
			}
			// The target's gradient is p_t − 1, which cancels when p_t is
			// near 1: compute it from the unrounded exponential.
			d[t] = float32(math.Exp(zt)*c - float64(scale)*w)
		}
	})
}

// Argmax writes, for each row of logits [N,V], the index of the largest
// value into out I32 [N]. Ties go to the lowest index. A NaN counts as
// larger than every number, so a row holding NaN yields the index of its
// first NaN, as torch.argmax does: a diverged model shows up as such
// rather than as a plausible token.
func (b *Backend) Argmax(out, logits *engine.Tensor) {
	o := Int32s(out)
	n := len(o)
	v := logitsShape("Argmax", logits, n)
	xs := Float32s(logits)
	b.parallelFor(n, max(1, elementGrain/v), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			o[i] = int32(argmax(xs[i*v : (i+1)*v]))
		}
	})
}

// argmax is Argmax for one row.
func argmax(x []float32) int {
	best := 0
	for j, xj := range x {
		if xj != xj { // NaN
			return j
		}
		if xj > x[best] {
			best = j
		}
	}
	return best
}
