package engine

import (
	"fmt"
	"slices"
	"strings"
)

// A Kernel is one call of a Backend method as its cost sees it: the
// method's name, its tensor operands' shapes and dtypes in argument order,
// for Gemm its parameters and for the attention methods their window. engine/llama lists the kernels of a
// training step (llama.Kernels) and a test records a real step's calls
// into the same form, so that the list is what the engine launches; the
// performance model (engine/perfmodel) times each one from its Cost.
//
// Operands are the tensor arguments in the order the method declares
// them (a nil tensor, such as CrossEntropy's absent dLogits, is the zero
// Operand). AdamWStep lists each AdamWTensors' Param, Grad, M, V and Copy,
// then ctl; SumSquaresMulti lists dst, then xs.
type Kernel struct {
	Op       string
	Operands []Operand
	// Gemm is the call's parameters, for Op "Gemm" alone.
	Gemm GemmParams
	// Window is the sliding window of an Attention, AttentionBackward or
	// AttentionKV call (0: plain causal).
	Window int
}

// An Operand is a tensor argument's shape and dtype; the zero Operand
// (nil Shape) is an absent tensor.
type Operand struct {
	Shape []int
	DType DType
}

// Shaped is the operand of a tensor of dtype dt and this shape.
func Shaped(dt DType, shape ...int) Operand { return Operand{Shape: shape, DType: dt} }

// OperandOf is t's operand: the zero Operand for nil.
func OperandOf(t *Tensor) Operand {
	if t == nil {
		return Operand{}
	}
	return Operand{Shape: slices.Clone(t.Shape), DType: t.DType()}
}

// Elements is the operand's element count (0 when absent).
func (o Operand) Elements() int {
	if o.Shape == nil {
		return 0
	}
	return Elements(o.Shape)
}

// Bytes is the operand's size in bytes (0 when absent).
func (o Operand) Bytes() float64 { return float64(o.Elements()) * float64(o.DType.Size()) }

func (o Operand) String() string {
	if o.Shape == nil {
		return "nil"
	}
	return fmt.Sprintf("%v%v", o.DType, o.Shape)
}

// Call is the Kernel of a call of method op on tensors ts (not Gemm's:
// GemmCall).
func Call(op string, ts ...*Tensor) Kernel {
	k := Kernel{Op: op, Operands: make([]Operand, len(ts))}
	for i, t := range ts {
		k.Operands[i] = OperandOf(t)
	}
	return k
}

// GemmCall is the Kernel of Gemm(p, a, b, c).
func GemmCall(p GemmParams, a, b, c *Tensor) Kernel {
	k := Call("Gemm", a, b, c)
	k.Gemm = p
	return k
}

// AttentionCall is the Kernel of the attention method op (Attention,
// AttentionBackward or AttentionKV) on tensors ts with this window.
func AttentionCall(op string, window int, ts ...*Tensor) Kernel {
	k := Call(op, ts...)
	k.Window = window
	return k
}

// AdamWStepCall is the Kernel of AdamWStep(ts, …, ctl).
func AdamWStepCall(ts []AdamWTensors, ctl *Tensor) Kernel {
	var args []*Tensor
	for _, t := range ts {
		args = append(args, t.Param, t.Grad, t.M, t.V, t.Copy)
	}
	return Call("AdamWStep", append(args, ctl)...)
}

// SumSquaresMultiCall is the Kernel of SumSquaresMulti(dst, xs).
func SumSquaresMultiCall(dst *Tensor, xs []*Tensor) Kernel {
	return Call("SumSquaresMulti", append([]*Tensor{dst}, xs...)...)
}

// Equal reports whether k and o are the same call: op, operands and, for
// Gemm, parameters, for attention, window.
func (k Kernel) Equal(o Kernel) bool {
	if k.Op != o.Op || k.Gemm != o.Gemm || k.Window != o.Window || len(k.Operands) != len(o.Operands) {
		return false
	}
	for i, a := range k.Operands {
		b := o.Operands[i]
		if a.DType != b.DType || (a.Shape == nil) != (b.Shape == nil) || !slices.Equal(a.Shape, b.Shape) {
			return false
		}
	}
	return true
}

func (k Kernel) String() string {
	ops := make([]string, len(k.Operands))
	for i, o := range k.Operands {
		ops[i] = o.String()
	}
	s := k.Op + "(" + strings.Join(ops, ", ") + ")"
	if k.Op == "Gemm" {
		p := k.Gemm
		s += fmt.Sprintf(" {TransA:%v TransB:%v M:%d N:%d K:%d Alpha:%g Beta:%g LD:%d,%d,%d Batch:%d Strides:%d,%d,%d}",
			p.TransA, p.TransB, p.M, p.N, p.K, p.Alpha, p.Beta, p.LDA, p.LDB, p.LDC, p.Batch, p.StrideA, p.StrideB, p.StrideC)
	}
	if k.Window != 0 {
		s += fmt.Sprintf(" {Window:%d}", k.Window)
	}
	return s
}

// Class is what bounds a kernel's time.
type Class uint8

