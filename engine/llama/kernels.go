package llama

import (
	"errors"
	"fmt"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
)

// Kernels lists, in launch order, the backend calls that one optimizer
// step of w makes on a rank, as finetune's TrainStep and engine/bench's
// Trainer take it. With w.FusedOptimizer it is FusedStep's (fused.go):
// one micro-batch's passes — with w.Clip the norm-only one and the step's
// sums first — each unit's gradients zeroed where the backward reaches
// it and updated (AdamWStep over the unit) or squared where it leaves
// it, and the one read; the gradients' allocations (Empty, Free) are not
// kernels, and are left out. Otherwise: the gradients zeroed (ZeroGrads), w.Micro
// micro-batches of w.Batch sequences of w.SeqLen tokens each uploaded and
// run forward and backward (ForwardBackwardSum: the embedding, each
// block's forward, the head and loss chunk by chunk, the final norm's and
// each block's backward — after its recomputed forward with full
// recomputation, its recomputed norms and SwiGLU with selective —,
// the embedding's backward), the step's sums (FinishStep), the fused AdamW
// update (Backend.AdamWStep) and the one read of the sums. It is the
// step's time as the performance model sees it (engine/perfmodel costs
// each call by engine.Kernel.Cost), as Itemize is its memory; a test
// records a real step's calls on the CPU backend and holds them equal.
//
// The list is of the backend's calls alone: the grid's collectives run
// on its communicators, and perfmodel itemizes them (Collectives). On a
// grid (w.Grid) it is rank 0's: every rank launches the same kernels on
// its shards, except that the residual's copy before o_proj's and
// down_proj's partial products is made by the y group's rank 0 alone
// (linearResidual) and that FinishStep zeroes the sums a rank does not
// count — a few small memory-bound calls. It covers full training with
// AdamW (w.Moments = 2); adapters and SGD are refused. Batches are taken
// without report weights (Batch.ReportWeights), as the benchmark and a
// run without a goldfish loss make them.
func Kernels(cfg *checkpoints.Config, w Work) ([]engine.Kernel, error) {
	s, err := StepKernelsOf(cfg, w)
	return s.List, err
}

// checkKernelWork refuses what the kernel list does not cover.
func checkKernelWork(cfg *checkpoints.Config, w Work) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	g := w.Grid
	switch {
	case !w.Train || w.NewTokens > 0:
		return errors.New("llama: the kernel list is of a training step")
	case w.Batch < 1 || w.SeqLen < 1 || w.Micro < 1:
		return fmt.Errorf("llama: kernel list of %d micro-batches of %d sequences of %d tokens: want positive counts", w.Micro, w.Batch, w.SeqLen)
	case w.LoRA != nil:
		return errors.New("llama: the kernel list does not cover adapters")
	case w.Moments != 2:
		return fmt.Errorf("llama: the kernel list is of an AdamW step (2 moments), not %d", w.Moments)
	case w.FusedOptimizer && w.Micro != 1:
		return fmt.Errorf("llama: a fused optimizer step is of one micro-batch, not %d", w.Micro)
	}
	if g != (comm.Grid{}) {
		if err := parallel.Check(cfg, g); err != nil {
			return err
		}
	}
	return CheckActivations(w.Activations, g)
}

// StepKernels are Kernels' list with where each micro-batch's passes lie
// in it, for a model that times one pass apart (the last micro-batch's
// backward, which the gradients' reduction overlaps).
type StepKernels struct {
	List []engine.Kernel
	// Passes holds, for each micro-batch, the indices in List where its
	// calls start, where its forward pass (with the batch's upload) ends
	// and its head, loss and backward begin, and where they end.
	Passes [][3]int
}

// StepKernelsOf is Kernels with the passes' bounds.
func StepKernelsOf(cfg *checkpoints.Config, w Work) (StepKernels, error) {
	if err := checkKernelWork(cfg, w); err != nil {
		return StepKernels{}, err
	}
	k := newKernelList(cfg, w)
	k.step(w)
	return StepKernels{List: k.list, Passes: k.passes}, nil
}

