package cpu

import (
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu/vec"
)

var _ engine.MasterSplitter = (*Backend)(nil)

// SplitMaster writes engine.SplitF32 of master's elements into hi and lo.
func (b *Backend) SplitMaster(hi, lo, master *engine.Tensor) {
	x, h, l := floats("SplitMaster", master), bf16s("SplitMaster", hi), bf16s("SplitMaster", lo)
	check(len(h) == len(x) && len(l) == len(x), "SplitMaster", engine.MisuseShape, "master %v into %v and %v", master, hi, lo)
	b.parallelFor(len(x), elementGrain, func(a, e int) { splitF32s(h[a:e], l[a:e], x[a:e]) })
}

// JoinMaster writes engine.JoinF32 of hi and lo into master.
func (b *Backend) JoinMaster(master, hi, lo *engine.Tensor) {
	x, h, l := floats("JoinMaster", master), bf16s("JoinMaster", hi), bf16s("JoinMaster", lo)
	check(len(h) == len(x) && len(l) == len(x), "JoinMaster", engine.MisuseShape, "%v and %v into master %v", hi, lo, master)
	b.parallelFor(len(x), elementGrain, func(a, e int) { joinF32s(x[a:e], h[a:e], l[a:e]) })
}

func splitF32s(hi, lo []uint16, x []float32) {
	for i, v := range x {
		hi[i], lo[i] = engine.SplitF32(v)
	}
}

func joinF32s(x []float32, hi, lo []uint16) {
	for i := range x {
		x[i] = engine.JoinF32(hi[i], lo[i])
	}
}

// splitGrain is how many elements of a split master one worker joins,
// updates and splits again through its own float32 scratch.
const splitGrain = 1 << 12

// adamWSplit is AdamW on a split master (t.Low): each worker joins a
// block of the master into a scratch, runs AdamW's kernel on it (so the
// update is AdamW's bit for bit) and splits it back.
func (b *Backend) adamWSplit(t engine.AdamWTensors, h engine.AdamWParams) {
	hi, lo := bf16s("AdamWStep", t.Copy), bf16s("AdamWStep", t.Low)
	g, ms, vs := floats("AdamWStep", t.Grad), floats("AdamWStep", t.M), floats("AdamWStep", t.V)
	c := adamWCoefficients(h)
	b.parallelFor(len(hi), splitGrain, func(a, e int) {
		for ; a < e; a += splitGrain {
			n := min(splitGrain, e-a)
			p := b.scratch.get(n)
			joinF32s(p, hi[a:a+n], lo[a:a+n])
			vec.AdamW(p, g[a:a+n], ms[a:a+n], vs[a:a+n], &c)
			splitF32s(hi[a:a+n], lo[a:a+n], p)
			b.scratch.put(p)
		}
	})
}
