package cuda

import (
	"math"

	"github.com/memtrain/memtrain/engine"
)

// AdamW updates param in place from grad and the moments m and v (kernel
// adamw), exactly as the CPU backend does (see engine/cpu.AdamW): the
// scalar coefficients are computed here in float64 and rounded to
// float32, and the kernel rounds each elementwise operation to float32 in
// PyTorch's order. The tensors are F32, as engine.Backend asks (the
// kernel would take BF16 ones, but the optimizer's state stays float32
// and the CPU backend refuses them too).
func (b *Backend) AdamW(param, grad, m, v *engine.Tensor, h engine.AdamWParams) {
	b.do(func() {
		p, g := b.f32View("AdamW", "param", param), b.f32View("AdamW", "grad", grad)
		ms, vs := b.f32View("AdamW", "m", m), b.f32View("AdamW", "v", v)
		n := p.n
		if g.n != n || ms.n != n || vs.n != n {
			misuse("AdamW", engine.MisuseShape, "param %v, grad %v, m %v and v %v differ in size", param, grad, m, v)
		}
		if h.Step < 1 {
			misuse("AdamW", engine.MisuseRange, "Step = %d, want ≥ 1 (it counts from 1)", h.Step)
		}
		lr, wd := float64(h.LR), float64(h.WeightDecay)
		beta1, beta2 := float64(h.Beta1), float64(h.Beta2)
		step := float64(h.Step)
		b.launch(kAdamW, vecGrid(n), block1(elementThreads),
			p.ptr, p.dt(), g.ptr, g.dt(), ms.ptr, ms.dt(), vs.ptr, vs.dt(), int64(n),
			float32(1-lr*wd), float32(beta1), float32(1-beta1), float32(beta2), float32(1-beta2),
			float32(-(lr / (1 - math.Pow(beta1, step)))), float32(math.Sqrt(1-math.Pow(beta2, step))), h.Eps)
	})
}

// AdamWStep updates every tensor of ts in one launch of adamw_multi, which
// reads the squared gradient norm and the loss from ctl on the device, so
// that a training step queues its update without waiting for the host
// (see engine.Backend), and writes each parameter's Copy (a bf16 weight
// copy) in the same pass over its elements. The table of the tensors'
// addresses is uploaded only when it changes — the same parameters step
// after step — and kept in a scratch buffer of its own (deviceTable).
//
// Compact state (engine.MasterSplitter) goes through the same launch: a
// split master is joined, updated and split again, BF16 moments are
// widened and rounded back stochastically, I8 moments decoded and
// encoded again a piece at a time, each as the CPU backend does it, bit
// for bit (split.go). The kernel finds an I8 moment's pieces from
// Round.Index as engine.Int8Pieces does, so Int8.Starts must be
// Int8Pieces(Round.Index, n), as finetune makes them; the host checks
// their count.
func (b *Backend) AdamWStep(ts []engine.AdamWTensors, h engine.AdamWParams, maxNorm float32, ctl *engine.Tensor) {
	b.do(func() {
		c := b.f32View("AdamWStep", "ctl", ctl)
		if c.n != 2 {
			misuse("AdamWStep", engine.MisuseShape, "control %v, want 2 elements (squared norm, loss)", ctl)
		}
		if h.Step < 1 {
			misuse("AdamWStep", engine.MisuseRange, "Step = %d, want ≥ 1 (it counts from 1)", h.Step)
		}
		table := b.adamTable.reset()
		chunks := int64(0)
		for i, t := range ts {
			row, units := b.adamWRow(i, t)
			if units == 0 {
				continue
			}
			row[7] = chunks
			table = append(table, row[:]...)
			chunks += units
		}
		if chunks == 0 {
			b.adamTable.host = table
			return
		}
		dev := b.uploadTable(&b.adamTable, scratchAdamW, table)
		lr, beta1, beta2 := float64(h.LR), float64(h.Beta1), float64(h.Beta2)
		step := float64(h.Step)
		b.launch(kAdamWMulti, grid1(int(min(chunks, maxGridX))), block1(adamWThreads),
			dev, int32(len(table)/adamWFields), chunks, c.ptr, maxNorm, h.LR,
			float32(beta1), float32(1-beta1), float32(beta2), float32(1-beta2),
			float32(-(lr / (1 - math.Pow(beta1, step)))), float32(math.Sqrt(1-math.Pow(beta2, step))), h.Eps,
			int32(h.Step))
	})
}