func newKernelList(cfg *checkpoints.Config, w Work) *kernelList {
	k := &kernelList{d: fullDims(cfg), cfg: cfg, grid: w.Grid != (comm.Grid{}), recompute: w.Recompute}
	if k.grid {
		k.d = gridDims(cfg, w.Grid)
		k.shape, k.z, k.ors = w.Grid, w.Grid.Z > 1, w.Overlap.ReduceScatter
	}
	k.d.act = w.Activations
	return k
}

// kernelList builds Kernels' list, mirroring the passes call for call:
// each method below is named after, and follows, the model's method it
// lists (train.go, block.go, grid.go, stepsums.go).
type kernelList struct {
	d    dims
	cfg  *checkpoints.Config
	grid bool // a grid (Work.Grid not the zero Grid): the parameters are rank 0's shards
	// recompute is Work.Recompute: each block's forward again before its
	// backward (full), or its norms and SwiGLU (selective).
	recompute Recompute
	// shape is the grid's (the zero Grid on one rank); z is Z > 1, whose
	// weight gradients go through zGrads' blocks, and ors its overlapped
	// reduce-scatters (Overlap.ReduceScatter), whose chunks are added
	// when the block's buffer is next needed.
	shape comm.Grid
	z     bool
	ors   bool
	// pending are the Z reduce-scatters in flight with ORS: each
	// gradient's chunk still to add, and whether it is in the tied
	// embedding's buffer.
	pending []zPending
	ps      kparams
	passes  [][3]int // StepKernels.Passes
	// flatRows, when positive, replaces flatRows' int32 bound (the
	// model's flatRowsLimit, which the tests set).
	flatRows int
	list     []engine.Kernel
	// fused is the fused step's pass being listed (Work.FusedOptimizer),
	// nil otherwise.
	fused *kfused
}

// kfused is a fused step's pass as the list sees it (fused.go's
// fusedPass): update, or the norm-only pass; clip, whether the step
// clips (so took the norm-only pass first); moments, the moments' dtype.
type kfused struct {
	update, clip bool
	w            Work
}

func (k *kernelList) add(op string, ops ...engine.Operand) {
	k.list = append(k.list, engine.Kernel{Op: op, Operands: ops})
}

func (k *kernelList) gemm(p engine.GemmParams, a, b, c engine.Operand) {
	k.list = append(k.list, engine.Kernel{Op: "Gemm", Operands: []engine.Operand{a, b, c}, Gemm: p})
}

// kparam is a parameter as the list sees it: the shape of its value and
// gradient on this rank (parallel.LocalShape: a flat chunk when
// Z-sharded), its (x, y) block's rows and columns, and whether it is a
// matrix (checkpoints.Role.Matrix: a BF16 copy in mixed precision; a norm
// weight has none).
type kparam struct {
	shape      []int
	rows, cols int
	matrix     bool
}

// kparams are the model's parameters in Model.Params' order: the
// embedding, each layer's (the same shapes in every layer), the final
// norm and an untied head.
type kparams struct {
	embed, norm, head kparam
	// layer is a layer's parameters in the declaration's order, byRole
	// each by its role.
	layer  []kparam
	byRole map[checkpoints.Role]kparam
}

func (ps kparams) list(k *kernelList) []kparam {
	out := []kparam{ps.embed}
	for range k.d.L {
		out = append(out, ps.layer...)
	}
	out = append(out, ps.norm)
	if !k.cfg.TieWordEmbeddings {
		out = append(out, ps.head)
	}
	return out
}

// param is the declared tensor s as rank 0 of the grid (New:
// Grid.Shard, parallel.LocalShape) holds it.
func (k *kernelList) param(s checkpoints.TensorSpec) kparam {
	rows, cols := engine.RowsCols(s.Shape)
	p := kparam{shape: s.Shape, rows: rows, cols: cols, matrix: s.Role.Matrix()}
	if k.grid {
		sh := parallel.ShardAt(k.shape, 0, 0, 0, s.Split, s.Shape)
		p.shape, p.rows, p.cols = parallel.LocalShape(s.Shape, sh), sh.Row1-sh.Row0, sh.Col1-sh.Col0
	}
	return p
}

