package engine

import (
	"math"
	"os"
)

// Backend runs the engine's kernels on one device. The set is small on
// purpose: a strided, batched GEMM plus a dozen fused kernels, each with its
// backward beside its forward. Every backend passes the conformance suite
// in engine/enginetest against the CPU reference.
//
// Ordering: kernels are issued in program order onto one stream and may run
// asynchronously. A kernel sees the results of every kernel issued before
// it. The host sees results only after Synchronize, or through Download,
// which synchronises. The CPU backend runs each kernel to completion before
// returning, so its Synchronize is free.
//
// Shapes: N is the number of token positions (batch × sequence, flattened),
// H the hidden size, V the vocabulary, heads/kvHeads and D the attention
// geometry. Token ids and positions are I32 tensors; everything else is
// F32 or BF16. Every backend takes BF16 tensors in Alloc, Empty, Free, Upload
// (rounded to nearest even), Download (widened exactly), Fill, Copy (a
// cast between F32 and BF16), and as Gemm's B operand with A and C F32
// (a frozen or bf16-copied weight). Mixed precision (bf16 activations,
// llama.Options.Activations) needs more, which every backend gives too:
//
//   - Gemm of BF16 A and B into an F32 or BF16 C, accumulated in float32
//     (C rounded once to nearest even when BF16);
//   - BF16 tensors, mixed freely with F32 ones, in Add, Axpy, Scale,
//     AddBias (y, bias), BiasGrad (dy),
//     Embedding (out, table), EmbeddingBackward (dOut), RMSNorm and its
//     backward (out, x, dOut, dx; w, rstd and dw may be either),
//     AddRMSNorm (out, x, residual; w and rstd may be either),
//     RoPE and its backward, SwiGLU and its backward, Attention and its
//     backward (q, k, v, out and their gradients; lse stays F32) and
//     AttentionKV: each reads its operands widened to float32, computes
//     in float32 (statistics as the F32 kernel does) and rounds each
//     output once to its tensor's dtype.
//
// Statistics (RMSNorm's mean of squares and its backward's dot products,
// cross-entropy's sum of exponentials) are accumulated in float64 or in
// compensated float32, as a backend documents: within a few units of
// float32's rounding of the exact sum, whatever its length. SumSquares
// and Sum accumulate in float64.
//
// CrossEntropy, Argmax, SumSquares, Sum and AdamW take F32 tensors: the
// loss and the optimizer's state stay float32. The one exception is
// CrossEntropy's dLogits, which may be BF16: the gradient computed in
// float32 and rounded once, as the head's bf16 products take it.
//
// Accumulation: kernels whose output is a gradient of a weight
// (EmbeddingBackward's dTable, RMSNormBackward's dw, BiasGrad's db) add
// into it, so that micro-batches accumulate; activation gradients are
// overwritten unless a kernel says otherwise.
//
// Determinism: for a fixed backend, thread count and input, every kernel
// gives bit-identical results (reductions run in a fixed order).
//
// Misuse: arguments that break a method's contract are a programming
// error, not an input error (shapes come from the engine's own
// arithmetic), so a method refuses them by panicking with a *Misuse whose
// Op names the method and whose Class says what is wrong: MisuseShape
// (sizes that do not fit), MisuseDType, MisuseAlias (an overlap the
// method forbids: Gemm's C with A or B, Attention's out with q, k or v, a
// partial overlap of Add's dst with a or b or of CrossEntropy's dLogits
// with logits), MisuseRange (ids, targets of a weighted row, start,
// Step, negative sizes, ld below the columns) or MisuseTensor (a nil,
// freed or foreign tensor, a view past its storage). Every backend
// refuses the same misuse with the same Class and Op, checked before
// anything is computed, and works on after a refusal
// (enginetest's Misuse cases). Failures of the device or its libraries
// are not misuse: they panic with an error of their own.
type Backend interface {
	Name() string
	Device() Device
	// Threads is the number of host threads the backend computes with.
	Threads() int

	// Alloc returns a zero-filled tensor. Free releases the storage of a
	// tensor returned by Alloc (with every view of it); a tensor must not
	// be used after Free.
	Alloc(dtype DType, shape ...int) *Tensor
	// Empty returns a tensor whose contents are undefined, to be freed as
	// Alloc's are: for a tensor whose every element is written before it
	// is read (an activation, a kernel's output), it saves Alloc's
	// zero-fill, a write of the whole tensor. A tensor that is added into
	// (a gradient) needs Alloc, or a Fill. When poisoning is on (Poison),
	// every element of it is NaN (I32: −1) instead, so that a read before
	// the first write shows in the results.
	Empty(dtype DType, shape ...int) *Tensor
	Free(t *Tensor)
	// MemStats reports the bytes of tensors allocated now and at peak.
	// Kernels may use transient workspace (e.g. AttentionBackward's
	// per-row rowsum(dOut ⊙ out), or per-thread tiles) that is not counted.
	MemStats() MemStats

	// Upload copies host float32 values into t (converting to t's dtype).
	Upload(t *Tensor, src []float32)
	// UploadInt32 copies host int32 values into an I32 tensor.
	UploadInt32(t *Tensor, src []int32)
	// Download copies t into dst as float32, after synchronising.
	Download(dst []float32, t *Tensor)
	// DownloadInt32 copies an I32 tensor into dst, after synchronising.
	DownloadInt32(dst []int32, t *Tensor)
	// Synchronize waits for every kernel issued so far.
	Synchronize() error

	// Gemm computes, for each of p.Batch problems i,
	//	C_i = Alpha·op(A_i)·op(B_i) + Beta·C_i
	// row-major, where op transposes when TransA/TransB is set, A_i starts
	// i·StrideA elements into a (likewise B, C), and LDA/LDB/LDC are row
	// strides. With Beta = 0, C is overwritten (NaNs in C do not leak).
	// With K = 0, C = Beta·C and A, B are not read. B may be BF16 with A
	// and C F32 (a frozen weight): the product is the one with B's values
	// widened to float32.
	Gemm(p GemmParams, a, b, c *Tensor)

	// Fill sets every element of t to v.
	Fill(t *Tensor, v float32)
	// Copy copies src into dst (same number of elements).
	Copy(dst, src *Tensor)
	// Add computes dst = a + b elementwise; dst may alias a or b.
	Add(dst, a, b *Tensor)
	// Axpy computes dst += alpha·x elementwise.
	Axpy(dst *Tensor, alpha float32, x *Tensor)
	// Scale computes t *= alpha.
	Scale(t *Tensor, alpha float32)
	// SumSquares writes Σ x² (accumulated in float64, stored as float32)
	// into the one-element tensor dst.
	SumSquares(dst, x *Tensor)
	// Sum writes Σ x into the one-element tensor dst, accumulated as
	// SumSquares accumulates.
	Sum(dst, x *Tensor)
	// SumSquaresMulti writes Σ xs[i]² into dst[i] for every tensor of
	// xs (dst has len(xs) elements; a tensor may be empty, whose sum is
	// 0): each bit for bit what SumSquares(dst.View(i, 1), xs[i]) would
	// write — the same float64 blocks, added in the same order, rounded
	// once — so it is as deterministic (the same bits for the same
	// inputs whatever the threads), but in a few launches on a GPU
	// however many tensors, where SumSquares is two a tensor: a gradient
	// norm over hundreds of parameters.
	SumSquaresMulti(dst *Tensor, xs []*Tensor)

	// AddBias adds a linear layer's bias to its output in place:
	// y[n, j] += bias[j] for every row n of y viewed as [rows, len(bias)]
	// (y's length a multiple of bias's, which is not empty). y and bias
	// may each be F32 or BF16 and do not overlap.
	AddBias(y, bias *Tensor)
	// BiasGrad adds the bias's gradient into db: db[j] += Σ_n dy[n, j]
	// over the rows of dy viewed as [rows, len(db)] (dy's length a
	// multiple of db's, which is not empty). db is F32; dy F32 or BF16,
	// and the two do not overlap. The sum over rows runs in a fixed order
	// (deterministic, as every reduction: see Determinism).
	BiasGrad(db, dy *Tensor)

	// Embedding gathers rows: out[i] = table[ids[i]]. out [N,H], table
	// [V,H], ids I32 [N].
	Embedding(out, table, ids *Tensor)
	// EmbeddingBackward adds dOut[i] into dTable[ids[i]].
	EmbeddingBackward(dTable, dOut, ids *Tensor)

	// RMSNorm computes out[i] = x[i] / rms(x[i]) ⊙ w, with
	// rms = sqrt(mean(x²) + eps), and saves rstd[i] = 1/rms for the
	// backward pass. out, x [N,H]; w [H]; rstd [N].
	RMSNorm(out, rstd, x, w *Tensor, eps float32)
	// AddRMSNorm adds residual into x, the residual stream (x += residual,
	// rounded to x's dtype), then normalises the sum as RMSNorm does:
	// out[i] = x[i]·rstd[i] ⊙ w. Its results are those of Add(x, x,
	// residual) then RMSNorm(out, rstd, x, w, eps), bit for bit, in one
	// pass over x on a GPU. out may be x; residual may overlap neither.
	AddRMSNorm(out, rstd, x, residual, w *Tensor, eps float32)
	// RMSNormBackward writes dx and adds into dw.
	RMSNormBackward(dx, dw, dOut, x, w, rstd *Tensor)

	// RoPE rotates x [N, heads, D] in place, HuggingFace rotate-half
	// layout: for j < D/2, with θ = pos·invFreq[j],
	//	x'[j]     = x[j]·cos θ − x[j+D/2]·sin θ
	//	x'[j+D/2] = x[j+D/2]·cos θ + x[j]·sin θ
	// pos I32 [N] holds each row's position; invFreq [D/2] the (scaled)
	// inverse frequencies. θ is the float32 product float32(pos)·invFreq[j],
	// rounded to float32 as HuggingFace computes it; cos and sin are then
	// taken of that value.
	RoPE(x, pos, invFreq *Tensor)
	// RoPEBackward rotates the gradient dx [N, heads, D] back (by −θ) in
	// place.
	RoPEBackward(dx, pos, invFreq *Tensor)

	// Attention is causal grouped-query self-attention over B sequences of
	// T tokens: q [B,T,heads,D], k and v [B,T,kvHeads,D], out
	// [B,T,heads,D]; query head h uses key/value head h/(heads/kvHeads).
	// Scores are scaled by 1/√D. A window W > 0 is a sliding window
	// (HuggingFace's, as Mistral uses it): query i sees key j iff
	// i−W < j ≤ i, W keys counting its own; W = 0 (or W ≥ T) is plain
	// causal attention, j ≤ i. Keys outside the window are skipped, not
	// only masked: the work is O(T·W). A negative window is a misuse
	// (MisuseRange). lse [B,heads,T] (F32) receives each query row's
	// log-sum-exp of its scaled scores over the keys it sees,
	// L_i = log Σ_j e^(s_ij), for the backward pass: the T×T
	// probabilities are never stored (FlashAttention-2's tiled forward
	// with an online softmax), so attention's memory is O(T) per head.
	Attention(out, lse, q, k, v *Tensor, window int)
	// AttentionBackward writes dq, dk and dv from dOut, the inputs, and the
	// out and lse that Attention saved with the same window, recomputing
	// the probabilities P = e^(S − L) tile by tile (dS = P ⊙ (dP −
	// rowsum(dOut ⊙ out))). dk and dv are overwritten (each the sum over
	// its group's query heads), not accumulated.
	AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse *Tensor, window int)
	// AttentionKV is inference attention against a cache: for sequence b,
	// the n queries q[b, i] (i < n) sit at positions p = start[b]+i and
	// attend to the cached positions j with p−W < j ≤ p (window W > 0,
	// as Attention's) or to all of kCache[b, 0 : p+1] (W = 0). q, out
	// [B,n,heads,D]; kCache, vCache [B,Tmax,kvHeads,D]; start I32 [B].
	AttentionKV(out, q, kCache, vCache, start *Tensor, window int)

	// SwiGLU computes out = silu(gate) ⊙ up, silu(x) = x·σ(x).
	SwiGLU(out, gate, up *Tensor)
	// SwiGLUBackward writes dGate and dUp from dOut.
	SwiGLUBackward(dGate, dUp, dOut, gate, up *Tensor)

	// CrossEntropy computes, for each row i of logits [N,V] with target
	// t[i] (I32) and weight w[i]:
	//	losses[i] = −w[i]·log softmax(logits[i])[t[i]]
	// and, if dLogits is not nil, dLogits[i] = scale·w[i]·(softmax(logits[i]) − onehot(t[i])).
	// Rows with weight 0 get zero loss and zero gradient (their target
	// may be out of range, e.g. padding). dLogits may be logits itself: the
	// gradient then replaces the logits in place. A BF16 dLogits gets the
	// float32 gradient rounded once to nearest even.
	CrossEntropy(losses, dLogits, logits, targets, weights *Tensor, scale float32)
	// Argmax writes, for each row of logits [N,V], the index of the
	// largest value, the lowest index on ties, into out I32 [N]. A NaN
	// counts as larger than any number, so a row holding NaN yields its
	// first NaN's index (as torch.argmax).
	Argmax(out, logits *Tensor)

	// AdamW updates a parameter in place from its gradient and moments
	// (all the same length), with decoupled weight decay.
	AdamW(param, grad, m, v *Tensor, h AdamWParams)
	// AdamWStep is a whole optimizer step over many parameters (a few
	// launches on a GPU, where AdamW is one a tensor), clipped and checked
	// on the device, so that the host need not read anything before it:
	// ctl (F32, 2 elements) holds the squared global gradient norm n² and
	// the step's loss. When either is not finite nothing changes.
	// Otherwise, with maxNorm > 0 and c = maxNorm / (√n² + 1e-6) below 1
	// (float32 arithmetic, see ClipCoefficient), every gradient is first
	// multiplied by c in place, as torch.nn.utils.clip_grad_norm_ does;
	// then each parameter takes AdamW's update with its own weight decay,
	// bit for bit as AdamW would with h.WeightDecay set to it, and a
	// parameter's Copy, when not nil, is set to the updated parameter
	// rounded to its dtype (a BF16 copy of a float32 master weight). h's
	// WeightDecay is not used.
	AdamWStep(ts []AdamWTensors, h AdamWParams, maxNorm float32, ctl *Tensor)
}

