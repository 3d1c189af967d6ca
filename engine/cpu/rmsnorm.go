package cpu

import (
	"math"

	"github.com/memtrain/memtrain/engine"
)

// rmsnormShape returns N and H for an RMSNorm of x [N,H] with weight w [H]
// and checks the other tensors against them.
func rmsnormShape(op string, w, rstd *engine.Tensor, xs ...*engine.Tensor) (n, h int) {
	h = w.Len()
	check(h > 0, op, engine.MisuseShape, "empty weight")
	n = rstd.Len()
	for _, x := range xs {
		check(x.Len() == n*h, op, engine.MisuseShape, "%v does not hold %d rows of %d", x, n, h)
	}
	return n, h
}

// RMSNorm computes out[i] = x[i]·rstd[i] ⊙ w with
// rstd[i] = 1/sqrt(mean(x[i]²) + eps), and saves rstd for the backward
// pass. out, x [N,H]; w [H]; rstd [N]. The mean of squares is accumulated
// in float64; out may be x itself.
func (b *Backend) RMSNorm(out, rstd, x, w *engine.Tensor, eps float32) {
	if hasBF16(out, rstd, x, w) {
		b.widened("RMSNorm", []*engine.Tensor{out, rstd, x, w}, 0b11, func(t []*engine.Tensor) { b.RMSNorm(t[0], t[1], t[2], t[3], eps) })
		return
	}
	n, h := rmsnormShape("RMSNorm", w, rstd, out, x)
	o, r, xs, ws := floats("RMSNorm", out), floats("RMSNorm", rstd), floats("RMSNorm", x), floats("RMSNorm", w)
	b.parallelFor(n, elementGrain/h, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			xi, oi := xs[i*h:(i+1)*h], o[i*h:(i+1)*h]
			var ss float64
			for _, v := range xi {
				ss += float64(v) * float64(v)
			}
			ri := float32(1 / math.Sqrt(ss/float64(h)+float64(eps)))
			r[i] = ri
			// As HuggingFace: normalise, round, then scale by the weight.
			for j, v := range xi {
				oi[j] = float32(v*ri) * ws[j]
			}
		}
	})
}

// AddRMSNorm adds residual into x, then normalises x into out: Add(x, x,
// residual) then RMSNorm(out, rstd, x, w, eps), which it is, after
// checking every argument first (as a GPU's one kernel does). out may be
// x; residual overlaps neither.
func (b *Backend) AddRMSNorm(out, rstd, x, residual, w *engine.Tensor, eps float32) {
	const op = "AddRMSNorm"
	for _, t := range []*engine.Tensor{out, rstd, x, residual, w} {
		s := storageOf(op, t)
		check(s.dtype == engine.F32 || s.dtype == engine.BF16, op, engine.MisuseDType, "%v, want F32 or BF16", t)
	}
	rmsnormShape(op, w, rstd, out, x, residual)
	checkPartial(op, out, "out", x, "x")
	for _, t := range []*engine.Tensor{x, out} {
		if same, partial := engine.Overlap(t, residual); same || partial {
			misuse(op, engine.MisuseAlias, "%v at offset %d overlaps residual %v at offset %d", t, t.Offset, residual, residual.Offset)
		}
	}
	b.Add(x, x, residual)
	b.RMSNorm(out, rstd, x, w, eps)
}

// RMSNormBackward writes dx and adds into dw, from dOut, the forward's
// input x, weight w and saved rstd. With y = x·r ⊙ w and
// r = (mean(x²)+eps)^(−1/2),
//
//	dx = r·(w⊙dOut) − x·r³/H·Σ_k w_k·dOut_k·x_k
//	dw += Σ_i dOut[i] ⊙ x[i]·r[i]
//
// dx is computed row by row; dw is computed by a second pass whose
// goroutines each own a range of columns and sum every row into it in
// order, in float64, so dw has one writer per element and is the same for
// any thread count. dx may be dOut itself.
func (b *Backend) RMSNormBackward(dx, dw, dOut, x, w, rstd *engine.Tensor) {
	if hasBF16(dx, dw, dOut, x, w, rstd) {
		b.widened("RMSNormBackward", []*engine.Tensor{dx, dw, dOut, x, w, rstd}, 0b11, func(t []*engine.Tensor) { b.RMSNormBackward(t[0], t[1], t[2], t[3], t[4], t[5]) })
		return
	}
	n, h := rmsnormShape("RMSNormBackward", w, rstd, dx, dOut, x)
	check(dw.Len() == h, "RMSNormBackward", engine.MisuseShape, "dw %v, want %d elements", dw, h)
	dxs, dws, g, xs, ws, r := floats("RMSNormBackward", dx), floats("RMSNormBackward", dw), floats("RMSNormBackward", dOut), floats("RMSNormBackward", x), floats("RMSNormBackward", w), floats("RMSNormBackward", rstd)

	// dw first: dx may overwrite dOut.
	grain := max(16, elementGrain/max(n, 1))
	b.parallelFor(h, grain, func(c0, c1 int) {
		acc := make([]float64, c1-c0)
		for i := 0; i < n; i++ {
			ri := float64(r[i])
			gi, xi := g[i*h:][c0:c1], xs[i*h:][c0:c1]
			for j := range acc {
				acc[j] += float64(gi[j]) * float64(xi[j]) * ri
			}
		}
		for j, v := range acc {
			dws[c0+j] += float32(v)
		}
	})

	b.parallelFor(n, elementGrain/h, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			gi, xi, dxi := g[i*h:(i+1)*h], xs[i*h:(i+1)*h], dxs[i*h:(i+1)*h]
			ri := float64(r[i])
			var dot float64
			for j := range gi {
				dot += float64(ws[j]) * float64(gi[j]) * float64(xi[j])
			}
			coef := ri * ri * ri * dot / float64(h)
			for j := range gi {
				dxi[j] = float32(ri*float64(ws[j])*float64(gi[j]) - coef*float64(xi[j]))
			}
		}
	})
}