func (k *kernelList) params() kparams {
	// The declaration of the model's tensors, layer 0's standing for
	// every layer's. An absent tensor (a tied head) is the zero kparam,
	// which the list never reads.
	ps := kparams{byRole: map[checkpoints.Role]kparam{}}
	for _, s := range oneLayer(k.cfg).TensorSpecs() {
		p := k.param(s)
		switch s.Role {
		case checkpoints.RoleEmbedding:
			ps.embed = p
		case checkpoints.RoleFinalNorm:
			ps.norm = p
		case checkpoints.RoleHead:
			ps.head = p
		default:
			ps.layer = append(ps.layer, p)
			ps.byRole[s.Role] = p
		}
	}
	return ps
}

func (k *kernelList) f32(shape ...int) engine.Operand { return engine.Shaped(engine.F32, shape...) }
func (k *kernelList) act(shape ...int) engine.Operand { return engine.Shaped(k.d.act, shape...) }
func (k *kernelList) i32(shape ...int) engine.Operand { return engine.Shaped(engine.I32, shape...) }

// weight is a matrix [rows, cols] as the passes multiply by it
// (passWeight: its BF16 copy in mixed precision).
func (k *kernelList) weight(rows, cols int) engine.Operand { return k.act(rows, cols) }

// step is bench.Trainer.Step's and finetune.TrainStep's sequence.
func (k *kernelList) step(w Work) {
	k.ps = k.params()
	ps := k.ps.list(k)
	if w.FusedOptimizer {
		k.fusedStep(w, ps)
		return
	}
	for _, p := range ps { // ZeroGrads
		k.add("Fill", k.f32(p.shape...))
	}
	for i := 0; i < w.Micro; i++ {
		k.forwardBackwardSum(w.Batch, w.SeqLen)
	}
	k.finishStep(ps, w.Micro)
	k.adamWStep(w, ps)
	k.add("Download", k.f32(4)) // StepSums.Read
}

// adamWStep is an AdamWStep over ps: each parameter's value, gradient,
// moments and copy. A split master's halves are read and written as a
// float32's four bytes, its copy one of them (no copy written beside).
// Compact moments move their own bytes, 8-bit ones with their scales
// (engine.Kernel.Cost counts them from the I8 operands' shapes).
func (k *kernelList) adamWStep(w Work, ps []kparam) {
	var ops []engine.Operand
	for _, p := range ps {
		c := engine.Operand{}
		if k.d.act == engine.BF16 && p.matrix && !w.SplitMaster {
			c = engine.Shaped(engine.BF16, p.shape...)
		}
		f, mom := k.f32(p.shape...), k.f32(p.shape...)
		if w.MomentDType != engine.F32 {
			mom = engine.Shaped(w.MomentDType, p.shape...)
		}
		ops = append(ops, f, f, mom, mom, c)
	}
	k.add("AdamWStep", append(ops, k.f32(2))...)
}

// fusedStep is FusedStep's (Work.FusedOptimizer) and the one read: with
// Work.Clip the norm-only pass and the step's sums, then the pass that
// updates; without, the pass that updates and the step's sums at its end.
func (k *kernelList) fusedStep(w Work, ps []kparam) {
	if w.Clip {
		k.fused = &kfused{clip: true, w: w}
		k.forwardBackwardSum(w.Batch, w.SeqLen)
		k.add("Sum", k.f32(1), k.f32(1)) // sumLosses, one micro-batch
		k.add("Sum", k.f32(1), k.f32(1))
		k.sumNorm(len(ps))
	}
	k.fused = &kfused{update: true, clip: w.Clip, w: w}
	k.forwardBackwardSum(w.Batch, w.SeqLen)
	if !w.Clip {
		k.add("Sum", k.f32(1), k.f32(1)) // sumLosses again, as FinishStep
		k.add("Sum", k.f32(1), k.f32(1))
		k.sumNorm(len(ps))
	}
	k.fused = nil
	k.add("Download", k.f32(4)) // StepSums.Read
}

// fusedBegin is fusedBegin's: each gradient of the unit ps zeroed.
func (k *kernelList) fusedBegin(ps ...kparam) {
	if k.fused == nil {
		return
	}
	for _, p := range ps {
		k.add("Fill", k.f32(p.shape...))
	}
}