// PoisonEnv is the environment variable that turns poisoning on for the
// backends created while it is "1" (Poison): tests set it to prove that
// nothing reads an Empty tensor before writing it.
const PoisonEnv = "MEMTRAIN_POISON"

// Poison reports whether $MEMTRAIN_POISON asks the backends for
// poisoning: every backend's New reads it once (besides an option of its
// own), and fills each tensor Empty returns with NaN.
func Poison() bool { return os.Getenv(PoisonEnv) == "1" }

// AdamWTensors are one parameter's tensors in an AdamWStep, all the same
// length, and its decoupled weight decay. Copy, if not nil, receives the
// updated Param rounded to its own dtype (engine.Param.Copy, the BF16
// weights of a mixed-precision model), in the same pass over the
// elements, so that the copy costs no launch of its own.
//
// Low, when not nil, makes the master split (Param.Low): Param is nil, the
// float32 master is JoinF32 of Copy and Low, and the step writes the
// updated master's SplitF32 back into them; only a MasterSplitter's
// AdamWStep takes one.
//
// M and V are F32, or BF16 with Round set: the moments are then widened,
// updated in float32 as AdamW updates them, and rounded back
// stochastically under Round's key (stochastic.go); or I8 with Round and
// Int8 set: decoded, updated and encoded again blockwise (int8.go). Only
// a MasterSplitter's AdamWStep takes BF16 or I8 moments.
type AdamWTensors struct {
	Param, Grad, M, V *Tensor
	Copy, Low         *Tensor
	Round             *MomentRound
	Int8              *Int8Moments
	WeightDecay       float32
}