// adamWRow checks t, tensor i of an AdamWStep, and returns its row of
// adamw_multi's table (ADAMW_FIELDS in adamw.cu; the first chunk, field
// 7, left to the caller) and its count of chunks: ADAMW_CHUNK elements,
// or for I8 moments ADAMW_CHUNK / Int8Block pieces. Every tensor is
// checked before anything is launched.
func (b *Backend) adamWRow(i int, t engine.AdamWTensors) (row [adamWFields]int64, chunks int64) {
	g := b.f32View("AdamWStep", "grad", t.Grad)
	n := g.n
	var p view // the float32 master; none when split
	if t.Low != nil {
		if t.Param != nil || t.Copy == nil {
			misuse("AdamWStep", engine.MisuseTensor, "tensor %d: a split master (Low) has a Copy and no Param", i)
		}
		cp, lo := b.bf16View("AdamWStep", "copy", t.Copy), b.bf16View("AdamWStep", "low", t.Low)
		if cp.n != n || lo.n != n {
			misuse("AdamWStep", engine.MisuseShape, "tensor %d: copy %v and low %v of grad %v differ in size", i, t.Copy, t.Low, t.Grad)
		}
		row[8], row[9] = int64(cp.ptr), int64(lo.ptr)
		row[5] = int64(engine.BF16) << 32
	} else {
		p = b.f32View("AdamWStep", "param", t.Param)
		if p.n != n {
			misuse("AdamWStep", engine.MisuseShape, "tensor %d: param %v and grad %v differ in size", i, t.Param, t.Grad)
		}
		if t.Copy != nil {
			cs := b.floatView("AdamWStep", "copy", t.Copy)
			if cs.n != n {
				misuse("AdamWStep", engine.MisuseShape, "tensor %d: copy %v of param %v differs in size", i, t.Copy, t.Param)
			}
			if (t.Round != nil) && cs.dtype != engine.BF16 {
				misuse("AdamWStep", engine.MisuseDType, "tensor %d: copy %v of param %v, want BF16 beside compact moments", i, t.Copy, t.Param)
			}
			row[8], row[5] = int64(cs.ptr), int64(cs.dt())<<32
		}
		row[0] = int64(p.ptr)
	}
	mt, vt := b.momentViews(i, t, n)
	row[1], row[2], row[3], row[4] = int64(g.ptr), int64(mt.ptr), int64(vt.ptr), int64(n)
	row[5] |= int64(p.dt()) | int64(g.dt())<<8 | int64(mt.dt())<<16 | int64(vt.dt())<<24
	row[6] = int64(math.Float32bits(t.WeightDecay))
	if r := t.Round; r != nil {
		x := r.Index
		if x.Col1 <= x.Col0 || x.Cols < x.Col1 {
			misuse("AdamWStep", engine.MisuseRange, "tensor %d: rounding key's shard columns %d…%d of %d", i, x.Col0, x.Col1, x.Cols)
		}
		row[12], row[13] = int64(r.Seed), int64(r.Tensor)
		row[14], row[15], row[16], row[17], row[18] = int64(x.Flat0), int64(x.Row0), int64(x.Cols), int64(x.Col0), int64(x.Col1)
	}
	if n == 0 {
		return row, 0
	}
	if q := t.Int8; q != nil {
		pieces := len(q.Starts) - 1
		if want := engine.Int8PieceCount(t.Round.Index, n); int64(pieces) != want {
			misuse("AdamWStep", engine.MisuseShape, "tensor %d: %d pieces, but Round.Index places %d elements in %d (engine.Int8Pieces)", i, pieces, n, want)
		}
		ms, vs := b.scaleViews("AdamWStep", q, pieces)
		row[10], row[11], row[19] = int64(ms.ptr), int64(vs.ptr), int64(pieces)
		per := int64(adamWChunk / engine.Int8Block)
		return row, (int64(pieces) + per - 1) / per
	}
	return row, int64((n + adamWChunk - 1) / adamWChunk)
}

