package cpu

import (
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu/vec"
)

// scaleOf is q's scales of moment k.
func scaleOf(q *engine.Int8Moments, k int) *engine.Tensor {
	if k == 0 {
		return q.MScale
	}
	return q.VScale
}

// checkInt8 checks an I8 moment's codes and scales against a part of n
// elements.
func checkInt8(op string, codesT *engine.Tensor, q *engine.Int8Moments, k, n int) {
	check(q != nil, op, engine.MisuseTensor, "I8 moment %v without its Int8Moments", codesT)
	check(len(codes(op, codesT)) == n, op, engine.MisuseShape, "codes %v of %d elements", codesT, n)
	check(len(q.Starts) >= 1 && q.Starts[len(q.Starts)-1] == n, op, engine.MisuseShape, "pieces %v do not end at %d elements", q.Starts, n)
	check(len(floats(op, scaleOf(q, k))) == len(q.Starts)-1, op, engine.MisuseShape, "%d scales for %d pieces", scaleOf(q, k).Len(), len(q.Starts)-1)
}

// DecodeMoment writes moment k's values of codes into dst.
func (b *Backend) DecodeMoment(dst, codesT *engine.Tensor, q *engine.Int8Moments, k int) {
	x := floats("DecodeMoment", dst)
	checkInt8("DecodeMoment", codesT, q, k, len(x))
	decodePieces(x, codes("DecodeMoment", codesT), floats("DecodeMoment", scaleOf(q, k)), q.Starts, k, 0, len(q.Starts)-1)
}

// EncodeMoment writes the codes and scales of src's values of moment k,
// rounded to nearest.
func (b *Backend) EncodeMoment(codesT *engine.Tensor, q *engine.Int8Moments, k int, src *engine.Tensor) {
	x := floats("EncodeMoment", src)
	checkInt8("EncodeMoment", codesT, q, k, len(x))
	encodePieces(codes("EncodeMoment", codesT), floats("EncodeMoment", scaleOf(q, k)), x, q.Starts, k, 0, len(q.Starts)-1, nil)
}

// decodePieces decodes pieces a…e−1 into x, whose element 0 is the
// part's element starts[a] (a worker's scratch).
func decodePieces(x []float32, c []uint8, scales []float32, starts []int, k, a, e int) {
	base := starts[a]
	for p := a; p < e; p++ {
		for i := starts[p]; i < starts[p+1]; i++ {
			x[i-base] = engine.DecodeInt8(k, c[i], scales[p])
		}
	}
}

// encodePieces encodes x (indexed as decodePieces indexes it) into the
// codes and scales of pieces a…e−1, with bits(i) the random bits of the
// part's element i, or to nearest when bits is nil.
func encodePieces(c []uint8, scales []float32, x []float32, starts []int, k, a, e int, bits func(i int) uint16) {
	base := starts[a]
	for p := a; p < e; p++ {
		lo, hi := starts[p], starts[p+1]
		s := engine.Int8Scale(k, x[lo-base:hi-base])
		scales[p] = s
		for i := lo; i < hi; i++ {
			r := uint16(0x8000)
			if bits != nil {
				r = bits(i)
			}
			c[i] = engine.EncodeInt8(k, x[i-base], s, r)
		}
	}
}

// adamWInt8 is adamWCompact for 8-bit moments: each worker takes whole
// pieces, decodes them into float32 scratch with the master, runs
// AdamW's kernel and encodes them again, stochastically.
func (b *Backend) adamWInt8(t engine.AdamWTensors, h engine.AdamWParams) {
	q := t.Int8
	g := floats("AdamWStep", t.Grad)
	mc, vc := codes("AdamWStep", t.M), codes("AdamWStep", t.V)
	ms, vs := floats("AdamWStep", q.MScale), floats("AdamWStep", q.VScale)
	starts := q.Starts
	c := adamWCoefficients(h)
	b.parallelFor(len(starts)-1, compactGrain/engine.Int8Block, func(a, e int) {
		lo, hi := starts[a], starts[e]
		n := hi - lo
		p, m, v := b.scratch.get(n), b.scratch.get(n), b.scratch.get(n)
		b.loadMaster(p, t, lo, hi)
		decodePieces(m, mc, ms, starts, 0, a, e)
		decodePieces(v, vc, vs, starts, 1, a, e)
		vec.AdamW(p, g[lo:hi], m, v, &c)
		b.storeMaster(t, lo, hi, p)
		r := t.Round
		encodePieces(mc, ms, m, starts, 0, a, e, func(i int) uint16 { return engine.RoundBits(r.Seed, h.Step, r.Tensor, 0, r.Index.Global(i)) })
		encodePieces(vc, vs, v, starts, 1, a, e, func(i int) uint16 { return engine.RoundBits(r.Seed, h.Step, r.Tensor, 1, r.Index.Global(i)) })
		b.scratch.put(p)
		b.scratch.put(m)
		b.scratch.put(v)
	})
}
