package llama

import (
	"fmt"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// units are the groups of weights that a pass multiplies with together,
// in the order it uses them: the embedding, each decoder layer's seven
// linears, the LM head. With Z-sharding a unit is all-gathered as a
// whole before use; with OAG the next unit's gather runs while the
// current one computes.
type units struct {
	embed, head []*engine.Param
	layers      [][]*engine.Param
}

func newUnits(m *Model) units {
	u := units{embed: []*engine.Param{m.Embed}, head: []*engine.Param{m.Head}}
	for _, l := range m.Layers {
		u.layers = append(u.layers, []*engine.Param{l.Q, l.K, l.V, l.O, l.Gate, l.Up, l.Down})
	}
	return u
}

// forward is a forward pass's sequence: the embedding, the layers, the
// head; a training pass goes on through the layers in reverse (the head's
// backward reuses its forward's blocks, and the embedding's backward
// needs none).
func (u units) forward(train bool) [][]*engine.Param {
	seq := append([][]*engine.Param{u.embed}, u.layers...)
	seq = append(seq, u.head)
	if train {
		for l := len(u.layers) - 1; l >= 0; l-- {
			seq = append(seq, u.layers[l])
		}
	}
	return seq
}

// blockWeights are the weight blocks a decoder block multiplies with:
// this rank's (x, y) blocks [rows, cols], Z-gathered when Z-sharded.
type blockWeights struct{ q, k, v, o, gate, up, down *engine.Tensor }

func blockOf(ts []*engine.Tensor) blockWeights {
	return blockWeights{q: ts[0], k: ts[1], v: ts[2], o: ts[3], gate: ts[4], up: ts[5], down: ts[6]}
}

// beginPass starts a pass that uses the units of seq in that order.
func (m *Model) beginPass(seq [][]*engine.Param) {
	if m.zw != nil {
		m.zw.begin(seq)
	}
}

// nextWeights returns the weight blocks of unit, the pass's next one, in
// its order: the local values (their BF16 copies in mixed precision,
// Options.Activations), or their Z-gathered copies.
func (m *Model) nextWeights(unit []*engine.Param) []*engine.Tensor {
	if m.zw != nil {
		return m.zw.next(unit)
	}
	ts := make([]*engine.Tensor, len(unit))
	for i, p := range unit {
		ts[i] = passWeight(p)
	}
	return ts
}

// zWeights all-gathers the Z-sharded weight blocks of a pass, unit by
// unit, as the passes multiply by them (bf16 copies in mixed precision:
// half the bytes of the float32 masters), into one buffer of the largest
// unit, or two with OAG: then unit i+1 is gathered into the other buffer
// while unit i computes, so a unit's blocks stay valid until the next
// unit is asked for.
type zWeights struct {
	z        comm.Comm
	prefetch bool
	bufs     []*engine.Tensor
	seq      [][]*engine.Param
	i        int
	views    [2][]*engine.Tensor
	reqs     [2][]comm.Request
}

func blockSize(p *engine.Param) (rows, cols int) {
	return p.Shard.Row1 - p.Shard.Row0, p.Shard.Col1 - p.Shard.Col0
}

func newZWeights(m *Model, z comm.Comm, prefetch bool) *zWeights {
	largest := 0
	for _, u := range m.units.forward(false) {
		n := 0
		for _, p := range u {
			r, c := blockSize(p)
			n += r * c
		}
		largest = max(largest, n)
	}
	// The blocks are gathered as the passes multiply by them (passWeight):
	// the bf16 copies in mixed precision, a frozen base in its BaseDType,
	// else the float32 values. Every matrix of a model has the same.
	dtype := passWeight(m.Embed).DType()
	zw := &zWeights{z: z, prefetch: prefetch}
	zw.bufs = append(zw.bufs, m.backend.Alloc(dtype, largest))
	if prefetch {
		zw.bufs = append(zw.bufs, m.backend.Alloc(dtype, largest))
	}
	return zw
}

func (zw *zWeights) begin(seq [][]*engine.Param) {
	zw.seq, zw.i = seq, 0
	if zw.prefetch && len(seq) > 0 {
		zw.gather(0, true)
	}
}

func (zw *zWeights) next(unit []*engine.Param) []*engine.Tensor {
	i := zw.i
	if i >= len(zw.seq) || len(zw.seq[i]) != len(unit) || zw.seq[i][0] != unit[0] {
		panic(fmt.Sprintf("llama: pass asked for %s as its unit %d, out of its sequence", unit[0].Name, i))
	}
	zw.i++
	k := i % len(zw.bufs)
	if !zw.prefetch {
		zw.gather(i, false)
	}
	for _, r := range zw.reqs[k] {
		check(r.Wait())
	}
	zw.reqs[k] = zw.reqs[k][:0]
	if zw.prefetch && i+1 < len(zw.seq) {
		zw.gather(i+1, true)
	}
	return zw.views[k]
}

// gather all-gathers unit i of the sequence into its buffer, in the
// background when async.
func (zw *zWeights) gather(i int, async bool) {
	k := i % len(zw.bufs)
	zw.views[k] = zw.views[k][:0]
	off := 0
	for _, p := range zw.seq[i] {
		r, c := blockSize(p)
		v := zw.bufs[k].View(off, r, c)
		off += r * c
		zw.views[k] = append(zw.views[k], v)
		if async {
			zw.reqs[k] = append(zw.reqs[k], zw.z.IAllGather(v, passWeight(p)))
		} else {
			check(zw.z.AllGather(v, passWeight(p)))
		}
	}
}

func (zw *zWeights) free(b engine.Backend) {
	if zw == nil {
		return
	}
	for _, t := range zw.bufs {
		b.Free(t)
	}
}

// zGrads reduce-scatters weight-gradient blocks over Z: a block's
// gradient is computed whole into a buffer of the largest block, summed
// over Z, and each rank adds its chunk to its shard's gradient. With ORS
// the reduce-scatter runs in the background until the buffer is needed
// again or the pass ends. A tied embedding has a buffer of its own, which
// holds the LM head's gradient until the embedding's backward adds its
// part at the end of the pass.
type zGrads struct {
	z       comm.Comm
	async   bool
	buf     *engine.Tensor
	tied    *engine.Tensor // [V/Y, H/X] when tied; nil otherwise
	pending []pendingScatter
}

type pendingScatter struct {
	req   comm.Request
	p     *engine.Param
	chunk *engine.Tensor
	buf   *engine.Tensor
}

func newZGrads(m *Model, z comm.Comm, async bool) *zGrads {
	largest := 0
	for _, p := range m.Params() {
		if p.Split.ChunksZ() {
			r, c := blockSize(p)
			largest = max(largest, r*c)
		}
	}
	zg := &zGrads{z: z, async: async, buf: m.backend.Alloc(engine.F32, largest)}
	if m.Head == m.Embed {
		r, c := blockSize(m.Embed)
		zg.tied = m.backend.Alloc(engine.F32, r, c)
	}
	return zg
}

// block returns the shared buffer as a [rows, cols] block, once the
// reduce-scatters still reading it are done.
func (zg *zGrads) block(m *Model, rows, cols int) *engine.Tensor {
	zg.finish(m, zg.buf)
	return zg.buf.View(0, rows, cols)
}

func (zg *zGrads) tiedBlock() *engine.Tensor { return zg.tied }

// embedBlock returns the block the embedding's backward adds into: the
// tied buffer, holding the head's gradient, or the shared one, zeroed.
func (zg *zGrads) embedBlock(m *Model) *engine.Tensor {
	if zg.tied != nil {
		return zg.tied
	}
	r, c := blockSize(m.Embed)
	b := zg.block(m, r, c)
	m.backend.Fill(b, 0)
	return b
}

// scatter reduce-scatters p's gradient block over Z, in place, and adds
// this rank's chunk to p's gradient (later, with ORS).
func (zg *zGrads) scatter(m *Model, p *engine.Param, block *engine.Tensor) {
	chunk := block.View(p.Shard.Flat0, p.Shard.Elements())
	if !zg.async {
		check(zg.z.ReduceScatter(chunk, block))
		m.backend.Add(p.Grad, p.Grad, chunk)
		m.baseGradFinal(p) // its last write in the pass
		return
	}
	buf := zg.buf
	if zg.tied != nil && block.Storage == zg.tied.Storage {
		buf = zg.tied
	}
	zg.pending = append(zg.pending, pendingScatter{zg.z.IReduceScatter(chunk, block), p, chunk, buf})
}

// finish completes the pending reduce-scatters from buf (every one when
// buf is nil) and adds their chunks.
func (zg *zGrads) finish(m *Model, buf *engine.Tensor) {
	kept := zg.pending[:0]
	for _, s := range zg.pending {
		if buf != nil && s.buf != buf {
			kept = append(kept, s)
			continue
		}
		check(s.req.Wait())
		m.backend.Add(s.p.Grad, s.p.Grad, s.chunk)
		m.baseGradFinal(s.p) // its last write in the pass
	}
	zg.pending = kept
}

func (zg *zGrads) free(b engine.Backend) {
	if zg == nil {
		return
	}
	b.Free(zg.buf)
	if zg.tied != nil {
		b.Free(zg.tied)
	}
}
