package llama

import (
	"fmt"
	"sync"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/launch"
	"github.com/memtrain/memtrain/engine/parallel"
	"github.com/memtrain/memtrain/internal/numtest"
)

// recorder is an engine.Backend that records each call that touches a
// tensor (as engine.Kernel) and forwards it to b. It forwards rather than
// embeds, so that a method added to the interface fails to compile here
// until it is recorded: one line below (and a cost rule in engine/cost.go).
// Alloc, Empty and Free are recorded too, so that a step that allocates
// differs from the list, which has no allocations.
type recorder struct {
	b     engine.Backend
	mu    sync.Mutex
	on    bool
	calls []engine.Kernel
}

func (r *recorder) rec(k engine.Kernel) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.calls = append(r.calls, k)
	}
}

func (r *recorder) call(op string, ts ...*engine.Tensor) { r.rec(engine.Call(op, ts...)) }

func (r *recorder) start() { r.mu.Lock(); r.on, r.calls = true, nil; r.mu.Unlock() }

func (r *recorder) Name() string                          { return r.b.Name() }
func (r *recorder) Device() engine.Device                 { return r.b.Device() }
func (r *recorder) Threads() int                          { return r.b.Threads() }
func (r *recorder) MemStats() engine.MemStats             { return r.b.MemStats() }
func (r *recorder) Synchronize() error                    { return r.b.Synchronize() }
func (r *recorder) Free(t *engine.Tensor)                 { r.call("Free", t); r.b.Free(t) }
func (r *recorder) Fill(t *engine.Tensor, v float32)      { r.call("Fill", t); r.b.Fill(t, v) }
func (r *recorder) Copy(dst, src *engine.Tensor)          { r.call("Copy", dst, src); r.b.Copy(dst, src) }
func (r *recorder) Add(dst, a, b *engine.Tensor)          { r.call("Add", dst, a, b); r.b.Add(dst, a, b) }
func (r *recorder) Scale(t *engine.Tensor, alpha float32) { r.call("Scale", t); r.b.Scale(t, alpha) }
func (r *recorder) SumSquares(dst, x *engine.Tensor) {
	r.call("SumSquares", dst, x)
	r.b.SumSquares(dst, x)
}
func (r *recorder) Sum(dst, x *engine.Tensor) { r.call("Sum", dst, x); r.b.Sum(dst, x) }
func (r *recorder) Argmax(out, logits *engine.Tensor) {
	r.call("Argmax", out, logits)
	r.b.Argmax(out, logits)
}
func (r *recorder) SwiGLU(out, gate, up *engine.Tensor) {
	r.call("SwiGLU", out, gate, up)
	r.b.SwiGLU(out, gate, up)
}
func (r *recorder) Embedding(out, table, ids *engine.Tensor) {
	r.call("Embedding", out, table, ids)
	r.b.Embedding(out, table, ids)
}
func (r *recorder) EmbeddingBackward(dTable, dOut, ids *engine.Tensor) {
	r.call("EmbeddingBackward", dTable, dOut, ids)
	r.b.EmbeddingBackward(dTable, dOut, ids)
}
func (r *recorder) Alloc(dt engine.DType, shape ...int) *engine.Tensor {
	r.rec(engine.Kernel{Op: "Alloc", Operands: []engine.Operand{engine.Shaped(dt, shape...)}})
	return r.b.Alloc(dt, shape...)
}
func (r *recorder) Empty(dt engine.DType, shape ...int) *engine.Tensor {
	r.rec(engine.Kernel{Op: "Empty", Operands: []engine.Operand{engine.Shaped(dt, shape...)}})
	return r.b.Empty(dt, shape...)
}
func (r *recorder) Upload(t *engine.Tensor, src []float32) { r.call("Upload", t); r.b.Upload(t, src) }
func (r *recorder) UploadInt32(t *engine.Tensor, src []int32) {
	r.call("UploadInt32", t)
	r.b.UploadInt32(t, src)
}
func (r *recorder) Download(dst []float32, t *engine.Tensor) {
	r.call("Download", t)
	r.b.Download(dst, t)
}
func (r *recorder) DownloadInt32(dst []int32, t *engine.Tensor) {
	r.call("DownloadInt32", t)
	r.b.DownloadInt32(dst, t)
}
func (r *recorder) Gemm(p engine.GemmParams, a, b, c *engine.Tensor) {
	r.rec(engine.GemmCall(p, a, b, c))
	r.b.Gemm(p, a, b, c)
}
func (r *recorder) Axpy(dst *engine.Tensor, alpha float32, x *engine.Tensor) {
	r.call("Axpy", dst, x)
	r.b.Axpy(dst, alpha, x)
}
func (r *recorder) SumSquaresMulti(dst *engine.Tensor, xs []*engine.Tensor) {
	r.rec(engine.SumSquaresMultiCall(dst, xs))
	r.b.SumSquaresMulti(dst, xs)
}
func (r *recorder) AddBias(y, bias *engine.Tensor) { r.call("AddBias", y, bias); r.b.AddBias(y, bias) }
func (r *recorder) BiasGrad(db, dy *engine.Tensor) { r.call("BiasGrad", db, dy); r.b.BiasGrad(db, dy) }
func (r *recorder) RMSNorm(out, rstd, x, w *engine.Tensor, eps float32) {
	r.call("RMSNorm", out, rstd, x, w)
	r.b.RMSNorm(out, rstd, x, w, eps)
}
func (r *recorder) AddRMSNorm(out, rstd, x, residual, w *engine.Tensor, eps float32) {
	r.call("AddRMSNorm", out, rstd, x, residual, w)
	r.b.AddRMSNorm(out, rstd, x, residual, w, eps)
}
func (r *recorder) RMSNormBackward(dx, dw, dOut, x, w, rstd *engine.Tensor) {
	r.call("RMSNormBackward", dx, dw, dOut, x, w, rstd)
	r.b.RMSNormBackward(dx, dw, dOut, x, w, rstd)
}
func (r *recorder) RoPE(x, pos, invFreq *engine.Tensor) {
	r.call("RoPE", x, pos, invFreq)
	r.b.RoPE(x, pos, invFreq)
}
func (r *recorder) RoPEBackward(dx, pos, invFreq *engine.Tensor) {
	r.call("RoPEBackward", dx, pos, invFreq)
	r.b.RoPEBackward(dx, pos, invFreq)
}
func (r *recorder) Attention(out, lse, q, k, v *engine.Tensor, window int) {
	r.rec(engine.AttentionCall("Attention", window, out, lse, q, k, v))
	r.b.Attention(out, lse, q, k, v, window)
}
func (r *recorder) AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse *engine.Tensor, window int) {
	r.rec(engine.AttentionCall("AttentionBackward", window, dq, dk, dv, dOut, q, k, v, out, lse))
	r.b.AttentionBackward(dq, dk, dv, dOut, q, k, v, out, lse, window)
}
func (r *recorder) AttentionKV(out, q, kCache, vCache, start *engine.Tensor, window int) {
	r.rec(engine.AttentionCall("AttentionKV", window, out, q, kCache, vCache, start))
	r.b.AttentionKV(out, q, kCache, vCache, start, window)
}
func (r *recorder) SwiGLUBackward(dGate, dUp, dOut, gate, up *engine.Tensor) {
	r.call("SwiGLUBackward", dGate, dUp, dOut, gate, up)
	r.b.SwiGLUBackward(dGate, dUp, dOut, gate, up)
}
func (r *recorder) CrossEntropy(losses, dLogits, logits, targets, weights *engine.Tensor, scale float32) {
	r.call("CrossEntropy", losses, dLogits, logits, targets, weights)
	r.b.CrossEntropy(losses, dLogits, logits, targets, weights, scale)
}
func (r *recorder) AdamW(param, grad, m, v *engine.Tensor, h engine.AdamWParams) {
	r.call("AdamW", param, grad, m, v)
	r.b.AdamW(param, grad, m, v, h)
}
func (r *recorder) AdamWStep(ts []engine.AdamWTensors, h engine.AdamWParams, maxNorm float32, ctl *engine.Tensor) {
	r.rec(engine.AdamWStepCall(ts, ctl))
	r.b.AdamWStep(ts, h, maxNorm, ctl)
}

