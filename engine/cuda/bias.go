package cuda

import "github.com/memtrain/memtrain/engine"

// biasDims returns the rows and columns of x viewed as rows of the
// bias's length h (h > 0, x's length a multiple of it), and refuses an
// overlap of the two: a bias read while x is written, or a gradient
// summed from itself.
func biasDims(op string, x, bias view, xt, biast *engine.Tensor, xName, biasName string) (rows, h int) {
	h = bias.n
	if h <= 0 {
		misuse(op, engine.MisuseShape, "empty %s %v", biasName, biast)
	}
	if x.n%h != 0 {
		misuse(op, engine.MisuseShape, "%s %v does not hold rows of %d (%s %v)", xName, xt, h, biasName, biast)
	}
	checkDisjoint(op, xt, xName, biast, biasName)
	return x.n / h, h
}

// AddBias computes y[r, j] += bias[j] over the rows of y (kernel
// add_bias, one pass over y, each sum rounded once to y's dtype).
func (b *Backend) AddBias(y, bias *engine.Tensor) {
	b.do(func() {
		ys, bs := b.floatView("AddBias", "y", y), b.floatView("AddBias", "bias", bias)
		biasDims("AddBias", ys, bs, y, bias, "y", "bias")
		if ys.n == 0 {
			return
		}
		b.launch(kAddBias, vecGrid(ys.n), block1(elementThreads), ys.ptr, ys.dt(), bs.ptr, bs.dt(), int64(ys.n), int32(bs.n))
	})
}

// BiasGrad adds Σ_r dy[r, j] into db[j], as RMSNormBackward adds into its
// dw: per column, compensated float32 sums over fixed chunks of rows
// (bias_grad_partial, the chunks rmsnormRowsPerChunk's), then the chunks
// in order into db (rmsnorm_backward_dw_final) — one writer per element,
// no atomics, the same bits on every run.
func (b *Backend) BiasGrad(db, dy *engine.Tensor) {
	b.do(func() {
		dbs, g := b.f32View("BiasGrad", "db", db), b.floatView("BiasGrad", "dy", dy)
		rows, h := biasDims("BiasGrad", g, dbs, dy, db, "dy", "db")
		if rows == 0 {
			return
		}
		per := rmsnormRowsPerChunk(rows)
		chunks := (rows + per - 1) / per
		partial := b.scratchBuffer(scratchReduce, uint64(chunks)*uint64(h)*4)
		b.launch(kBiasGradPart, dim3{uint32((h + elementThreads*vecElems - 1) / (elementThreads * vecElems)), uint32(chunks), 1}, block1(elementThreads),
			partial, g.ptr, g.dt(), int64(rows), int32(h), int32(per))
		b.launch(kRMSNormBackwardDwFinal, grid1((h+elementThreads-1)/elementThreads), block1(elementThreads), dbs.ptr, dbs.dt(), partial, int32(chunks), int32(h))
	})
}

// addBiasTraffic is AddBias of rows rows of h (kernel add_bias): y read
// and written, the bias read once (every block reads the same h elements,
// from the caches after the first); an addition an element.
func addBiasTraffic(rows, h int, y, bias engine.DType) traffic {
	return traffic{bytes: moved(rows*h, y, y) + moved(h, bias), flops: float64(rows) * float64(h)}
}

// biasGradTraffic is BiasGrad of rows rows of h: the partial sums
// (bias_grad_partial: dy read, a float32 sum of each column for each
// chunk of rows written) and their totals (rmsnorm_backward_dw_final: the
// partials read, db read and written); an addition an element of dy and
// of the partials.
func biasGradTraffic(rows, h int, db, dy engine.DType) traffic {
	chunks := (rows + rmsnormRowsPerChunk(rows) - 1) / rmsnormRowsPerChunk(rows)
	partial := moved(chunks*h, engine.F32)
	part := traffic{bytes: moved(rows*h, dy) + partial, flops: float64(rows) * float64(h)}
	final := traffic{bytes: partial + moved(h, db, db), flops: float64(chunks) * float64(h)}
	return part.plus(final)
}
