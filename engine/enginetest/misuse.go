package enginetest

import (
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
)

// Misuse: every backend refuses arguments that break a method's contract
// by panicking with an *engine.Misuse of the method's name and the
// fault's class (see engine.Backend), and works on afterwards. Each case
// below makes its tensors with the harness (views at random offsets,
// margins of sentinels: a refused call must not have written anything),
// calls the backend wrongly once, and then checks that a small Add still
// gives the right answer.

// misuseCase is one wrong call.
type misuseCase struct {
	name  string
	op    string // the engine.Backend method that must refuse it
	class engine.MisuseClass
	bf16  bool // needs BF16 tensors (skipped under Config.NoBF16)
	call  func(h *harness)
}

// foreignStorage is a storage of no backend: a tensor on it is foreign to
// every one.
type foreignStorage struct{ n int }

func (s *foreignStorage) Device() engine.Device { return engine.Device{} }
func (s *foreignStorage) DType() engine.DType   { return engine.F32 }
func (s *foreignStorage) Len() int              { return s.n }

// gemm22 is a 2×2×2 product of row-major matrices.
var gemm22 = engine.GemmParams{M: 2, N: 2, K: 2, Alpha: 1, LDA: 2, LDB: 2, LDC: 2}

var misuseCases = []misuseCase{
	{"GemmShape", "Gemm", engine.MisuseShape, false, func(h *harness) {
		// A is 2×3 but holds 5 elements.
		p := engine.GemmParams{M: 2, N: 2, K: 3, Alpha: 1, LDA: 3, LDB: 2, LDC: 2}
		h.be.Gemm(p, h.f32(h.randn(5, 1), 5), h.f32(h.randn(6, 1), 3, 2), h.f32(nil, 2, 2))
	}},
	{"GemmCTooSmall", "Gemm", engine.MisuseShape, false, func(h *harness) {
		h.be.Gemm(gemm22, h.f32(h.randn(4, 1), 2, 2), h.f32(h.randn(4, 1), 2, 2), h.f32(nil, 3))
	}},
	{"GemmNegativeSize", "Gemm", engine.MisuseRange, false, func(h *harness) {
		p := gemm22
		p.M = -1
		h.be.Gemm(p, h.f32(h.randn(4, 1), 2, 2), h.f32(h.randn(4, 1), 2, 2), h.f32(nil, 2, 2))
	}},
	{"GemmLDBelowCols", "Gemm", engine.MisuseRange, false, func(h *harness) {
		p := gemm22
		p.LDA = 1
		h.be.Gemm(p, h.f32(h.randn(4, 1), 2, 2), h.f32(h.randn(4, 1), 2, 2), h.f32(nil, 2, 2))
	}},
	{"GemmCAliasesA", "Gemm", engine.MisuseAlias, false, func(h *harness) {
		a := h.f32(h.randn(4, 1), 2, 2)
		h.be.Gemm(gemm22, a, h.f32(h.randn(4, 1), 2, 2), a)
	}},
	{"GemmCOverlapsB", "Gemm", engine.MisuseAlias, false, func(h *harness) {
		buf := h.f32(h.randn(6, 1), 6)
		h.be.Gemm(gemm22, h.f32(h.randn(4, 1), 2, 2), buf.View(0, 2, 2), buf.View(2, 2, 2))
	}},
	{"GemmBatchOverlapsC", "Gemm", engine.MisuseAlias, false, func(h *harness) {
		p := gemm22
		p.Batch, p.StrideA, p.StrideB, p.StrideC = 2, 4, 4, 0
		h.be.Gemm(p, h.f32(h.randn(8, 1), 2, 2, 2), h.f32(h.randn(8, 1), 2, 2, 2), h.f32(nil, 2, 2))
	}},
	{"GemmI32Operand", "Gemm", engine.MisuseDType, false, func(h *harness) {
		h.be.Gemm(gemm22, h.i32([]int32{1, 2, 3, 4}, 2, 2), h.f32(h.randn(4, 1), 2, 2), h.f32(nil, 2, 2))
	}},
	{"GemmNilTensor", "Gemm", engine.MisuseTensor, false, func(h *harness) {
		h.be.Gemm(gemm22, h.f32(h.randn(4, 1), 2, 2), nil, h.f32(nil, 2, 2))
	}},
	{"AddLength", "Add", engine.MisuseShape, false, func(h *harness) {
		h.be.Add(h.f32(nil, 4), h.f32(h.randn(4, 1), 4), h.f32(h.randn(3, 1), 3))
	}},
	{"AddPartialOverlap", "Add", engine.MisuseAlias, false, func(h *harness) {
		buf := h.f32(h.randn(6, 1), 6)
		h.be.Add(buf.View(0, 4), buf.View(2, 4), h.f32(h.randn(4, 1), 4))
	}},
	{"CopyI32IntoF32", "Copy", engine.MisuseDType, false, func(h *harness) {
		h.be.Copy(h.f32(nil, 3), h.i32([]int32{1, 2, 3}, 3))
	}},
	{"UploadLength", "Upload", engine.MisuseShape, false, func(h *harness) {
		h.be.Upload(h.f32(nil, 4), []float32{1, 2, 3})
	}},
	{"DownloadLength", "Download", engine.MisuseShape, false, func(h *harness) {
		h.be.Download(make([]float32, 5), h.f32(nil, 4))
	}},
	{"EmbeddingIDOutOfRange", "Embedding", engine.MisuseRange, false, func(h *harness) {
		h.be.Embedding(h.f32(nil, 2, 2), h.f32(h.randn(8, 1), 4, 2), h.i32([]int32{1, 4}, 2))
	}},
	{"CrossEntropyTargetOutOfRange", "CrossEntropy", engine.MisuseRange, false, func(h *harness) {
		// Row 0's target −1 is allowed (weight 0), row 1's 3 is not.
		h.be.CrossEntropy(h.f32(nil, 2), h.f32(nil, 2, 3), h.f32(h.randn(6, 1), 2, 3),
			h.i32([]int32{-1, 3}, 2), h.f32([]float32{0, 1}, 2), 1)
	}},
	{"CrossEntropyPartialOverlap", "CrossEntropy", engine.MisuseAlias, false, func(h *harness) {
		buf := h.f32(h.randn(7, 1), 7)
		h.be.CrossEntropy(h.f32(nil, 2), buf.View(1, 2, 3), buf.View(0, 2, 3),
			h.i32([]int32{0, 1}, 2), h.f32([]float32{1, 1}, 2), 1)
	}},
	{"CrossEntropyBF16Logits", "CrossEntropy", engine.MisuseDType, true, func(h *harness) {
		h.be.CrossEntropy(h.f32(nil, 2), nil, h.bf16(h.randn(6, 1), 2, 3),
			h.i32([]int32{0, 1}, 2), h.f32([]float32{1, 1}, 2), 1)
	}},
	{"RMSNormWeightSize", "RMSNorm", engine.MisuseShape, false, func(h *harness) {
		h.be.RMSNorm(h.f32(nil, 2, 4), h.f32(nil, 2), h.f32(h.randn(8, 1), 2, 4), h.f32(h.randn(3, 1), 3), 1e-5)
	}},
	{"RoPEShape", "RoPE", engine.MisuseShape, false, func(h *harness) {
		// invFreq of 2 makes D = 4, but x holds 6 elements for 2 rows.
		h.be.RoPE(h.f32(h.randn(6, 1), 2, 1, 3), h.i32([]int32{0, 1}, 2), h.f32([]float32{1, 0.5}, 2))
	}},
	{"AttentionHeads", "Attention", engine.MisuseShape, false, func(h *harness) {
		// 3 query heads cannot share 2 key/value heads.
		h.be.Attention(h.f32(nil, 1, 2, 3, 4), h.f32(nil, 1, 3, 2),
			h.f32(h.randn(24, 1), 1, 2, 3, 4), h.f32(h.randn(16, 1), 1, 2, 2, 4), h.f32(h.randn(16, 1), 1, 2, 2, 4), 0)
	}},
	{"AttentionOutAliasesQ", "Attention", engine.MisuseAlias, false, func(h *harness) {
		q := h.f32(h.randn(16, 1), 1, 2, 2, 4)
		h.be.Attention(q, h.f32(nil, 1, 2, 2), q, h.f32(h.randn(8, 1), 1, 2, 1, 4), h.f32(h.randn(8, 1), 1, 2, 1, 4), 0)
	}},
	{"AttentionNegativeWindow", "Attention", engine.MisuseRange, false, func(h *harness) {
		h.be.Attention(h.f32(nil, 1, 2, 2, 4), h.f32(nil, 1, 2, 2),
			h.f32(h.randn(16, 1), 1, 2, 2, 4), h.f32(h.randn(8, 1), 1, 2, 1, 4), h.f32(h.randn(8, 1), 1, 2, 1, 4), -1)
	}},
	{"AttentionBackwardNegativeWindow", "AttentionBackward", engine.MisuseRange, false, func(h *harness) {
		q, kv := func() *engine.Tensor { return h.f32(h.randn(16, 1), 1, 2, 2, 4) }, func() *engine.Tensor { return h.f32(h.randn(8, 1), 1, 2, 1, 4) }
		h.be.AttentionBackward(q(), kv(), kv(), q(), q(), kv(), kv(), q(), h.f32(h.randn(4, 1), 1, 2, 2), -3)
	}},
	{"AttentionKVNegativeWindow", "AttentionKV", engine.MisuseRange, false, func(h *harness) {
		h.be.AttentionKV(h.f32(nil, 1, 1, 2, 4), h.f32(h.randn(8, 1), 1, 1, 2, 4),
			h.f32(h.randn(12, 1), 1, 3, 1, 4), h.f32(h.randn(12, 1), 1, 3, 1, 4), h.i32([]int32{1}, 1), -2)
	}},
	{"AttentionKVStartOverruns", "AttentionKV", engine.MisuseRange, false, func(h *harness) {
		// One query at position 3 of a cache of 3.
		h.be.AttentionKV(h.f32(nil, 1, 1, 2, 4), h.f32(h.randn(8, 1), 1, 1, 2, 4),
			h.f32(h.randn(12, 1), 1, 3, 1, 4), h.f32(h.randn(12, 1), 1, 3, 1, 4), h.i32([]int32{3}, 1), 0)
	}},
	{"AdamWZeroStep", "AdamW", engine.MisuseRange, false, func(h *harness) {
		h.be.AdamW(h.f32(h.randn(4, 1), 4), h.f32(h.randn(4, 1), 4), h.f32(nil, 4), h.f32(nil, 4),
			engine.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	}},
	{"AdamWStepZeroStep", "AdamWStep", engine.MisuseRange, false, func(h *harness) {
		ts := []engine.AdamWTensors{{Param: h.f32(h.randn(4, 1), 4), Grad: h.f32(h.randn(4, 1), 4), M: h.f32(nil, 4), V: h.f32(nil, 4)}}
		h.be.AdamWStep(ts, engine.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}, 1, h.f32([]float32{1, 1}, 2))
	}},
	{"AdamWStepControlSize", "AdamWStep", engine.MisuseShape, false, func(h *harness) {
		ts := []engine.AdamWTensors{{Param: h.f32(h.randn(4, 1), 4), Grad: h.f32(h.randn(4, 1), 4), M: h.f32(nil, 4), V: h.f32(nil, 4)}}
		h.be.AdamWStep(ts, engine.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1}, 1, h.f32([]float32{1, 1, 1}, 3))
	}},
	{"SumSquaresIntoTwo", "SumSquares", engine.MisuseShape, false, func(h *harness) {
		h.be.SumSquares(h.f32(nil, 2), h.f32(h.randn(5, 1), 5))
	}},
	// The loss, the reductions and the optimizer take F32 tensors only.
	{"SumSquaresBF16", "SumSquares", engine.MisuseDType, true, func(h *harness) {
		h.be.SumSquares(h.f32(nil, 1), h.bf16(h.randn(5, 1), 5))
	}},
	{"ArgmaxBF16Logits", "Argmax", engine.MisuseDType, true, func(h *harness) {
		h.be.Argmax(h.i32(nil, 2), h.bf16(h.randn(6, 1), 2, 3))
	}},
	{"AdamWBF16Param", "AdamW", engine.MisuseDType, true, func(h *harness) {
		h.be.AdamW(h.bf16(h.randn(4, 1), 4), h.f32(h.randn(4, 1), 4), h.f32(nil, 4), h.f32(nil, 4),
			engine.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1})
	}},
	{"AllocNegative", "Alloc", engine.MisuseRange, false, func(h *harness) {
		h.be.Alloc(engine.F32, 2, -1)
	}},
	{"AllocDType", "Alloc", engine.MisuseDType, false, func(h *harness) {
		h.be.Alloc(engine.DType(99), 2)
	}},
	{"UseAfterFree", "Add", engine.MisuseTensor, false, func(h *harness) {
		x := h.be.Alloc(engine.F32, 3)
		h.be.Free(x)
		h.be.Add(h.f32(nil, 3), x, h.f32(h.randn(3, 1), 3))
	}},
	{"ForeignTensor", "Add", engine.MisuseTensor, false, func(h *harness) {
		x := &engine.Tensor{Storage: &foreignStorage{n: 3}, Shape: []int{3}}
		h.be.Add(h.f32(nil, 3), x, h.f32(h.randn(3, 1), 3))
	}},
	{"ViewOverrun", "Fill", engine.MisuseTensor, false, func(h *harness) {
		x := h.f32(nil, 4)
		h.be.Fill(&engine.Tensor{Storage: x.Storage, Offset: x.Offset, Shape: []int{x.Storage.Len()}}, 1)
	}},
	{"FreeTwice", "Free", engine.MisuseTensor, false, func(h *harness) {
		x := h.be.Alloc(engine.F32, 3)
		h.be.Free(x)
		h.be.Free(x)
	}},
	{"EmptyNegative", "Empty", engine.MisuseRange, false, func(h *harness) {
		h.be.Empty(engine.F32, -2)
	}},
	{"EmptyDType", "Empty", engine.MisuseDType, false, func(h *harness) {
		h.be.Empty(engine.DType(99), 2)
	}},
	{"AddRMSNormResidualSize", "AddRMSNorm", engine.MisuseShape, false, func(h *harness) {
		h.be.AddRMSNorm(h.f32(nil, 2, 4), h.f32(nil, 2), h.f32(h.randn(8, 1), 2, 4), h.f32(h.randn(6, 1), 2, 3),
			h.f32(h.randn(4, 1), 4), 1e-5)
	}},
	{"AddRMSNormResidualAlias", "AddRMSNorm", engine.MisuseAlias, false, func(h *harness) {
		// The residual is the stream it is added into.
		x := h.f32(h.randn(8, 1), 2, 4)
		h.be.AddRMSNorm(h.f32(nil, 2, 4), h.f32(nil, 2), x, x, h.f32(h.randn(4, 1), 4), 1e-5)
	}},
	{"AddRMSNormI32", "AddRMSNorm", engine.MisuseDType, false, func(h *harness) {
		h.be.AddRMSNorm(h.f32(nil, 2, 4), h.f32(nil, 2), h.f32(h.randn(8, 1), 2, 4), h.i32(make([]int32, 8), 2, 4),
			h.f32(h.randn(4, 1), 4), 1e-5)
	}},
	{"AddBiasShape", "AddBias", engine.MisuseShape, false, func(h *harness) {
		// 7 elements are not rows of 3.
		h.be.AddBias(h.f32(h.randn(7, 1), 7), h.f32(h.randn(3, 1), 3))
	}},
	{"AddBiasEmpty", "AddBias", engine.MisuseShape, false, func(h *harness) {
		h.be.AddBias(h.f32(h.randn(6, 1), 2, 3), h.f32(nil, 0))
	}},
	{"AddBiasI32", "AddBias", engine.MisuseDType, false, func(h *harness) {
		h.be.AddBias(h.f32(h.randn(6, 1), 2, 3), h.i32([]int32{1, 2, 3}, 3))
	}},
	{"AddBiasAlias", "AddBias", engine.MisuseAlias, false, func(h *harness) {
		// The bias is y's first row.
		y := h.f32(h.randn(6, 1), 2, 3)
		h.be.AddBias(y, y.View(0, 3))
	}},
	{"BiasGradShape", "BiasGrad", engine.MisuseShape, false, func(h *harness) {
		h.be.BiasGrad(h.f32(nil, 3), h.f32(h.randn(7, 1), 7))
	}},
	{"BiasGradBF16", "BiasGrad", engine.MisuseDType, true, func(h *harness) {
		// The gradient accumulates in float32.
		h.be.BiasGrad(h.bf16(nil, 3), h.f32(h.randn(6, 1), 2, 3))
	}},
	{"BiasGradAlias", "BiasGrad", engine.MisuseAlias, false, func(h *harness) {
		dy := h.f32(h.randn(6, 1), 2, 3)
		h.be.BiasGrad(dy.View(3, 3), dy)
	}},
}

