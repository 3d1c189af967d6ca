package cpu

import (
	"math"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu/vec"
)

// logitsShape returns N and V for per-row kernels over logits [N,V] with
// n rows.
func logitsShape(op string, logits *engine.Tensor, n int) int {
	check(n > 0 && logits.Len()%n == 0 && logits.Len() > 0, op, engine.MisuseShape, "%v does not hold %d rows", logits, n)
	return logits.Len() / n
}

// CrossEntropy computes, for each row i of logits [N,V] with target
// t[i] (I32) and weight w[i],
//
//	losses[i]  = −w[i]·log softmax(logits[i])[t[i]]
//	dLogits[i] = scale·w[i]·(softmax(logits[i]) − onehot(t[i]))
//
// the gradient only when dLogits is not nil. The softmax is taken after
// subtracting the row's maximum m, so neither large nor very negative
// logits overflow or lose the loss: the exponentials e_j = e^(x_j − m)
// come from vec.ExpSum (float32, within an ulp; flushed to zero below
// e^−87.3, which no sum can notice) and are summed in float64 in a fixed
// lane order, and the logarithm is taken in float64 of x_t − m exactly.
// The gradient is e_j·c with c = scale·w/Σe rounded to float32, except at
// the target, whose p_t − 1 would cancel when p_t is near 1: it is
// computed in float64 from the exact exponent.
//
// Each row is computed whole by one goroutine, so the result does not
// depend on the thread count.
//
// Rows with weight 0 get loss 0 and a zero gradient row whatever their
// target (padding may carry −1). A target outside [0, V) on a row with
// nonzero weight is a programming error and panics.
//
// dLogits may be logits itself: the gradient then replaces the logits in
// place, which saves the N×V buffer that dominates a small model's
// activations. It may also be BF16 (mixed precision's head gradient): each
// row is then computed in float32 as above, in a row of scratch, and
// rounded once to nearest even — the same bits as an F32 dLogits copied
// into bf16, without writing and reading the float32 gradient of the whole
// chunk. A dLogits that overlaps logits otherwise than as the same view
// is refused (engine.MisuseAlias).
func (b *Backend) CrossEntropy(losses, dLogits, logits, targets, weights *engine.Tensor, scale float32) {
	ts := ints("CrossEntropy", targets)
	n := len(ts)
	v := logitsShape("CrossEntropy", logits, n)
	ls, xs, ws := floats("CrossEntropy", losses), floats("CrossEntropy", logits), floats("CrossEntropy", weights)
	check(len(ls) == n && len(ws) == n, "CrossEntropy", engine.MisuseShape, "losses %v and weights %v for %d rows", losses, weights, n)
	var ds []float32
	var dh []uint16 // a BF16 dLogits
	if dLogits != nil {
		if storageOf("CrossEntropy", dLogits).dtype == engine.BF16 {
			dh = bf16s("CrossEntropy", dLogits)
		} else {
			ds = floats("CrossEntropy", dLogits)
		}
		check(max(len(ds), len(dh)) == n*v, "CrossEntropy", engine.MisuseShape, "dLogits %v for logits %v", dLogits, logits)
		checkPartial("CrossEntropy", dLogits, "dLogits", logits, "logits")
	}
	for i, t := range ts {
		if ws[i] != 0 && (t < 0 || int(t) >= v) {
			misuse("CrossEntropy", engine.MisuseRange, "targets[%d] = %d is outside the vocabulary of %d on a row of weight %g", i, t, v, ws[i])
		}
	}

	// A row costs a few passes over V floats: one goroutine per
	// elementGrain/2 elements at least.
	b.parallelFor(n, max(1, elementGrain/2/v), func(lo, hi int) {
		// scratch holds the exponentials when there is no F32 d to hold
		// them: a row's worth, in cache until its bf16 row is written.
		var scratch []float32
		if ds == nil {
			scratch = b.scratch.get(v)
			defer b.scratch.put(scratch)
		}
		for i := lo; i < hi; i++ {
			x := xs[i*v : (i+1)*v]
			var d []float32
			var dr []uint16 // the row of a BF16 dLogits
			switch {
			case ds != nil:
				d = ds[i*v : (i+1)*v]
			case dh != nil:
				d, dr = scratch, dh[i*v:(i+1)*v]
			}
			w := float64(ws[i])
			if w == 0 {
				ls[i] = 0
				clear(d)
				clear(dr)
				continue
			}
			t := int(ts[i])
			m := vec.Max(x)
			// Read the target's logit before d (which may be x) is
			// overwritten.
			zt := float64(x[t]) - float64(m)
			e := d
			if e == nil {
				e = scratch
			}
			sum := vec.ExpSum(e, x, m)
			ls[i] = float32(w * (math.Log(sum) - zt))
			if d == nil {
				continue
			}
			c := float64(scale) * w / sum
			vec.Scale(float32(c), d)
			d[t] = float32(math.Exp(zt)*c - float64(scale)*w)
			if dr != nil {
				vec.RoundBF16(dr, d)
			}
		}
	})
}

// Argmax writes, for each row of logits [N,V], the index of the largest
// value into out I32 [N]. Ties go to the lowest index. A NaN counts as
// larger than every number, so a row holding NaN yields the index of its
// first NaN, as torch.argmax does: a diverged model shows up as such
// rather than as a plausible token.
func (b *Backend) Argmax(out, logits *engine.Tensor) {
	o := ints("Argmax", out)
	n := len(o)
	v := logitsShape("Argmax", logits, n)
	xs := floats("Argmax", logits)
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