// kernelStep is one optimizer step as finetune.TrainStep takes it with
// AdamW (and engine/bench's Trainer with one micro-batch): gradients
// zeroed, the micro-batches' passes with their sums on the device, the
// gradients reduced, the step's sums, one fused AdamWStep clipped at 1,
// and the one read.
type kernelStep struct {
	m    *Model
	ts   []engine.AdamWTensors
	step int
}

func newKernelStep(m *Model) *kernelStep {
	s := &kernelStep{m: m}
	b := m.Backend()
	for _, p := range m.Params() {
		s.ts = append(s.ts, engine.AdamWTensors{Param: p.Value, Grad: p.Grad, Copy: p.Copy,
			M: b.Alloc(engine.F32, p.Value.Shape...), V: b.Alloc(engine.F32, p.Value.Shape...), WeightDecay: 0.1})
	}
	return s
}

func (s *kernelStep) run(micro []Batch) error {
	m := s.m
	s.step++
	m.ZeroGrads()
	sums := m.StepSums(len(micro))
	n := 0
	for _, b := range micro {
		n += b.B * b.T
	}
	for i, b := range micro {
		if err := m.ForwardBackwardSum(b, 1/float32(n), sums, i); err != nil {
			return err
		}
	}
	if err := m.ReduceGradients(); err != nil {
		return err
	}
	if err := m.FinishStep(sums, len(micro)); err != nil {
		return err
	}
	m.Backend().AdamWStep(s.ts, engine.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: s.step}, 1, sums.Control())
	sums.Read()
	return nil
}

