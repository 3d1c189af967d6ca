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
// copy) in the same pass over its elements. The table of the tensors' addresses is uploaded
// only when it changes — the same parameters step after step — and kept
// in a scratch buffer of its own (deviceTable).
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
			if t.Low != nil || t.Round != nil {
				misuse("AdamWStep", engine.MisuseTensor, "tensor %d: a split master (Low) or BF16 moments (Round): the CUDA backend holds AdamW's state in float32 only", i)
			}
			p, g := b.f32View("AdamWStep", "param", t.Param), b.f32View("AdamWStep", "grad", t.Grad)
			ms, vs := b.f32View("AdamWStep", "m", t.M), b.f32View("AdamWStep", "v", t.V)
			n := p.n
			if g.n != n || ms.n != n || vs.n != n {
				misuse("AdamWStep", engine.MisuseShape, "tensor %d: param %v, grad %v, m %v and v %v differ in size", i, t.Param, t.Grad, t.M, t.V)
			}
			if n == 0 {
				continue
			}
			dts := int64(p.dt()) | int64(g.dt())<<8 | int64(ms.dt())<<16 | int64(vs.dt())<<24
			var cp devptr
			if t.Copy != nil {
				cs := b.floatView("AdamWStep", "copy", t.Copy)
				if cs.n != n {
					misuse("AdamWStep", engine.MisuseShape, "tensor %d: copy %v of param %v differs in size", i, t.Copy, t.Param)
				}
				cp, dts = cs.ptr, dts|int64(cs.dt())<<32
			}
			table = append(table, int64(p.ptr), int64(g.ptr), int64(ms.ptr), int64(vs.ptr), int64(n), dts,
				int64(math.Float32bits(t.WeightDecay)), chunks, int64(cp))
			chunks += int64((n + adamWChunk - 1) / adamWChunk)
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
			float32(-(lr / (1 - math.Pow(beta1, step)))), float32(math.Sqrt(1-math.Pow(beta2, step))), h.Eps)
	})
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