// fusedDone is fusedDone's for the unit ps: its Z chunks added, then
// its update, or its squares (and without clipping its own norm's sums)
// and the update.
func (k *kernelList) fusedDone(ps ...kparam) {
	f := k.fused
	if f == nil {
		return
	}
	if k.z {
		k.zFinish(true)
	}
	if f.update && f.clip {
		k.adamWStep(f.w, ps)
		return
	}
	// The unit's squares: rank 0, whose list this is, counts every
	// tensor, so they are one range of slots.
	ops := []engine.Operand{k.f32(len(ps))}
	for _, p := range ps {
		ops = append(ops, k.f32(p.shape...))
	}
	k.add("SumSquaresMulti", ops...)
	if !f.update {
		return
	}
	k.add("Sum", k.f32(1), k.f32(len(ps))) // the unit's own ‖g‖²
	k.adamWStep(f.w, ps)
}

// forwardBackwardSum is ForwardBackwardSum's: upload, forward,
// tokenLossSums (headLoss and the sums), backward.
func (k *kernelList) forwardBackwardSum(B, T int) {
	N, start := B*T, len(k.list)
	k.add("UploadInt32", k.i32(N)) // ids
	if k.d.y > 1 {                 // vocabSlice: the ids within this rank's slice, and its mask
		k.add("UploadInt32", k.i32(N))
		k.add("Upload", k.f32(N))
	}
	k.add("UploadInt32", k.i32(N)) // targets
	k.add("Upload", k.f32(N))      // weights
	k.forward(B, T)
	k.passes = append(k.passes, [3]int{start, len(k.list), 0})
	if k.cfg.TieWordEmbeddings {
		k.fusedBegin(k.ps.embed)
	} else {
		k.fusedBegin(k.ps.head)
	}
	if k.headLoss(N) { // the vocabulary-parallel loss's sums, from the host
		k.add("Upload", k.f32(1))
		k.add("Upload", k.f32(1))
	} else {
		k.add("Fill", k.f32(1))          // the report slot: no report weights
		k.add("Sum", k.f32(1), k.f32(N)) // the micro-batch's loss sum
	}
	if f := k.fused; f != nil && f.update && !f.clip { // the loss, summed before the first update
		k.add("Sum", k.f32(1), k.f32(1))
		k.add("Sum", k.f32(1), k.f32(1))
	}
	k.backward(B, T)
	k.passes[len(k.passes)-1][2] = len(k.list)
}

func (k *kernelList) forward(B, T int) {
	d, N := k.d, B*T
	if d.y > 1 { // embed: this slice's rows, masked
		k.add("Embedding", k.f32(N, d.H), k.weight(d.V, d.H), k.i32(N))
		k.scaleRows(k.act(N, d.H), k.f32(N, d.H), k.f32(N), 0)
	} else {
		k.add("Embedding", k.act(N, d.H), k.weight(d.V, d.H), k.i32(N))
	}
	for l := 0; l < d.L; l++ {
		k.blockForward(B, T, true)
	}
	k.rmsnorm(N)
}

// rowDots and scaleRows are grid.go's batches of one-row GEMMs.
func (k *kernelList) rowDots(dst, a, b engine.Operand) {
	n, kk := a.Shape[0], a.Shape[1]
	k.gemm(engine.GemmParams{TransB: true, M: 1, N: 1, K: kk, Alpha: 1, LDA: kk, LDB: kk, LDC: 1,
		Batch: n, StrideA: kk, StrideB: kk, StrideC: 1}, a, b, dst)
}

func (k *kernelList) scaleRows(dst, src, s engine.Operand, beta float32) {
	n, kk := src.Shape[0], src.Shape[1]
	k.gemm(engine.GemmParams{M: 1, N: kk, K: 1, Alpha: 1, Beta: beta, LDA: 1, LDB: kk, LDC: kk,
		Batch: n, StrideA: 1, StrideB: kk, StrideC: kk}, s, src, dst)
}