const (
	// ClassGEMM is a matrix multiply: tensor-core (or FMA) bound at
	// large shapes, memory-bound at degenerate ones.
	ClassGEMM Class = iota
	// ClassAttention is the fused flash attention, forward or backward.
	ClassAttention
	// ClassMemory is an elementwise, reduction or gather kernel: its
	// time is its bytes over the memory bandwidth.
	ClassMemory
	// ClassHost is a copy between host and device (Upload, Download).
	ClassHost
)

func (c Class) String() string {
	switch c {
	case ClassGEMM:
		return "gemm"
	case ClassAttention:
		return "attention"
	case ClassMemory:
		return "memory"
	case ClassHost:
		return "host"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Cost is what one kernel call does: its FLOPs (GEMM and attention only:
// the other kernels' arithmetic hides under their memory traffic, so
// their FLOPs are not counted) and the bytes it moves through device
// memory (host copies: across the host link).
type Cost struct {
	Class Class
	FLOPs float64
	Bytes float64
	// GEMM is the multiply's geometry, for ClassGEMM: M, N, K and the
	// batch, and the dtypes of A, B and C.
	GEMM GEMMShape
	// Attention is the attention call's geometry, for ClassAttention.
	Attention AttentionShape
}

// GEMMShape is a Gemm call's geometry.
type GEMMShape struct {
	M, N, K, Batch int
	A, B, C        DType
}

// AttentionShape is a flash attention call's geometry: B sequences of T
// tokens, Heads query and KVHeads key/value heads of D, causal within a
// sliding Window of keys (0: plain causal); the dtype of q (BF16 runs on
// tensor cores, F32 on scalar FMA kernels).
type AttentionShape struct {
	B, T, Heads, KVHeads, D int
	Window                  int
	Backward                bool
	DType                   DType
}

// Pairs is the (query, key) pairs a causal attention keeps: B·heads·
// T(T+1)/2, or with a window W < T, where query i sees min(i+1, W) keys,
// B·heads·(W(W+1)/2 + (T−W)·W).
func (a AttentionShape) Pairs() float64 {
	T, W := float64(a.T), float64(a.Window)
	per := T * (T + 1) / 2
	if a.Window > 0 && a.Window < a.T {
		per = W*(W+1)/2 + (T-W)*W
	}
	return float64(a.B) * float64(a.Heads) * per
}

// Cost is the kernel's cost. Each rule counts one call of the method on
// its operands, as the CUDA backend's kernels (engine/cuda/kernels) run
// it; bytes count every operand element read once and every output
// written once, at its dtype's size, unless a rule says otherwise:
//
//   - Gemm: 2·M·N·K FLOPs a batch entry; A and B read, C written, and
//     read too when Beta ≠ 0.
//   - Attention: causal, so B·heads·T(T+1)/2 (query, key) pairs (fewer
//     in a sliding window: AttentionShape.Pairs), 2·D
//     FLOPs for each of S = QKᵀ and O = PV: 4·D a pair; q, k, v read,
//     out and lse written.
//   - AttentionBackward: 5 products a pair (S recomputed, dV = PᵀdO,
//     dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀQ), 10·D FLOPs, 2.5× the forward;
//     dOut, q, k, v, out, lse read, dq, dk, dv written.
//   - AttentionKV: decoding, counted as memory: the whole caches read,
//     or with a window W shorter than the cache, W positions of them (a
//     query reads no row outside its window).
//   - CrossEntropy: the logits read three times (the row's maximum, its
//     sum of exponentials, the gradient: cross_entropy's three loops,
//     one row of Llama 3's 128,256-entry vocabulary being 513 KB, past
//     what a block keeps on chip), dLogits written when present, and the
//     per-row targets, weights and losses.
//   - AdamWStep: each parameter's Param, Grad, M, V read, Param, M, V and
//     Copy (when present) written — an unclipped step: clipping writes
//     the gradient back too (4 bytes a parameter more). A split master
//     (no Param, a Copy) has its Copy and Low (Copy's size) read and
//     written; I8 moments their float32 scales, one a block of Int8Block
//     columns of the operand's rows (a part cut mid-block has a piece
//     more, not counted).
//   - Embedding: ids and the looked-up rows (out's size in table's
//     dtype) read, out written; EmbeddingBackward: ids and dOut read,
//     dOut's size of dTable read and written.
//   - RMSNormBackward: dOut, x, w, rstd read, dx written, dw read and
//     written.
//   - AddBias: y read and written in place, the bias read once.
//   - BiasGrad: dy read, db read and written.
//   - RoPE, RoPEBackward, Scale, Axpy's dst: read and written in place.
//   - Sum, SumSquares, SumSquaresMulti, Argmax: inputs read, the small
//     outputs written.
//   - Upload, UploadInt32, Download, DownloadInt32: the tensor's bytes
//     across the host link (ClassHost).
//
// It panics for an op it has no rule for: a Backend method added without
// one is a programming error that the kernel list's test finds.
func (k Kernel) Cost() Cost {
	o := k.Operands
	sum := func(ops ...Operand) float64 {
		s := 0.0
		for _, x := range ops {
			s += x.Bytes()
		}
		return s
	}
	mem := func(b float64) Cost { return Cost{Class: ClassMemory, Bytes: b} }
	switch k.Op {
	case "Gemm":
		p := k.Gemm
		batch := max(p.Batch, 1)
		a, b, c := o[0].DType, o[1].DType, o[2].DType
		bytes := float64(batch) * (float64(p.M*p.K*a.Size()) + float64(p.K*p.N*b.Size()) + float64(p.M*p.N*c.Size()))
		if p.Beta != 0 {
			bytes += float64(batch) * float64(p.M*p.N*c.Size())
		}
		return Cost{Class: ClassGEMM, FLOPs: 2 * float64(batch) * float64(p.M) * float64(p.N) * float64(p.K), Bytes: bytes,
			GEMM: GEMMShape{M: p.M, N: p.N, K: p.K, Batch: batch, A: a, B: b, C: c}}
	case "Attention": // out, lse, q, k, v
		q, kk := o[2].Shape, o[3].Shape
		a := AttentionShape{B: q[0], T: q[1], Heads: q[2], KVHeads: kk[2], D: q[3], Window: k.Window, DType: o[2].DType}
		return Cost{Class: ClassAttention, FLOPs: 4 * float64(a.D) * a.Pairs(), Bytes: sum(o...), Attention: a}
	case "AttentionBackward": // dq, dk, dv, dOut, q, k, v, out, lse
		q, kk := o[4].Shape, o[5].Shape
		a := AttentionShape{B: q[0], T: q[1], Heads: q[2], KVHeads: kk[2], D: q[3], Window: k.Window, Backward: true, DType: o[4].DType}
		return Cost{Class: ClassAttention, FLOPs: 10 * float64(a.D) * a.Pairs(), Bytes: sum(o...), Attention: a}
	case "AttentionKV": // out, q, kCache, vCache, start
		caches := sum(o[2], o[3])
		if tmax := o[2].Shape[1]; k.Window > 0 && k.Window < tmax {
			caches *= float64(k.Window) / float64(tmax)
		}
		return mem(sum(o[0], o[1], o[4]) + caches)
	case "Add", "Copy", "SwiGLU", "SwiGLUBackward", "Fill", "RMSNorm", "AdamW", "Sum", "SumSquares", "SumSquaresMulti", "Argmax":
		b := sum(o...)
		if k.Op == "AdamW" { // param, grad, m, v: three written back
			b += sum(o[0], o[2], o[3])
		}
		return mem(b)
	case "AddRMSNorm": // out, rstd, x, residual, w: x (the stream) read and written back
		return mem(sum(o...) + o[2].Bytes())
	case "Axpy": // dst, x
		return mem(2*o[0].Bytes() + o[1].Bytes())
	case "Scale", "RoPE", "RoPEBackward", "AddBias": // the first operand in place
		return mem(o[0].Bytes() + sum(o...))
	case "BiasGrad": // db, dy: db accumulated
		return mem(2*o[0].Bytes() + o[1].Bytes())
	case "CrossEntropy": // losses, dLogits, logits, targets, weights
		return mem(sum(o[0], o[1], o[3], o[4]) + 3*o[2].Bytes())
	case "Embedding": // out, table, ids
		rows := float64(o[0].Elements()) * float64(o[1].DType.Size())
		return mem(rows + o[0].Bytes() + o[2].Bytes())
	case "EmbeddingBackward": // dTable, dOut, ids
		rows := float64(o[1].Elements()) * float64(o[0].DType.Size())
		return mem(2*rows + o[1].Bytes() + o[2].Bytes())
	case "RMSNormBackward": // dx, dw, dOut, x, w, rstd
		return mem(sum(o...) + o[1].Bytes())
	case "AdamWStep":
		b := 0.0
		for i := 0; i+5 <= len(o)-1; i += 5 {
			p, g, m, v, c := o[i], o[i+1], o[i+2], o[i+3], o[i+4]
			b += sum(p, g, m, v) + sum(p, m, v, c)
			if p.Shape == nil && c.Shape != nil { // a split master: Copy and Low read, written
				b += 3 * c.Bytes()
			}
			if m.DType == I8 { // the pieces' scales of m and v, float32, read and written
				b += 16 * float64(int8BlockCount(m.Shape))
			}
		}
		return mem(b + o[len(o)-1].Bytes())
	case "Upload", "UploadInt32", "Download", "DownloadInt32":
		return Cost{Class: ClassHost, Bytes: o[0].Bytes()}
	}
	panic(fmt.Sprintf("engine: no cost rule for %s", k.Op))
}

// int8BlockCount is the blocks of Int8Block columns of a tensor of this
// shape, a row (its last dimension) at a time.
func int8BlockCount(shape []int) int {
	if len(shape) == 0 {
		return 0
	}
	cols := shape[len(shape)-1]
	return Elements(shape) / max(cols, 1) * ((cols + Int8Block - 1) / Int8Block)
}