// MisuseCases lists the names of the suite's misuse cases, each run as
// the subtest Misuse/<name>.
func MisuseCases() []string {
	names := make([]string, len(misuseCases))
	for i, c := range misuseCases {
		names[i] = c.name
	}
	return names
}

// testMisuses runs every misuse case on a backend of its own.
func testMisuses(t *testing.T, cfg Config, seed uint64) {
	for i, c := range misuseCases {
		if cfg.NoBF16 && c.bf16 {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			testMisuse(newHarness(t, cfg, seed+uint64(i)), c)
		})
	}
}

// testMisuse makes c's wrong call, checks the panic's value, and then
// that the backend still adds.
func testMisuse(h *harness, c misuseCase) {
	p := func() (p any) {
		defer func() { p = recover() }()
		c.call(h)
		return nil
	}()
	switch m, ok := p.(*engine.Misuse); {
	case p == nil:
		h.t.Errorf("%s: no panic, want an *engine.Misuse of %s (%v)", c.name, c.op, c.class)
	case !ok:
		h.t.Errorf("%s: panic %T %v, want an *engine.Misuse of %s (%v)", c.name, p, p, c.op, c.class)
	default:
		h.t.Log(m)
		if m.Op != c.op || m.Class != c.class {
			h.t.Errorf("%s: Misuse of %s (%v), want %s (%v): %v", c.name, m.Op, m.Class, c.op, c.class, m)
		}
		if m.Backend == "" || !strings.HasPrefix(h.be.Name(), m.Backend) {
			h.t.Errorf("%s: Misuse of backend %q, want a prefix of the backend's name %q: %v", c.name, m.Backend, h.be.Name(), m)
		}
		if m.Detail == "" {
			h.t.Errorf("%s: Misuse without detail: %v", c.name, m)
		}
	}

	// The refusal left the backend working.
	x, y, d := h.f32([]float32{1, 2, 3}, 3), h.f32([]float32{10, 20, 30}, 3), h.nan(3)
	h.be.Add(d, x, y)
	h.equal(c.name+": Add after the refused call", h.get(d), []float32{11, 22, 33})
}
