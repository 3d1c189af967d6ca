package llama

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// Kernels lists, in launch order, the backend calls that one optimizer
// step of w makes on a rank, as finetune's TrainStep and engine/bench's
// Trainer take it: the gradients zeroed (ZeroGrads), w.Micro
// micro-batches of w.Batch sequences of w.SeqLen tokens each uploaded and
// run forward and backward (ForwardBackwardSum: the embedding, each
// block's forward, the head and loss chunk by chunk, the final norm's and
// each block's backward — after its recomputed forward with w.Recompute —,
// the embedding's backward), the step's sums (FinishStep), the fused AdamW
// update (Backend.AdamWStep) and the one read of the sums. It is the
// step's time as the performance model sees it (engine/perfmodel costs
// each call by engine.Kernel.Cost), as Itemize is its memory; a test
// records a real step's calls on the CPU backend and holds them equal.
//
// The list is of the backend's calls alone: the grid's collectives run
// on its communicators, and perfmodel itemizes them (Collectives). It
// covers full training with AdamW (w.Moments = 2) on one rank or a grid
// of data-parallel replicas (whose compute is one rank's; the list is
// the first replica's, whose counts in the step's sums need no zeroing).
// Grids that split the model (X·Y·Z > 1), adapters and SGD are refused:
// their calls are not listed yet. Batches are taken without report
// weights (Batch.ReportWeights), as the benchmark and a run without a
// goldfish loss make them.
func Kernels(cfg *checkpoints.Config, w Work) ([]engine.Kernel, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := w.Grid
	switch {
	case !w.Train || w.NewTokens > 0:
		return nil, errors.New("llama: the kernel list is of a training step")
	case w.Batch < 1 || w.SeqLen < 1 || w.Micro < 1:
		return nil, fmt.Errorf("llama: kernel list of %d micro-batches of %d sequences of %d tokens: want positive counts", w.Micro, w.Batch, w.SeqLen)
	case w.LoRA != nil:
		return nil, errors.New("llama: the kernel list does not cover adapters")
	case w.Moments != 2:
		return nil, fmt.Errorf("llama: the kernel list is of an AdamW step (2 moments), not %d", w.Moments)
	case g != (comm.Grid{}) && g.X*g.Y*g.Z > 1:
		return nil, fmt.Errorf("llama: the kernel list covers data-parallel grids alone, not X·Y·Z = %d·%d·%d", g.X, g.Y, g.Z)
	}
	if err := CheckActivations(w.Activations, g); err != nil {
		return nil, err
	}
	k := newKernelList(cfg, w)
	k.step(w)
	return k.list, nil
}

func newKernelList(cfg *checkpoints.Config, w Work) *kernelList {
	k := &kernelList{d: fullDims(cfg), cfg: cfg, grid: w.Grid != (comm.Grid{}), recompute: w.Recompute}
	k.d.act = w.Activations
	return k
}

// kernelList builds Kernels' list, mirroring the passes call for call:
// each method below is named after, and follows, the model's method it
// lists (train.go, block.go, grid.go, stepsums.go).
type kernelList struct {
	d    dims
	cfg  *checkpoints.Config
	grid bool // a grid (Options.Parallel set): the step's sums split norms from matrices
	// recompute is Work.Recompute: each block's forward again before its
	// backward.
	recompute bool
	list      []engine.Kernel
}

func (k *kernelList) add(op string, ops ...engine.Operand) {
	k.list = append(k.list, engine.Kernel{Op: op, Operands: ops})
}

func (k *kernelList) gemm(p engine.GemmParams, a, b, c engine.Operand) {
	k.list = append(k.list, engine.Kernel{Op: "Gemm", Operands: []engine.Operand{a, b, c}, Gemm: p})
}

// kparam is a parameter as the list sees it: its shape, whether it is a
// norm weight (F32 and no BF16 copy), and so the dtype the passes
// multiply by.
type kparam struct {
	shape []int
	norm  bool
}