// momentViews checks tensor i's moments against a part of n elements:
// F32, BF16 with a Round key, or I8 with Round and Int8.
func (b *Backend) momentViews(i int, t engine.AdamWTensors, n int) (m, v view) {
	if t.Int8 != nil {
		if t.Round == nil {
			misuse("AdamWStep", engine.MisuseTensor, "tensor %d: 8-bit moments without a Round key", i)
		}
		m, v = b.codesView("AdamWStep", "m", t.M), b.codesView("AdamWStep", "v", t.V)
		if m.n != n || v.n != n || len(t.Int8.Starts) < 1 || t.Int8.Starts[len(t.Int8.Starts)-1] != n {
			misuse("AdamWStep", engine.MisuseShape, "tensor %d: moments %v and %v, pieces ending at %v, of grad %v", i, t.M, t.V, t.Int8.Starts, t.Grad)
		}
		return m, v
	}
	want := engine.F32
	if t.Round != nil {
		want = engine.BF16
	}
	for _, x := range []struct {
		name string
		t    *engine.Tensor
		v    *view
	}{{"m", t.M, &m}, {"v", t.V, &v}} {
		*x.v = b.viewOf("AdamWStep", x.t)
		if x.v.dtype != want {
			misuse("AdamWStep", engine.MisuseDType, "tensor %d: moment %s is %v, want %v (BF16 moments with a Round key)", i, x.name, x.t, want)
		}
		if x.v.n != n {
			misuse("AdamWStep", engine.MisuseShape, "tensor %d: moment %s %v of grad %v differs in size", i, x.name, x.t, t.Grad)
		}
	}
	return m, v
}

// adamWTraffic is AdamW, or one tensor's share of AdamWStep, of n
// elements (kernels adamw, adamw_multi): param, m and v read and written,
// grad read (and written when clipped), the copy written when there is
// one (hasCopy, of dtype cp); the update's 12 operations an element, one
// more for the clipping's product.
func adamWTraffic(n int, param, grad, m, v engine.DType, clipped, hasCopy bool, cp engine.DType) traffic {
	t := traffic{bytes: moved(n, param, param, grad, m, m, v, v), flops: 12 * float64(n)}
	if clipped {
		t.bytes += moved(n, grad)
		t.flops += float64(n)
	}
	if hasCopy {
		t.bytes += moved(n, cp)
	}
	return t
}

// compactAdamWTraffic is one tensor's share of AdamWStep on compact state
// of n elements (kernel adamw_multi): grad read (and written when
// clipped); a split master's copy and low halves read and written, or a
// float32 master read and written with its bf16 copy written; moments of
// dtype moments read and written, and for I8 ones the float32 scales of
// m and v of pieces pieces; the update's flops as adamWTraffic's (the
// rounding's integer hashing is not counted).
func compactAdamWTraffic(n, pieces int, split bool, moments engine.DType, clipped bool) traffic {
	t := traffic{bytes: moved(n, engine.F32, moments, moments, moments, moments), flops: 12 * float64(n)}
	if split {
		t.bytes += moved(n, engine.BF16, engine.BF16, engine.BF16, engine.BF16)
	} else {
		t.bytes += moved(n, engine.F32, engine.F32, engine.BF16)
	}
	if moments == engine.I8 {
		t.bytes += moved(pieces, engine.F32, engine.F32, engine.F32, engine.F32)
	}
	if clipped {
		t.bytes += moved(n, engine.F32)
		t.flops += float64(n)
	}
	return t
}
