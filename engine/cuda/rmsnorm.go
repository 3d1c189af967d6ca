package cuda

import (
	"github.com/memtrain/memtrain/engine"
)

// rmsnormDims returns N and H for an RMSNorm with weight w [H] and rstd
// [N], and checks the other tensors against them.
func rmsnormDims(op string, w, rstd view, xs ...view) (n, h int) {
	h, n = w.n, rstd.n
	if h <= 0 {
		misuse(op, engine.MisuseShape, "empty weight")
	}
	for _, x := range xs {
		if x.n != n*h {
			misuse(op, engine.MisuseShape, "a tensor of %d elements does not hold %d rows of %d", x.n, n, h)
		}
	}
	return n, h
}

// RMSNorm computes out[i] = x[i]·rstd[i] ⊙ w and saves rstd[i] =
// 1/sqrt(mean(x[i]²) + eps) (kernel rmsnorm, one block per row, the mean
// in float32 with compensation: see rmsnorm.cu for its bound). out may be
// x.
func (b *Backend) RMSNorm(out, rstd, x, w *engine.Tensor, eps float32) {
	b.do(func() {
		o, r := b.floatView("RMSNorm", "out", out), b.floatView("RMSNorm", "rstd", rstd)
		xs, ws := b.floatView("RMSNorm", "x", x), b.floatView("RMSNorm", "w", w)
		n, h := rmsnormDims("RMSNorm", ws, r, o, xs)
		b.launch(kRMSNorm, grid1(n), rmsnormBlock(h), o.ptr, o.dt(), r.ptr, r.dt(), xs.ptr, xs.dt(), ws.ptr, ws.dt(), int32(h), eps)
	})
}

// AddRMSNorm adds residual into x and normalises the sum into out, as Add
// then RMSNorm would (kernel add_rmsnorm, one pass over the row). out may
// be x; residual overlaps neither.
func (b *Backend) AddRMSNorm(out, rstd, x, residual, w *engine.Tensor, eps float32) {
	b.do(func() {
		const op = "AddRMSNorm"
		o, r := b.floatView(op, "out", out), b.floatView(op, "rstd", rstd)
		xs, res, ws := b.floatView(op, "x", x), b.floatView(op, "residual", residual), b.floatView(op, "w", w)
		n, h := rmsnormDims(op, ws, r, o, xs, res)
		checkPartial(op, out, "out", x, "x")
		checkDisjoint(op, x, "x", residual, "residual")
		checkDisjoint(op, out, "out", residual, "residual")
		b.launch(kAddRMSNorm, grid1(n), rmsnormBlock(h), o.ptr, o.dt(), r.ptr, r.dt(), xs.ptr, xs.dt(),
			res.ptr, res.dt(), ws.ptr, ws.dt(), int32(h), eps)
	})
}

// rmsnormBlock is the block of the one-block-a-row kernels of rmsnorm.cu:
// a thread a vecElems elements of the row, up to rmsnormThreads.
func rmsnormBlock(h int) dim3 { return rowThreads((h+vecElems-1)/vecElems, rmsnormThreads) }

// rmsnormRowsPerChunk is how many rows one partial sum of dw covers: at
// least 32, and few enough chunks (at most 1024) that their partial sums
// stay small. It depends on the row count alone, so the sums are the same
// on every device.
func rmsnormRowsPerChunk(n int) int { return max(32, (n+1023)/1024) }