// rmsnorm is rmsnorm's on n rows: on X ranks the rows' sums of squares,
// the kernel on this rank's columns, the statistics through the host
// and the rows rescaled.
func (k *kernelList) rmsnorm(n int) {
	H := k.d.H
	x := k.act(n, H)
	if k.d.x == 1 {
		k.add("RMSNorm", x, k.f32(n), x, k.f32(H))
		return
	}
	k.rowDots(k.f32(n), x, x)
	k.add("RMSNorm", k.f32(n, H), k.f32(n), x, k.f32(H))
	k.add("Download", k.f32(n))
	k.add("Download", k.f32(n))
	k.add("Upload", k.f32(n))
	k.add("Upload", k.f32(n))
	k.scaleRows(x, k.f32(n, H), k.f32(n), 0)
}

// rmsnormBackward is rmsnormBackward's on n rows, from dy (F32 for the
// final norm, whose gradient comes from the head's F32 products).
func (k *kernelList) rmsnormBackward(n int, dy engine.Operand) {
	H := k.d.H
	x := k.act(n, H)
	if k.d.x > 1 {
		k.rowDots(k.f32(n), dy, x)
		k.add("Copy", k.f32(n), k.f32(n))
	}
	k.add("RMSNormBackward", x, k.f32(H), dy, x, k.f32(H), k.f32(n))
	if k.d.x > 1 {
		k.add("Download", k.f32(n))
		k.add("Download", k.f32(n))
		k.add("Download", k.f32(n))
		k.add("Upload", k.f32(n))
		k.scaleRows(x, x, k.f32(n), 1)
	}
}

// attention is an attention call's, with the model's sliding window.
func (k *kernelList) attention(op string, ops ...engine.Operand) {
	k.list = append(k.list, engine.Kernel{Op: op, Operands: ops, Window: k.cfg.Window()})
}

// linearBias is linearBias's: with a bias, the accumulator filled with it
// (on one rank of the sum; that is rank 0, the rank the list is of)
// before the product adds into it.
func (k *kernelList) linearBias(n, o, kk int, bias bool) {
	out := k.act(n, o)
	if !bias {
		k.linear(n, o, kk, 0, out)
		return
	}
	acc, widened := out, (k.d.x > 1 || k.d.y > 1) && k.d.act == engine.BF16
	if widened {
		acc = k.f32(n, o) // partial: the grid's float32 accumulator
	}
	k.add("Fill", acc)
	k.add("AddBias", acc, k.f32(o))
	k.linear(n, o, kk, 1, acc)
	if widened {
		k.add("Copy", out, acc)
	}
}

// headNorm is headNorm's over the heads of n rows.
func (k *kernelList) headNorm(n, heads int) {
	x := k.act(n*heads, k.d.D)
	k.add("RMSNorm", x, k.f32(n*heads), x, k.f32(k.d.D))
}

// headNormBackward is headNormBackward's.
func (k *kernelList) headNormBackward(n, heads int) {
	x := k.act(n*heads, k.d.D)
	k.add("RMSNormBackward", x, k.f32(k.d.D), x, x, k.f32(k.d.D), k.f32(n*heads))
}

// biasGrad is biasGrad's: a bias's gradient [o] += the rows of dy.
func (k *kernelList) biasGrad(n, o int) {
	k.add("BiasGrad", k.f32(o), k.act(n, o))
}

// linear is gemmLinear's call: out [n, o] = in [n, kk]·Wᵀ (+ out).
func (k *kernelList) linear(n, o, kk int, beta float32, out engine.Operand) {
	k.gemm(engine.GemmParams{TransB: true, M: n, N: o, K: kk, Alpha: 1, Beta: beta, LDA: kk, LDB: kk, LDC: o},
		k.act(n, kk), k.weight(o, kk), out)
}

// inputGrad is inputGrad's: din [n, kk] = dout [n, o]·W (+ din).
func (k *kernelList) inputGrad(n, o, kk int, accumulate bool, dout, din engine.Operand) {
	beta := float32(0)
	if accumulate {
		beta = 1
	}
	k.gemm(engine.GemmParams{M: n, N: kk, K: o, Alpha: 1, Beta: beta, LDA: o, LDB: kk, LDC: kk}, dout, k.weight(o, kk), din)
}