// firstDifference is "" when got is want, else where and how they first
// differ.
func firstDifference(got, want []engine.Kernel) string {
	for i := 0; i < min(len(got), len(want)); i++ {
		if !got[i].Equal(want[i]) {
			return fmt.Sprintf("call %d of %d: the engine launched\n\t%v\nthe list has\n\t%v", i, len(got), got[i], want[i])
		}
	}
	switch {
	case len(got) > len(want):
		return fmt.Sprintf("the engine launched %d calls, the list has %d; the first extra is %v", len(got), len(want), got[len(want)])
	case len(got) < len(want):
		return fmt.Sprintf("the engine launched %d calls, the list has %d; the first missing is %v", len(got), len(want), want[len(got)])
	}
	return ""
}

// TestKernelsAreWhatTheStepLaunches records the backend calls of a real
// training step (the second: the first allocates the workspace and the
// step's sums) and holds them equal, call for call, to Kernels' list.
func TestKernelsAreWhatTheStepLaunches(t *testing.T) {
	cases := []struct {
		name      string
		tie       bool
		kvHeads   int
		recompute Recompute
		act       engine.DType
		B, T      int
		micro     int
		headRows  int // dims.headRowsLimit, to run the chunked head; 0 is the model's rule
		family    string
	}{
		{name: "mha f32", kvHeads: 4, act: engine.F32, B: 2, T: 5, micro: 1},
		{name: "gqa f32 recompute", kvHeads: 2, recompute: RecomputeFull, act: engine.F32, B: 2, T: 5, micro: 1},
		{name: "gqa f32 selective", kvHeads: 2, recompute: RecomputeSelective, act: engine.F32, B: 2, T: 5, micro: 1},
		{name: "gqa bf16 tied", tie: true, kvHeads: 2, act: engine.BF16, B: 1, T: 7, micro: 2},
		{name: "mha bf16 recompute chunked head", kvHeads: 4, recompute: RecomputeFull, act: engine.BF16, B: 2, T: 6, micro: 2, headRows: 5},
		{name: "mha bf16 selective tied", tie: true, kvHeads: 4, recompute: RecomputeSelective, act: engine.BF16, B: 2, T: 6, micro: 2},
		{name: "gqa f32 chunked head", kvHeads: 2, act: engine.F32, B: 3, T: 4, micro: 3, headRows: 4},
		{name: "mistral window f32", kvHeads: 2, act: engine.F32, B: 2, T: 6, micro: 1, family: "mistral"},
		{name: "qwen2 bf16 selective", kvHeads: 2, recompute: RecomputeSelective, act: engine.BF16, B: 2, T: 5, micro: 2, family: "qwen2"},
		{name: "qwen2 f32 tied", tie: true, kvHeads: 4, act: engine.F32, B: 2, T: 5, micro: 1, family: "qwen2"},
		{name: "qwen3 f32 recompute", kvHeads: 2, recompute: RecomputeFull, act: engine.F32, B: 2, T: 5, micro: 1, family: "qwen3"},
		{name: "qwen3 bf16", kvHeads: 2, act: engine.BF16, B: 1, T: 7, micro: 2, family: "qwen3"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(c.tie, c.kvHeads)
			if c.family != "" {
				cfg = asFamily(cfg, c.family)
			}
			r := &recorder{b: newBackend(1)}
			m := randomModel(t, r, cfg, Options{Recompute: c.recompute, Activations: c.act}, 7)
			defer m.Free()
			m.d.headRowsLimit = c.headRows
			micro := make([]Batch, c.micro)
			for i := range micro {
				micro[i] = randomBatch(cfg, c.B, c.T, uint64(10+i))
			}
			s := newKernelStep(m)
			if err := s.run(micro); err != nil {
				t.Fatal(err)
			}
			r.start()
			if err := s.run(micro); err != nil {
				t.Fatal(err)
			}
			w := Work{Train: true, Recompute: c.recompute, Micro: c.micro, Moments: 2, Batch: c.B, SeqLen: c.T, Activations: c.act}
			k := newKernelList(cfg, w)
			k.d.headRowsLimit = c.headRows
			k.step(w)
			if d := firstDifference(r.calls, k.list); d != "" {
				t.Fatal(d)
			}
			if c.headRows == 0 { // the exported list is the same
				list, err := Kernels(cfg, w)
				if err != nil {
					t.Fatal(err)
				}
				if d := firstDifference(list, k.list); d != "" {
					t.Fatal(d)
				}
			}
		})
	}
}