// RMSNormBackward writes dx and adds into dw. dw first, since dx may be
// dOut: per column, partial sums over fixed chunks of rows in float32
// with compensation (rmsnorm_backward_dw_partial), then the chunks in
// order (rmsnorm_backward_dw_final) — one writer per element, no
// atomics. Then dx row by row (rmsnorm_backward_dx).
func (b *Backend) RMSNormBackward(dx, dw, dOut, x, w, rstd *engine.Tensor) {
	b.do(func() {
		dxs, dws := b.floatView("RMSNormBackward", "dx", dx), b.floatView("RMSNormBackward", "dw", dw)
		g, xs := b.floatView("RMSNormBackward", "dOut", dOut), b.floatView("RMSNormBackward", "x", x)
		ws, r := b.floatView("RMSNormBackward", "w", w), b.floatView("RMSNormBackward", "rstd", rstd)
		n, h := rmsnormDims("RMSNormBackward", ws, r, dxs, g, xs)
		if dws.n != h {
			misuse("RMSNormBackward", engine.MisuseShape, "dw %v, want %d elements", dw, h)
		}
		if n == 0 {
			return
		}
		per := rmsnormRowsPerChunk(n)
		chunks := (n + per - 1) / per
		partial := b.scratchBuffer(scratchReduce, uint64(chunks)*uint64(h)*4)
		b.launch(kRMSNormBackwardDwPart, dim3{uint32((h + 256*vecElems - 1) / (256 * vecElems)), uint32(chunks), 1}, block1(256),
			partial, g.ptr, g.dt(), xs.ptr, xs.dt(), r.ptr, r.dt(), int64(n), int32(h), int32(per))
		b.launch(kRMSNormBackwardDwFinal, grid1((h+255)/256), block1(256), dws.ptr, dws.dt(), partial, int32(chunks), int32(h))
		b.launch(kRMSNormBackwardDx, grid1(n), rmsnormBlock(h),
			dxs.ptr, dxs.dt(), g.ptr, g.dt(), xs.ptr, xs.dt(), ws.ptr, ws.dt(), r.ptr, r.dt(), int32(h))
	})
}

// rmsnormTraffic is RMSNorm of rows rows of h (kernel rmsnorm): x read
// (once: its second pass is the block's own row, from the caches), w read
// (once: every block reads the same h elements), out written, rstd
// written; a square and a sum per element, then the normalisation's two
// products.
func rmsnormTraffic(rows, h int, out, rstd, x, w engine.DType) traffic {
	return traffic{bytes: moved(rows*h, out, x) + moved(h, w) + moved(rows, rstd), flops: 4 * float64(rows) * float64(h)}
}

// addRMSNormTraffic is AddRMSNorm (kernel add_rmsnorm): RMSNorm's, plus
// the residual read and the sum written back into x, an addition each.
func addRMSNormTraffic(rows, h int, out, rstd, x, residual, w engine.DType) traffic {
	t := rmsnormTraffic(rows, h, out, rstd, x, w)
	return traffic{bytes: t.bytes + moved(rows*h, residual, x), flops: t.flops + float64(rows)*float64(h)}
}

// rmsnormBackwardTraffic is RMSNormBackward of rows rows of h: dw's
// partial sums (kernel rmsnorm_backward_dw_partial: dOut, x and rstd
// read, a float32 partial sum of each column for each chunk of rows
// written), their totals (rmsnorm_backward_dw_final: the partials read,
// dw read and written) and dx (rmsnorm_backward_dx: w, dOut, x and rstd
// read — its second pass over the row from the caches — dx written).
// Flops: dw's three a element (two products and the sum), dx's dot
// product (three) and its five.
func rmsnormBackwardTraffic(rows, h int, dx, dw, dOut, x, w, rstd engine.DType) traffic {
	chunks := (rows + rmsnormRowsPerChunk(rows) - 1) / rmsnormRowsPerChunk(rows)
	partial := moved(chunks*h, engine.F32)
	elems := float64(rows) * float64(h)
	dwPart := traffic{bytes: moved(rows*h, dOut, x) + moved(rows, rstd) + partial, flops: 3 * elems}
	dwFinal := traffic{bytes: partial + moved(h, dw, dw), flops: float64(chunks) * float64(h)}
	dxs := traffic{bytes: moved(rows*h, dOut, x, dx) + moved(h, w) + moved(rows, rstd), flops: 8 * elems}
	return dwPart.plus(dwFinal).plus(dxs)
}