// weightGrad is weightGradPart's for p, whose gradient block is [o, kk]:
// += doutᵀ [o, n]·in [n, kk] into p's gradient, or with Z-sharding into
// zGrads' block (the tied head's buffer for a tied head), the first
// part of a sum over chunks overwriting it and the last reduce-scattering
// it.
func (k *kernelList) weightGrad(p kparam, n int, dout, in engine.Operand, first, last, tiedHead bool) {
	o, kk := p.rows, p.cols
	gemm := func(dst engine.Operand, beta float32) {
		k.gemm(engine.GemmParams{TransA: true, M: o, N: kk, K: n, Alpha: 1, Beta: beta, LDA: o, LDB: kk, LDC: kk}, dout, in, dst)
	}
	beta := float32(1)
	if first {
		beta = 0
	}
	switch {
	case !k.z:
		gemm(k.f32(p.shape...), 1)
		return
	case tiedHead:
		gemm(k.f32(o, kk), beta)
		return
	}
	if first {
		k.zFinish(false)
	}
	gemm(k.f32(o, kk), beta)
	if last {
		k.zScatter(p, false)
	}
}

// zPending is a reduce-scatter in flight (zGrads.pending).
type zPending struct {
	p    kparam
	tied bool
}

// zScatter is zGrads.scatter's: the chunk added at once, or later.
func (k *kernelList) zScatter(p kparam, tied bool) {
	if k.ors {
		k.pending = append(k.pending, zPending{p, tied})
		return
	}
	k.zAdd(p)
}

func (k *kernelList) zAdd(p kparam) {
	g := k.f32(p.shape...)
	k.add("Add", g, g, k.f32(engine.Elements(p.shape)))
}

// zFinish is zGrads.finish's: the pending chunks of the shared buffer
// added (all of them when all), in the order they were issued.
func (k *kernelList) zFinish(all bool) {
	kept := k.pending[:0]
	for _, s := range k.pending {
		if !all && s.tied {
			kept = append(kept, s)
			continue
		}
		k.zAdd(s.p)
	}
	k.pending = kept
}

// blockForward is blockForward's; out is false for recomputation.
func (k *kernelList) blockForward(B, T int, out bool) {
	d, N := k.d, B*T
	H, Q, KV, I, D := d.H, d.Q, d.KV, d.I, d.D
	k.rmsnorm(N)
	k.linearBias(N, Q, H, k.cfg.QKVBias())
	k.linearBias(N, KV, H, k.cfg.QKVBias())
	k.linearBias(N, KV, H, k.cfg.QKVBias())
	if d.qkNorm {
		k.headNorm(N, d.heads)
		k.headNorm(N, d.kvHeads)
	}
	k.add("RoPE", k.act(N, d.heads, D), k.i32(N), k.f32(D/2))
	k.add("RoPE", k.act(N, d.kvHeads, D), k.i32(N), k.f32(D/2))
	k.attention("Attention", k.act(B, T, d.heads, D), k.f32(B, d.heads, T),
		k.act(B, T, d.heads, D), k.act(B, T, d.kvHeads, D), k.act(B, T, d.kvHeads, D))
	k.add("Copy", k.act(N, H), k.act(N, H)) // linearResidual: h = x, then += att·Woᵀ
	k.linear(N, H, Q, 1, k.act(N, H))
	k.rmsnorm(N)
	k.linear(N, I, H, 0, k.act(N, I))
	k.linear(N, I, H, 0, k.act(N, I))
	k.add("SwiGLU", k.act(N, I), k.act(N, I), k.act(N, I))
	if out {
		k.add("Copy", k.act(N, H), k.act(N, H))
		k.linear(N, H, I, 1, k.act(N, H))
	}
}

// recomputeSelective is recomputeSelective's: SwiGLU, then the two norms.
func (k *kernelList) recomputeSelective(N int) {
	ni := k.act(N, k.d.I)
	k.add("SwiGLU", ni, ni, ni)
	k.rmsnorm(N)
	k.rmsnorm(N)
}

