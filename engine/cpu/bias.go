package cpu

import "github.com/memtrain/memtrain/engine"

// biasShape returns the rows and columns of a tensor x viewed as rows of
// a bias's length h (op's check: h > 0, x's length a multiple of it), and
// refuses an overlap of the two: a bias read while x is written, or a
// gradient summed from itself.
func biasShape(op string, x, bias *engine.Tensor, xName, biasName string) (rows, h int) {
	storageOf(op, x)
	storageOf(op, bias)
	h = bias.Len()
	check(h > 0, op, engine.MisuseShape, "empty %s %v", biasName, bias)
	check(x.Len()%h == 0, op, engine.MisuseShape, "%s %v does not hold rows of %d (%s %v)", xName, x, h, biasName, bias)
	if same, partial := engine.Overlap(x, bias); same || partial {
		misuse(op, engine.MisuseAlias, "%s %v at offset %d overlaps %s %v at offset %d", xName, x, x.Offset, biasName, bias, bias.Offset)
	}
	return x.Len() / h, h
}

// AddBias computes y[n, j] += bias[j] over the rows of y. A BF16 y or
// bias runs on float32 stand-ins (widened), y's rounded once back.
func (b *Backend) AddBias(y, bias *engine.Tensor) {
	for _, t := range []*engine.Tensor{y, bias} {
		s := storageOf("AddBias", t)
		check(s.dtype == engine.F32 || s.dtype == engine.BF16, "AddBias", engine.MisuseDType, "%v, want F32 or BF16", t)
	}
	rows, h := biasShape("AddBias", y, bias, "y", "bias")
	if hasBF16(y, bias) {
		b.widened("AddBias", []*engine.Tensor{y, bias}, 1, func(t []*engine.Tensor) { b.AddBias(t[0], t[1]) })
		return
	}
	ys, bs := floats("AddBias", y), floats("AddBias", bias)
	b.parallelFor(rows, elementGrain/h, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			yi := ys[i*h : (i+1)*h]
			for j, v := range bs {
				yi[j] += v
			}
		}
	})
}

// BiasGrad adds Σ_n dy[n, j] into db[j]. As RMSNormBackward's dw, the
// goroutines each own a range of columns and sum every row into it in
// order, in float64, and each column's total is added into db with one
// rounding: one writer per element, the same bits for any thread count.
// A BF16 dy is widened first.
func (b *Backend) BiasGrad(db, dy *engine.Tensor) {
	floats("BiasGrad", db)
	s := storageOf("BiasGrad", dy)
	check(s.dtype == engine.F32 || s.dtype == engine.BF16, "BiasGrad", engine.MisuseDType, "dy %v, want F32 or BF16", dy)
	rows, h := biasShape("BiasGrad", dy, db, "dy", "db")
	if hasBF16(dy) {
		b.widened("BiasGrad", []*engine.Tensor{db, dy}, 0, func(t []*engine.Tensor) { b.BiasGrad(t[0], t[1]) })
		return
	}
	dbs, g := floats("BiasGrad", db), floats("BiasGrad", dy)
	b.parallelFor(h, max(16, elementGrain/max(rows, 1)), func(c0, c1 int) {
		acc := make([]float64, c1-c0)
		for i := 0; i < rows; i++ {
			for j, v := range g[i*h+c0 : i*h+c1] {
				acc[j] += float64(v)
			}
		}
		for j, v := range acc {
			dbs[c0+j] = float32(float64(dbs[c0+j]) + v)
		}
	})
}
