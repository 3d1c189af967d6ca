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

// compactGrain is how many elements of a compact AdamW state (a split
// master, BF16 moments) one worker widens, updates and narrows again
// through float32 scratch of its own.
const compactGrain = 1 << 12

// compact reports whether t's state is held in fewer bits than AdamW's
// float32 (a split master, BF16 or I8 moments): adamWCompact updates it.
func compact(t engine.AdamWTensors) bool { return t.Low != nil || t.Round != nil }

// checkCompact checks t, tensor i of an AdamWStep whose state is compact.
func checkCompact(i int, t engine.AdamWTensors) {
	n := len(floats("AdamWStep", t.Grad))
	if t.Low != nil {
		check(t.Param == nil && t.Copy != nil, "AdamWStep", engine.MisuseTensor, "tensor %d: a split master (Low) has a Copy and no Param", i)
		check(len(bf16s("AdamWStep", t.Copy)) == n && len(bf16s("AdamWStep", t.Low)) == n,
			"AdamWStep", engine.MisuseShape, "tensor %d: copy %v and low %v of grad %v differ in size", i, t.Copy, t.Low, t.Grad)
	} else {
		check(len(floats("AdamWStep", t.Param)) == n, "AdamWStep", engine.MisuseShape, "tensor %d: param %v and grad %v differ in size", i, t.Param, t.Grad)
		if t.Copy != nil {
			check(storageOf("AdamWStep", t.Copy).dtype == engine.BF16 && t.Copy.Len() == n, "AdamWStep", engine.MisuseShape,
				"tensor %d: copy %v of param %v, want BF16 of its size", i, t.Copy, t.Param)
		}
	}
	if t.Int8 != nil {
		check(t.Round != nil, "AdamWStep", engine.MisuseTensor, "tensor %d: 8-bit moments without a Round key", i)
		for k, m := range []*engine.Tensor{t.M, t.V} {
			checkInt8("AdamWStep", m, t.Int8, k, n)
		}
		return
	}
	want := engine.F32
	if t.Round != nil {
		want = engine.BF16
	}
	for _, m := range []*engine.Tensor{t.M, t.V} {
		check(storageOf("AdamWStep", m).dtype == want, "AdamWStep", engine.MisuseDType, "tensor %d: moment %v, want %v (BF16 moments with a Round key)", i, m, want)
		check(m.Len() == n, "AdamWStep", engine.MisuseShape, "tensor %d: moment %v of grad %v differs in size", i, m, t.Grad)
	}
}

// adamWCompact is AdamW on compact state: each worker widens a block of
// the master (joining a split one) and of the moments into float32
// scratch, runs AdamW's kernel on it, so that the update is AdamW's bit
// for bit, and narrows them back (splitting the master, rounding BF16
// moments stochastically under t.Round's key), refreshing the copy of an
// unsplit master.
func (b *Backend) adamWCompact(t engine.AdamWTensors, h engine.AdamWParams) {
	if t.Int8 != nil {
		b.adamWInt8(t, h)
		return
	}
	g := floats("AdamWStep", t.Grad)
	c := adamWCoefficients(h)
	b.parallelFor(len(g), compactGrain, func(a, e int) {
		for ; a < e; a += compactGrain {
			n := min(compactGrain, e-a)
			p, m, v := b.scratch.get(n), b.scratch.get(n), b.scratch.get(n)
			b.loadMaster(p, t, a, a+n)
			if t.Round != nil {
				vec.WidenBF16(m, bf16s("AdamWStep", t.M)[a:a+n])
				vec.WidenBF16(v, bf16s("AdamWStep", t.V)[a:a+n])
			} else {
				copy(m, floats("AdamWStep", t.M)[a:a+n])
				copy(v, floats("AdamWStep", t.V)[a:a+n])
			}
			vec.AdamW(p, g[a:a+n], m, v, &c)
			b.storeMaster(t, a, a+n, p)
			if t.Round != nil {
				roundMoments(bf16s("AdamWStep", t.M)[a:a+n], bf16s("AdamWStep", t.V)[a:a+n], m, v, t.Round, h.Step, a)
			} else {
				copy(floats("AdamWStep", t.M)[a:a+n], m)
				copy(floats("AdamWStep", t.V)[a:a+n], v)
			}
			b.scratch.put(p)
			b.scratch.put(m)
			b.scratch.put(v)
		}
	})
}

// loadMaster writes the float32 master's elements lo…hi−1 into p:
// joined from a split master's halves, else copied.
func (b *Backend) loadMaster(p []float32, t engine.AdamWTensors, lo, hi int) {
	if t.Low != nil {
		joinF32s(p, bf16s("AdamWStep", t.Copy)[lo:hi], bf16s("AdamWStep", t.Low)[lo:hi])
		return
	}
	copy(p, floats("AdamWStep", t.Param)[lo:hi])
}

// storeMaster writes the updated master p back as loadMaster read it,
// refreshing an unsplit master's copy.
func (b *Backend) storeMaster(t engine.AdamWTensors, lo, hi int, p []float32) {
	if t.Low != nil {
		splitF32s(bf16s("AdamWStep", t.Copy)[lo:hi], bf16s("AdamWStep", t.Low)[lo:hi], p)
		return
	}
	copy(floats("AdamWStep", t.Param)[lo:hi], p)
	if t.Copy != nil {
		vec.RoundBF16(bf16s("AdamWStep", t.Copy)[lo:hi], p)
	}
}

// roundMoments rounds the float32 moments m and v, elements off… of the
// step's part of a parameter, stochastically into the BF16 dm and dv.
func roundMoments(dm, dv []uint16, m, v []float32, r *engine.MomentRound, step, off int) {
	for i := range m {
		g := r.Index.Global(off + i)
		dm[i] = engine.RoundStochastic(m[i], engine.RoundBits(r.Seed, step, r.Tensor, 0, g))
		dv[i] = engine.RoundStochastic(v[i], engine.RoundBits(r.Seed, step, r.Tensor, 1, g))
	}
}