// GemmParams describe a batched, strided, row-major GEMM.
type GemmParams struct {
	TransA, TransB   bool
	M, N, K          int
	Alpha, Beta      float32
	LDA, LDB, LDC    int
	Batch            int // 0 means 1
	StrideA, StrideB int
	StrideC          int
}

// Stored returns the shapes A and B are stored in, rows × columns: op(A)
// is M×K, so A is stored K×M when TransA is set, and likewise op(B) is K×N.
func (p GemmParams) Stored() (ar, ac, br, bc int) {
	ar, ac, br, bc = p.M, p.K, p.K, p.N
	if p.TransA {
		ar, ac = ac, ar
	}
	if p.TransB {
		br, bc = bc, br
	}
	return ar, ac, br, bc
}

// AdamWParams are one AdamW step's hyper-parameters. Step counts from 1
// and sets the bias corrections.
type AdamWParams struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	Step                               int
}

// ClipCoefficient is the factor AdamWStep scales the gradients by, given
// their squared global norm n2: maxNorm / (√n2 + 1e-6) in float32 when
// that is below 1 and maxNorm > 0, else 1 (no clipping). Every backend
// computes it so, so the host can tell from n2 alone whether a step
// clipped.
func ClipCoefficient(n2, maxNorm float32) float32 {
	if !(maxNorm > 0) {
		return 1
	}
	c := maxNorm / (float32(math.Sqrt(float64(n2))) + 1e-6)
	if c < 1 {
		return c
	}
	return 1
}

// StepIsFinite reports whether an AdamWStep with control values n2 and
// loss updates anything.
func StepIsFinite(n2, loss float32) bool {
	return !math.IsNaN(float64(n2)) && !math.IsInf(float64(n2), 0) &&
		!math.IsNaN(float64(loss)) && !math.IsInf(float64(loss), 0)
}

// MemStats is a backend's tensor memory in bytes.
type MemStats struct {
	Allocated int64
	Peak      int64
}
