package cuda

import (
	"fmt"
	"slices"

	"github.com/memtrain/memtrain/engine"
)

// Embedding gathers out[i] = table[ids[i]] (kernel embedding, one block per
// token); out [N,H], table [V,H], ids I32 [N]. An id outside [0, V)
// panics, as on the CPU.
func (b *Backend) Embedding(out, table, ids *engine.Tensor) {
	b.do(func() {
		o, t, id := b.floatView("Embedding", "out", out), b.floatView("Embedding", "table", table), b.intView("Embedding", "ids", ids)
		n, h, v := embeddingDims("Embedding", out, table, ids)
		checkIDs("Embedding", b.hostInts(id), v)
		b.launch(kEmbedding, grid1(n), rowThreads((h+vecElems-1)/vecElems, 256), o.ptr, o.dt(), t.ptr, t.dt(), id.ptr, int32(h), int32(v))
	})
}

// EmbeddingBackward adds dOut[i] into dTable[ids[i]] for every i, in order
// of i (kernel embedding_backward). The host sorts the positions by id,
// stably, into segments of equal ids; each block then owns one id's row
// (a range of its columns, vecElems a thread) and adds its positions'
// rows in order, so no two threads write one element and the result is
// the CPU backend's, bit for bit.
func (b *Backend) EmbeddingBackward(dTable, dOut, ids *engine.Tensor) {
	b.do(func() {
		t, o, id := b.floatView("EmbeddingBackward", "dTable", dTable), b.floatView("EmbeddingBackward", "dOut", dOut),
			b.intView("EmbeddingBackward", "ids", ids)
		n, h, v := embeddingDims("EmbeddingBackward", dOut, dTable, ids)
		host := b.hostInts(id)
		checkIDs("EmbeddingBackward", host, v)
		if n == 0 || h == 0 {
			return
		}
		order, seg := segmentsByID(host)
		index := append(order, seg...)
		buf := b.scratchBuffer(scratchIndex, uint64(len(index))*4)
		b.copyToDevice(buf, pointerTo(index), uint64(len(index))*4)
		segments := len(seg) - 1
		cols := (h + 256*vecElems - 1) / (256 * vecElems)
		if cols > maxGridYZ {
			panic(fmt.Sprintf("cuda: EmbeddingBackward: %d columns are too many", h)) // a limit of the grid, not misuse
		}
		b.launch(kEmbeddingBackward, dim3{uint32(segments), uint32(cols), 1}, block1(256),
			t.ptr, t.dt(), o.ptr, o.dt(), id.ptr, buf, buf+devptr(4*n), int32(h))
	})
}

// embeddingDims returns N, H and V and checks that the shapes agree.
func embeddingDims(op string, out, table, ids *engine.Tensor) (n, h, v int) {
	if len(table.Shape) == 0 || table.Dim(-1) <= 0 {
		misuse(op, engine.MisuseShape, "table %v has no columns", table)
	}
	h = table.Dim(-1)
	v = table.Len() / h
	n = ids.Len()
	if out.Len() != n*h {
		misuse(op, engine.MisuseShape, "%v for %d ids of width %d", out, n, h)
	}
	return n, h, v
}

func checkIDs(op string, ids []int32, v int) {
	for i, id := range ids {
		if id < 0 || int(id) >= v {
			misuse(op, engine.MisuseRange, "ids[%d] = %d is outside the table's %d rows", i, id, v)
		}
	}
}

// segmentsByID sorts the positions of ids by id, stably, and returns them
// with the start of each run of equal ids (and the end of the last):
// positions order[seg[s]:seg[s+1]] all hold one id, in increasing order.
func segmentsByID(ids []int32) (order, seg []int32) {
	order = make([]int32, len(ids))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return int(ids[a]) - int(ids[b]) })
	for i := range order {
		if i == 0 || ids[order[i]] != ids[order[i-1]] {
			seg = append(seg, int32(i))
		}
	}
	return order, append(seg, int32(len(order)))
}

// embeddingTraffic is Embedding of n rows of h (kernel embedding): the
// ids read, n table rows read (once each, repeats included: an upper
// bound), out written; no arithmetic.
func embeddingTraffic(n, h int, out, table engine.DType) traffic {
	return traffic{bytes: moved(n, engine.I32) + moved(n*h, out, table)}
}

// embeddingBackwardTraffic is EmbeddingBackward of n rows of h into
// segments distinct rows of the table (kernel embedding_backward): the
// sorted positions and segment bounds uploaded and read (n + segments + 1
// int32, each twice), each segment's id read, dOut read, and each touched
// table row read and written; an addition an element of dOut.
func embeddingBackwardTraffic(n, h, segments int, dTable, dOut engine.DType) traffic {
	index := moved(n+segments+1, engine.I32)
	return traffic{
		bytes: 2*index + moved(segments, engine.I32) + moved(n*h, dOut) + moved(segments*h, dTable, dTable),
		flops: float64(n) * float64(h),
	}
}