// headLoss is headLoss's, chunk by chunk of headRows rows. It reports
// whether the loss was the vocabulary-parallel one, whose sums come
// from the host.
func (k *kernelList) headLoss(N int) bool {
	d := k.d
	H, V := d.H, d.V
	rows := d.headRows(N)
	for r0 := 0; r0 < N; r0 += rows {
		n := min(rows, N-r0)
		logits, dlogits := k.f32(n, V), k.f32(n, V)
		if d.act == engine.BF16 {
			dlogits = engine.Shaped(engine.BF16, n, V)
		}
		k.linear(n, V, H, 0, logits)
		if d.y > 1 {
			k.vocabCrossEntropy(n)
		} else {
			k.add("CrossEntropy", k.f32(n), dlogits, logits, k.i32(n), k.f32(n))
		}
		k.inputGrad(n, V, H, false, dlogits, k.f32(n, H))
		head := k.ps.head
		if k.cfg.TieWordEmbeddings {
			head = k.ps.embed
		}
		k.weightGrad(head, n, dlogits, k.act(n, H), r0 == 0, r0+n == N, k.cfg.TieWordEmbeddings)
	}
	return d.y > 1
}

// vocabCrossEntropy is vocabCrossEntropy's with its gradient, on the n
// rows of logits [n, V/Y]: flatRows rows of the flattened logits a
// chunk.
func (k *kernelList) vocabCrossEntropy(n int) {
	V, Y := k.d.V, k.d.y
	per := max(1, math.MaxInt32/V)
	if k.flatRows > 0 {
		per = k.flatRows
	}
	chunks := func(f func(r int)) {
		for r0 := 0; r0 < n; r0 += per {
			f(min(n, r0+per) - r0)
		}
	}
	logits := k.f32(n, V)
	k.add("Argmax", k.i32(n), logits)
	k.add("DownloadInt32", k.i32(n))
	k.add("UploadInt32", k.i32(2*n))
	chunks(func(r int) {
		for range 2 { // the argmaxes, then the targets
			k.add("Embedding", k.f32(r, 1), k.f32(r*V, 1), k.i32(r))
		}
	})
	k.add("Fill", k.f32(n))
	k.add("CrossEntropy", k.f32(n), engine.Operand{}, logits, k.i32(n), k.f32(n))
	k.add("Download", k.f32(2*n, 1))
	k.add("Download", k.f32(n))
	k.add("Download", k.f32(Y*n))
	k.add("Upload", k.f32(2*n))
	k.add("Download", k.f32(2*n))
	k.add("Upload", k.f32(n))
	k.add("CrossEntropy", k.f32(n), logits, logits, k.i32(n), k.f32(n))
	k.add("Upload", k.f32(n, 1))
	chunks(func(r int) {
		k.add("EmbeddingBackward", k.f32(r*V, 1), k.f32(r, 1), k.i32(r))
	})
}

func (k *kernelList) backward(B, T int) {
	d, N := k.d, B*T
	H := d.H
	if !k.cfg.TieWordEmbeddings {
		k.fusedDone(k.ps.head)
	}
	k.fusedBegin(k.ps.norm)
	k.rmsnormBackward(N, k.f32(N, H)) // the final norm: dx from dlnf (F32)
	k.fusedDone(k.ps.norm)
	layer := k.ps.layer
	for l := d.L - 1; l >= 0; l-- {
		switch k.recompute {
		case RecomputeFull:
			k.blockForward(B, T, false)
		case RecomputeSelective:
			if l < d.L-1 { // the last layer's are still held
				k.recomputeSelective(N)
			}
		}
		k.fusedBegin(layer...)
		k.blockBackward(B, T)
		k.fusedDone(layer...)
	}
	if !k.cfg.TieWordEmbeddings { // a tied one's since the head
		k.fusedBegin(k.ps.embed)
	}
	defer k.fusedDone(k.ps.embed)
	grad := k.f32(k.ps.embed.shape...)
	if k.z { // embedBlock: the tied buffer, or the shared one zeroed
		grad = k.f32(k.ps.embed.rows, k.ps.embed.cols)
		if !k.cfg.TieWordEmbeddings {
			k.zFinish(false)
			k.add("Fill", grad)
		}
	}
	if d.y > 1 { // this slice's ids alone
		k.scaleRows(k.f32(N, H), k.act(N, H), k.f32(N), 0)
		k.add("EmbeddingBackward", grad, k.f32(N, H), k.i32(N))
	} else {
		k.add("EmbeddingBackward", grad, k.act(N, H), k.i32(N))
	}
	if k.z {
		k.zScatter(k.ps.embed, k.cfg.TieWordEmbeddings)
		k.zFinish(true) // the pass's end: every chunk added
	}
}