// TestKernelsOnGrids holds the calls of rank 0 of in-process grids
// equal to the list: data parallelism (the same compute as one rank, the
// norm weights' squares apart in the step's sums), X (the norms'
// statistics over the host, rows rescaled), Y (the vocabulary-parallel
// loss, in chunks of the flattened logits when flatRows is small; the
// masked embedding) and both.
func TestKernelsOnGrids(t *testing.T) {
	cases := []struct {
		shape     comm.Grid
		act       engine.DType
		recompute Recompute
		flatRows  int
		tie       bool
		serial    bool // no overlap: Z's reduce-scatters and their adds at once
		headRows  int  // dims.headRowsLimit: a head in chunks (X = Y = 1)
		family    string
	}{
		{shape: comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}, act: engine.F32},
		{shape: comm.Grid{Data: 2, X: 1, Y: 1, Z: 1}, act: engine.BF16, recompute: RecomputeFull},
		{shape: comm.Grid{Data: 1, X: 2, Y: 1, Z: 1}, act: engine.F32},
		{shape: comm.Grid{Data: 1, X: 2, Y: 1, Z: 1}, act: engine.F32, recompute: RecomputeSelective},
		{shape: comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, act: engine.BF16, recompute: RecomputeSelective},
		{shape: comm.Grid{Data: 2, X: 1, Y: 2, Z: 2}, act: engine.F32, recompute: RecomputeSelective},
		{shape: comm.Grid{Data: 1, X: 1, Y: 2, Z: 1}, act: engine.F32, flatRows: 3},
		{shape: comm.Grid{Data: 2, X: 2, Y: 2, Z: 1}, act: engine.F32, recompute: RecomputeFull},
		{shape: comm.Grid{Data: 1, X: 1, Y: 1, Z: 2}, act: engine.F32},
		{shape: comm.Grid{Data: 1, X: 1, Y: 1, Z: 2}, act: engine.F32, tie: true, headRows: 4},
		{shape: comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, act: engine.F32, headRows: 3},
		{shape: comm.Grid{Data: 1, X: 1, Y: 1, Z: 2}, act: engine.F32, serial: true, tie: true},
		{shape: comm.Grid{Data: 1, X: 2, Y: 2, Z: 2}, act: engine.F32, recompute: RecomputeFull},
		{shape: comm.Grid{Data: 1, X: 1, Y: 2, Z: 2}, act: engine.F32, serial: true},
		{shape: comm.Grid{Data: 2, X: 2, Y: 2, Z: 1}, act: engine.F32, family: "qwen2"},
		{shape: comm.Grid{Data: 1, X: 1, Y: 2, Z: 2}, act: engine.F32, recompute: RecomputeSelective, family: "qwen3"},
		{shape: comm.Grid{Data: 2, X: 1, Y: 1, Z: 2}, act: engine.BF16, family: "qwen2"},
		{shape: comm.Grid{Data: 1, X: 2, Y: 1, Z: 2}, act: engine.F32, family: "mistral"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v %v recompute %v tied %v serial %v head rows %d %s", c.shape, c.act, c.recompute, c.tie, c.serial, c.headRows, c.family), func(t *testing.T) {
			cfg := gridConfig(c.tie)
			if c.family != "" {
				cfg = asFamily(cfg, c.family)
			}
			w := checkpoints.RandomWeights(cfg, 5)
			ov := parallel.AllOverlap()
			if c.serial {
				ov = parallel.Overlap{}
			}
			var got []engine.Kernel
			err := launch.Local(c.shape, ov, func(g *parallel.Grid) error {
				r := &recorder{b: newBackend(1)}
				m, err := New(r, cfg, Options{Parallel: g, Activations: c.act, Recompute: c.recompute})
				if err != nil {
					return err
				}
				defer m.Free()
				m.flatRowsLimit = c.flatRows
				m.d.headRowsLimit = c.headRows
				if err := m.SetWeights(w); err != nil {
					return err
				}
				batch := []Batch{randomBatch(cfg, 2, 5, uint64(3+g.BatchRank()))}
				s := newKernelStep(m)
				if err := s.run(batch); err != nil {
					return err
				}
				r.start()
				if err := s.run(batch); err != nil {
					return err
				}
				if g.World.Rank() == 0 {
					got = r.calls
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wk := Work{Grid: c.shape, Overlap: ov, Train: true, Recompute: c.recompute, Micro: 1, Moments: 2, Batch: 2, SeqLen: 5, Activations: c.act}
			k := newKernelList(cfg, wk)
			k.flatRows = c.flatRows
			k.d.headRowsLimit = c.headRows
			k.step(wk)
			if d := firstDifference(got, k.list); d != "" {
				t.Fatal(d)
			}
		})
	}
}

// TestKernelsRefuse lists what the kernel list does not cover.
func TestKernelsRefuse(t *testing.T) {
	cfg := testConfig(false, 2)
	ok := Work{Train: true, Micro: 1, Moments: 2, Batch: 1, SeqLen: 4}
	if _, err := Kernels(cfg, ok); err != nil {
		t.Fatalf("a one-rank step: %v", err)
	}
	for name, w := range map[string]Work{
		"forward only":  {Micro: 1, Moments: 2, Batch: 1, SeqLen: 4},
		"no tokens":     {Train: true, Micro: 1, Moments: 2, Batch: 1},
		"sgd":           {Train: true, Micro: 1, Batch: 1, SeqLen: 4},
		"adapters":      {Train: true, Micro: 1, Moments: 2, Batch: 1, SeqLen: 4, LoRA: testAdapter(2, false, 0, "q_proj")},
		"x indivisible": {Grid: comm.Grid{Data: 1, X: 3, Y: 1, Z: 1}, Train: true, Micro: 1, Moments: 2, Batch: 1, SeqLen: 4},
	} {
		if _, err := Kernels(cfg, w); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestKernelFLOPsAreTheModelFLOPs ties the list's executed FLOPs to the
// MFU convention's (engine.ModelFLOPsPerToken): without recomputation
// the GEMMs are 6·N a token, N = engine.MatmulParams less the norm
// weights, which the convention (PaLM's non-embedding parameters) counts
// and no GEMM multiplies (forward, input and weight gradients of every
// linear, the head included); the forward attention is the convention's
// 4·L·heads·D·T a token on the causal half of the scores, × (T+1)/(2T);
// the backward 2.5× that. Recomputation adds one forward of the blocks'
// linears but down_proj (the block's output is not needed again) and of
// attention. Selective recomputation adds neither.
func TestKernelFLOPsAreTheModelFLOPs(t *testing.T) {
	for _, rec := range recomputeModes {
		cfg := testConfig(false, 2)
		const B, T, micro = 3, 8, 2
		list, err := Kernels(cfg, Work{Train: true, Recompute: rec, Micro: micro, Moments: 2, Batch: B, SeqLen: T})
		if err != nil {
			t.Fatal(err)
		}
		var gemm, fwd, bwd float64
		for _, k := range list {
			c := k.Cost()
			switch {
			case c.Class == engine.ClassGEMM:
				gemm += c.FLOPs
			case c.Class == engine.ClassAttention && c.Attention.Backward:
				bwd += c.FLOPs
			case c.Class == engine.ClassAttention:
				fwd += c.FLOPs
			}
		}
		tokens := float64(B * T * micro)
		L, H := cfg.NumHiddenLayers, cfg.HiddenSize
		n := float64(engine.MatmulParams(cfg))
		attn := engine.ModelFLOPsPerToken(cfg, T) - 6*n // 12·L·heads·D·T
		n -= float64((2*L + 1) * H)                     // the norms
		blocks := n - float64(cfg.VocabSize*H)          // the head is not recomputed
		wantGEMM, wantFwd := 6*n*tokens, attn/3*tokens*float64(T+1)/float64(2*T)
		if rec == RecomputeFull {
			wantGEMM += 2 * (blocks - float64(L*H*cfg.IntermediateSize)) * tokens
			wantFwd *= 2
		}
		// The counts are integers far below 2⁵³: exact.
		if err := numtest.Equal([]float64{gemm, fwd, bwd}, []float64{wantGEMM, wantFwd, 2.5 * attn / 3 * tokens * float64(T+1) / float64(2*T)}); err != nil {
			t.Errorf("recompute %v: (GEMM, attention forward, backward) FLOPs: %v", rec, err)
		}
	}
}

// TestStepKernelsPasses checks the passes' bounds: each micro-batch's
// calls start with the ids' upload, its backward part with the head's
// first product (into F32 logits), the passes follow each other, and
// the step's sums follow the last.
func TestStepKernelsPasses(t *testing.T) {
	cfg := testConfig(false, 2)
	s, err := StepKernelsOf(cfg, Work{Train: true, Micro: 3, Moments: 2, Batch: 2, SeqLen: 4, Activations: engine.BF16})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Passes) != 3 {
		t.Fatalf("%d passes", len(s.Passes))
	}
	k := newKernelList(cfg, Work{})
	zero := len(k.params().list(k)) // ZeroGrads' fills
	for i, p := range s.Passes {
		if i == 0 && p[0] != zero || i > 0 && p[0] != s.Passes[i-1][2] {
			t.Errorf("pass %d starts at %d", i, p[0])
		}
		if op := s.List[p[0]].Op; op != "UploadInt32" {
			t.Errorf("pass %d starts with %s", i, op)
		}
		if h := s.List[p[1]]; h.Op != "Gemm" || h.Operands[2].DType != engine.F32 || h.Gemm.N != cfg.VocabSize {
			t.Errorf("pass %d's backward part starts with %v", i, h)
		}
	}
	if k := s.List[s.Passes[2][2]]; k.Op != "Sum" {
		t.Errorf("the step's sums start with %v", k)
	}
}
