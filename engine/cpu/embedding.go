package cpu

import (
	"math"

	"github.com/memtrain/memtrain/engine"
)

// embeddingShape returns N, H and V for an embedding of ids into out from
// table, and checks that every id names a row of the table.
func embeddingShape(op string, out, table, ids *engine.Tensor) (n, h, v int) {
	id := ints(op, ids)
	storageOf(op, out)
	storageOf(op, table)
	check(len(table.Shape) > 0 && table.Dim(-1) > 0, op, engine.MisuseShape, "table %v has no columns", table)
	h = table.Dim(-1)
	v = table.Len() / h
	n = len(id)
	check(out.Len() == n*h, op, engine.MisuseShape, "%v for %d ids of width %d", out, n, h)
	for i, x := range id {
		if x < 0 || int(x) >= v {
			misuse(op, engine.MisuseRange, "ids[%d] = %d is outside the table's %d rows", i, x, v)
		}
	}
	return n, h, v
}

// Embedding gathers out[i] = table[ids[i]]; out [N,H], table [V,H], ids
// I32 [N]. An id outside [0, V) panics. The table may be BF16 (a frozen
// bf16 embedding), its rows widened exactly.
func (b *Backend) Embedding(out, table, ids *engine.Tensor) {
	n, h, _ := embeddingShape("Embedding", out, table, ids)
	if out.DType() == engine.BF16 {
		if table.DType() == engine.BF16 {
			// bf16 rows into a bf16 output: the bits themselves.
			o, tab, id := bf16s("Embedding", out), bf16s("Embedding", table), ints("Embedding", ids)
			b.parallelFor(n, elementGrain/max(h, 1), func(lo, hi int) {
				for i := lo; i < hi; i++ {
					row := int(id[i])
					copy(o[i*h:(i+1)*h], tab[row*h:(row+1)*h])
				}
			})
			return
		}
		b.widened("Embedding", []*engine.Tensor{out, table, ids}, 1, func(t []*engine.Tensor) { b.Embedding(t[0], t[1], t[2]) })
		return
	}
	if table.DType() == engine.BF16 {
		o, tab, id := floats("Embedding", out), bf16s("Embedding", table), ints("Embedding", ids)
		b.parallelFor(n, elementGrain/max(h, 1), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				row := int(id[i])
				for j, v := range tab[row*h : (row+1)*h] {
					o[i*h+j] = math.Float32frombits(uint32(v) << 16)
				}
			}
		})
		return
	}
	o, tab, id := floats("Embedding", out), floats("Embedding", table), ints("Embedding", ids)
	b.parallelFor(n, elementGrain/max(h, 1), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			row := int(id[i])
			copy(o[i*h:(i+1)*h], tab[row*h:(row+1)*h])
		}
	})
}

// EmbeddingBackward adds dOut[i] into dTable[ids[i]] for every i, in order
// of i. The threads split the columns, not the rows: a token that occurs
// twice then updates its row from one goroutine, in order, without locks
// or per-thread copies of the table, and the result is the same for any
// thread count.
func (b *Backend) EmbeddingBackward(dTable, dOut, ids *engine.Tensor) {
	if hasBF16(dTable, dOut) {
		b.widened("EmbeddingBackward", []*engine.Tensor{dTable, dOut, ids}, 1, func(t []*engine.Tensor) { b.EmbeddingBackward(t[0], t[1], t[2]) })
		return
	}
	n, h, _ := embeddingShape("EmbeddingBackward", dOut, dTable, ids)
	dt, do, id := floats("EmbeddingBackward", dTable), floats("EmbeddingBackward", dOut), ints("EmbeddingBackward", ids)
	// Give each goroutine at least a cache line of columns, and enough
	// rows × columns to be worth it.
	grain := max(16, elementGrain/max(n, 1))
	b.parallelFor(h, grain, func(c0, c1 int) {
		for i := 0; i < n; i++ {
			dst := dt[int(id[i])*h:][c0:c1]
			src := do[i*h:][c0:c1]
			for j := range dst {
				dst[j] += src[j]
			}
		}
	})
}