// params lists the model's parameters as Model.Params orders them.
func (k *kernelList) params() []kparam {
	d := k.d
	ps := []kparam{{shape: []int{d.V, d.H}}}
	for l := 0; l < d.L; l++ {
		ps = append(ps, kparam{shape: []int{d.Q, d.H}}, kparam{shape: []int{d.KV, d.H}}, kparam{shape: []int{d.KV, d.H}},
			kparam{shape: []int{d.H, d.Q}}, kparam{shape: []int{d.I, d.H}}, kparam{shape: []int{d.I, d.H}},
			kparam{shape: []int{d.H, d.I}}, kparam{shape: []int{d.H}, norm: true}, kparam{shape: []int{d.H}, norm: true})
	}
	ps = append(ps, kparam{shape: []int{d.H}, norm: true})
	if !k.cfg.TieWordEmbeddings {
		ps = append(ps, kparam{shape: []int{d.V, d.H}})
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
	ps := k.params()
	for _, p := range ps { // ZeroGrads
		k.add("Fill", k.f32(p.shape...))
	}
	for i := 0; i < w.Micro; i++ {
		k.forwardBackwardSum(w.Batch, w.SeqLen)
	}
	k.finishStep(ps, w.Micro)
	// AdamWStep: each parameter's value, gradient, moments and copy.
	var ops []engine.Operand
	for _, p := range ps {
		c := engine.Operand{}
		if k.d.act == engine.BF16 && !p.norm {
			c = engine.Shaped(engine.BF16, p.shape...)
		}
		f := k.f32(p.shape...)
		ops = append(ops, f, f, f, f, c)
	}
	k.add("AdamWStep", append(ops, k.f32(2))...)
	k.add("Download", k.f32(4)) // StepSums.Read
}

// forwardBackwardSum is ForwardBackwardSum's: upload, forward,
// tokenLossSums (headLoss and the sums), backward.
func (k *kernelList) forwardBackwardSum(B, T int) {
	N := B * T
	k.add("UploadInt32", k.i32(N)) // ids
	k.add("UploadInt32", k.i32(N)) // targets
	k.add("Upload", k.f32(N))      // weights
	k.forward(B, T)
	k.headLoss(N)
	k.add("Fill", k.f32(1))          // the report slot: no report weights
	k.add("Sum", k.f32(1), k.f32(N)) // the micro-batch's loss sum
	k.backward(B, T)
}

func (k *kernelList) forward(B, T int) {
	d, N := k.d, B*T
	k.add("Embedding", k.act(N, d.H), k.weight(d.V, d.H), k.i32(N))
	for l := 0; l < d.L; l++ {
		k.blockForward(B, T, true)
	}
	k.add("RMSNorm", k.act(N, d.H), k.f32(N), k.act(N, d.H), k.f32(d.H))
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

// weightGrad is weightGrad's: grad [o, kk] += doutᵀ [o, n]·in [n, kk].
func (k *kernelList) weightGrad(n, o, kk int, dout, in engine.Operand) {
	k.gemm(engine.GemmParams{TransA: true, M: o, N: kk, K: n, Alpha: 1, Beta: 1, LDA: o, LDB: kk, LDC: kk}, dout, in, k.f32(o, kk))
}

// blockForward is blockForward's; out is false for recomputation.
func (k *kernelList) blockForward(B, T int, out bool) {
	d, N := k.d, B*T
	H, Q, KV, I, D := d.H, d.Q, d.KV, d.I, d.D
	k.add("RMSNorm", k.act(N, H), k.f32(N), k.act(N, H), k.f32(H))
	k.linear(N, Q, H, 0, k.act(N, Q))
	k.linear(N, KV, H, 0, k.act(N, KV))
	k.linear(N, KV, H, 0, k.act(N, KV))
	k.add("RoPE", k.act(N, d.heads, D), k.i32(N), k.f32(D/2))
	k.add("RoPE", k.act(N, d.kvHeads, D), k.i32(N), k.f32(D/2))
	k.add("Attention", k.act(B, T, d.heads, D), k.f32(B, d.heads, T),
		k.act(B, T, d.heads, D), k.act(B, T, d.kvHeads, D), k.act(B, T, d.kvHeads, D))
	k.add("Copy", k.act(N, H), k.act(N, H)) // linearResidual: h = x, then += att·Woᵀ
	k.linear(N, H, Q, 1, k.act(N, H))
	k.add("RMSNorm", k.act(N, H), k.f32(N), k.act(N, H), k.f32(H))
	k.linear(N, I, H, 0, k.act(N, I))
	k.linear(N, I, H, 0, k.act(N, I))
	k.add("SwiGLU", k.act(N, I), k.act(N, I), k.act(N, I))
	if out {
		k.add("Copy", k.act(N, H), k.act(N, H))
		k.linear(N, H, I, 1, k.act(N, H))
	}
}

// headLoss is headLoss's, chunk by chunk of headRows rows.
func (k *kernelList) headLoss(N int) {
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
		k.add("CrossEntropy", k.f32(n), dlogits, logits, k.i32(n), k.f32(n))
		k.inputGrad(n, V, H, false, dlogits, k.f32(n, H))
		k.weightGrad(n, V, H, dlogits, k.act(n, H))
	}
}

func (k *kernelList) backward(B, T int) {
	d, N := k.d, B*T
	H := d.H
	// The final norm: dx from dlnf (F32).
	k.add("RMSNormBackward", k.act(N, H), k.f32(H), k.f32(N, H), k.act(N, H), k.f32(H), k.f32(N))
	for l := d.L - 1; l >= 0; l-- {
		if k.recompute {
			k.blockForward(B, T, false)
		}
		k.blockBackward(B, T)
	}
	k.add("EmbeddingBackward", k.f32(d.V, H), k.act(N, H), k.i32(N))
}

func (k *kernelList) blockBackward(B, T int) {
	d, N := k.d, B*T
	H, Q, KV, I, D := d.H, d.Q, d.KV, d.I, d.D
	nh, nq, nkv, ni := k.act(N, H), k.act(N, Q), k.act(N, KV), k.act(N, I)
	k.inputGrad(N, H, I, false, nh, ni) // dact = dOut·Wdown
	k.weightGrad(N, H, I, nh, ni)       // Down
	k.add("SwiGLUBackward", ni, ni, ni, ni, ni)
	k.inputGrad(N, I, H, false, ni, nh) // dln = dgate·Wgate
	k.inputGrad(N, I, H, true, ni, nh)  // + dup·Wup
	k.weightGrad(N, I, H, ni, nh)       // Gate
	k.weightGrad(N, I, H, ni, nh)       // Up
	k.add("RMSNormBackward", nh, k.f32(H), nh, nh, k.f32(H), k.f32(N))
	k.add("Add", nh, nh, nh)            // dh = dOut + dnorm
	k.inputGrad(N, H, Q, false, nh, nq) // datt = dh·Wo
	k.weightGrad(N, H, Q, nh, nq)       // O
	k.add("AttentionBackward", k.act(B, T, d.heads, D), k.act(B, T, d.kvHeads, D), k.act(B, T, d.kvHeads, D),
		k.act(B, T, d.heads, D), k.act(B, T, d.heads, D), k.act(B, T, d.kvHeads, D), k.act(B, T, d.kvHeads, D),
		k.act(B, T, d.heads, D), k.f32(B, d.heads, T))
	k.add("RoPEBackward", k.act(N, d.heads, D), k.i32(N), k.f32(D/2))
	k.add("RoPEBackward", k.act(N, d.kvHeads, D), k.i32(N), k.f32(D/2))
	k.inputGrad(N, Q, H, false, nq, nh)
	k.inputGrad(N, KV, H, true, nkv, nh)
	k.inputGrad(N, KV, H, true, nkv, nh)
	k.weightGrad(N, Q, H, nq, nh)
	k.weightGrad(N, KV, H, nkv, nh)
	k.weightGrad(N, KV, H, nkv, nh)
	k.add("RMSNormBackward", nh, k.f32(H), nh, nh, k.f32(H), k.f32(N))
	k.add("Add", nh, nh, nh) // dx = dh + dnorm
}

// finishStep is FinishStep's: the loss sums, every gradient's squares
// (matrices first; on a grid the norm weights after them), their sums, and ‖g‖² = matrices' + norms'.
func (k *kernelList) finishStep(ps []kparam, micro int) {
	k.add("Sum", k.f32(1), k.f32(micro))
	k.add("Sum", k.f32(1), k.f32(micro))
	matrices, norms := len(ps), 0
	if k.grid {
		for _, p := range ps {
			if p.norm {
				norms++
			}
		}
		matrices -= norms
	}
	ops := []engine.Operand{k.f32(len(ps))}
	for _, norm := range []bool{false, true} {
		for _, p := range ps {
			if k.grid && p.norm == norm || !k.grid && !norm {
				ops = append(ops, k.f32(p.shape...))
			}
		}
	}
	k.add("SumSquaresMulti", ops...)
	k.add("Sum", k.f32(1), k.f32(matrices))
	k.add("Sum", k.f32(1), k.f32(norms))
	k.add("Add", k.f32(1), k.f32(1), k.f32(1))
}