func (k *kernelList) blockBackward(B, T int) {
	d, N := k.d, B*T
	H, Q, KV, I, D := d.H, d.Q, d.KV, d.I, d.D
	nh, nq, nkv, ni := k.act(N, H), k.act(N, Q), k.act(N, KV), k.act(N, I)
	lp := k.ps.byRole
	k.inputGrad(N, H, I, false, nh, ni) // dact = dOut·Wdown
	k.weightGrad(lp[checkpoints.RoleMLPDown], N, nh, ni, true, true, false)
	k.add("SwiGLUBackward", ni, ni, ni, ni, ni)
	k.inputGrad(N, I, H, false, ni, nh) // dln = dgate·Wgate
	k.inputGrad(N, I, H, true, ni, nh)  // + dup·Wup
	k.weightGrad(lp[checkpoints.RoleMLPGate], N, ni, nh, true, true, false)
	k.weightGrad(lp[checkpoints.RoleMLPUp], N, ni, nh, true, true, false)
	k.rmsnormBackward(N, nh)
	k.add("Add", nh, nh, nh)            // dh = dOut + dnorm
	k.inputGrad(N, H, Q, false, nh, nq) // datt = dh·Wo
	k.weightGrad(lp[checkpoints.RoleAttnO], N, nh, nq, true, true, false)
	k.attention("AttentionBackward", k.act(B, T, d.heads, D), k.act(B, T, d.kvHeads, D), k.act(B, T, d.kvHeads, D),
		k.act(B, T, d.heads, D), k.act(B, T, d.heads, D), k.act(B, T, d.kvHeads, D), k.act(B, T, d.kvHeads, D),
		k.act(B, T, d.heads, D), k.f32(B, d.heads, T))
	k.add("RoPEBackward", k.act(N, d.heads, D), k.i32(N), k.f32(D/2))
	k.add("RoPEBackward", k.act(N, d.kvHeads, D), k.i32(N), k.f32(D/2))
	if d.qkNorm {
		k.headNormBackward(N, d.heads)
		k.headNormBackward(N, d.kvHeads)
	}
	if k.cfg.QKVBias() {
		k.biasGrad(N, Q)
		k.biasGrad(N, KV)
		k.biasGrad(N, KV)
	}
	k.inputGrad(N, Q, H, false, nq, nh)
	k.inputGrad(N, KV, H, true, nkv, nh)
	k.inputGrad(N, KV, H, true, nkv, nh)
	k.weightGrad(lp[checkpoints.RoleAttnQ], N, nq, nh, true, true, false)
	k.weightGrad(lp[checkpoints.RoleAttnK], N, nkv, nh, true, true, false)
	k.weightGrad(lp[checkpoints.RoleAttnV], N, nkv, nh, true, true, false)
	k.rmsnormBackward(N, nh)
	k.add("Add", nh, nh, nh) // dx = dh + dnorm
}

// finishStep is FinishStep's: the loss sums, every gradient's squares
// (those the rank counts first: at rank 0 of a grid, as on one rank,
// every one), their sums, and ‖g‖² = the counted ones' + the others'
// (none).
func (k *kernelList) finishStep(ps []kparam, micro int) {
	k.add("Sum", k.f32(1), k.f32(micro))
	k.add("Sum", k.f32(1), k.f32(micro))
	ops := []engine.Operand{k.f32(len(ps))}
	for _, p := range ps {
		ops = append(ops, k.f32(p.shape...))
	}
	k.add("SumSquaresMulti", ops...)
	k.sumNorm(len(ps))
}

// sumNorm is sumNorm's and exchangeStep's for n tensors: the squares of
// those the rank counts summed (at rank 0 of a grid, as on one rank,
// every one), then the others' (none), and ‖g‖² = the two's sum.
func (k *kernelList) sumNorm(n int) {
	k.add("Sum", k.f32(1), k.f32(n))
	k.add("Sum", k.f32(1), k.f32(0))
	k.add("Add", k.f32(1), k.f32(1), k.f32(1))
}
