package cuda

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/internal/numtest"
)

// A placer makes a tensor of dtype dt holding data, either 16-byte
// aligned (a tensor of its own: Alloc aligns to 256 bytes) or one element
// into a larger one, which no 16-byte access can take.
type placer func(dt engine.DType, data []float32, shape ...int) *engine.Tensor

// TestVectorPathsEmulated runs each vectorised kernel twice on the same
// values, once on aligned tensors (the 16-byte accesses, with a partial
// last chunk where the length is no multiple of 8) and once on views one
// element off (element by element), in F32 and BF16, and checks that the
// results agree bit for bit: which thread takes which element, and the
// order of every sum, are the same on both paths by design (common.cuh's
// load8). The conformance suite's tensors are views at random small
// offsets, so this is what covers the aligned path's arithmetic against
// the scalar one's, which the suite checks against its references.
func TestVectorPathsEmulated(t *testing.T) {
	fakeCUDA(t)
	testVectorPaths(t, newFake(t, 0, GemmF32))
}

func testVectorPaths(t *testing.T, b *Backend) {
	rng := rand.New(rand.NewPCG(7, 8))
	randn := func(n int, scale float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * scale)
		}
		return x
	}
	aligned := func(dt engine.DType, data []float32, shape ...int) *engine.Tensor {
		x := b.Alloc(dt, shape...)
		t.Cleanup(func() { b.Free(x) })
		if data != nil {
			b.Upload(x, data)
		}
		return x
	}
	offset := func(dt engine.DType, data []float32, shape ...int) *engine.Tensor {
		whole := b.Alloc(dt, engine.Elements(shape)+1)
		t.Cleanup(func() { b.Free(whole) })
		x := whole.View(1, shape...)
		b.Upload(x, data)
		return x
	}
	get := func(ts ...*engine.Tensor) []float32 {
		var out []float32
		for _, x := range ts {
			v := make([]float32, x.Len())
			b.Download(v, x)
			out = append(out, v...)
		}
		return out
	}
	const n = 8*37 + 5                // elementwise: whole chunks and a tail
	const rows, h = 5, 8 * 9          // RMSNorm rows
	const tok, heads, half = 6, 3, 16 // RoPE
	const v = 8 * 13                  // cross-entropy's vocabulary
	xs, ys, zs := randn(n, 1), randn(n, 2), randn(n, 1)
	rowsX, rowsR, rowsG, w := randn(rows*h, 2), randn(rows*h, 1), randn(rows*h, 1), randn(h, 0.3)
	for j := range w {
		w[j]++
	}
	ropeX := randn(tok*heads*2*half, 1)
	inv := make([]float32, half)
	for j := range inv {
		inv[j] = float32(1 / float64(int(1)<<(j%12)))
	}
	pos := []int32{0, 1, 2, 0, 1, 7}
	logits, targets := randn(tok*v, 3), []int32{3, 0, v - 1, 17, 50, 8}
	for _, dt := range []engine.DType{engine.F32, engine.BF16} {
		for _, c := range []struct {
			name string
			run  func(put placer) []float32
		}{
			{"Copy", func(put placer) []float32 {
				other := engine.F32
				if dt == engine.F32 {
					other = engine.BF16
				}
				d := put(other, make([]float32, n), n)
				b.Copy(d, put(dt, xs, n))
				return get(d)
			}},
			{"Add", func(put placer) []float32 {
				d := put(dt, make([]float32, n), n)
				b.Add(d, put(dt, xs, n), put(engine.F32, ys, n))
				return get(d)
			}},
			{"Axpy and Scale", func(put placer) []float32 {
				d := put(dt, xs, n)
				b.Axpy(d, 0.375, put(dt, ys, n))
				b.Scale(d, -1.5)
				return get(d)
			}},
			{"SwiGLU", func(put placer) []float32 {
				out, dg, du := put(dt, make([]float32, n), n), put(dt, make([]float32, n), n), put(dt, make([]float32, n), n)
				g, u := put(dt, xs, n), put(dt, ys, n)
				b.SwiGLU(out, g, u)
				b.SwiGLUBackward(dg, du, put(dt, zs, n), g, u)
				return get(out, dg, du)
			}},
			{"RMSNorm", func(put placer) []float32 {
				x, tw := put(dt, rowsX, rows, h), put(engine.F32, w, h)
				out, rstd := put(dt, make([]float32, rows*h), rows, h), put(engine.F32, make([]float32, rows), rows)
				b.RMSNorm(out, rstd, x, tw, 1e-5)
				dx, dw := put(dt, make([]float32, rows*h), rows, h), put(engine.F32, make([]float32, h), h)
				b.RMSNormBackward(dx, dw, put(dt, rowsG, rows, h), x, tw, rstd)
				return get(out, rstd, dx, dw)
			}},
			{"AddRMSNorm", func(put placer) []float32 {
				x, tw := put(dt, rowsX, rows, h), put(engine.F32, w, h)
				out, rstd := put(dt, make([]float32, rows*h), rows, h), put(engine.F32, make([]float32, rows), rows)
				b.AddRMSNorm(out, rstd, x, put(dt, rowsR, rows, h), tw, 1e-5)
				return get(out, rstd, x)
			}},
			{"AddBias and BiasGrad", func(put placer) []float32 {
				y := put(dt, rowsX, rows, h)
				b.AddBias(y, put(dt, w, h))
				db := put(engine.F32, w, h)
				b.BiasGrad(db, put(dt, rowsG, rows, h))
				return get(y, db)
			}},
			{"RoPE", func(put placer) []float32 {
				p := aligned(engine.I32, nil, tok)
				b.UploadInt32(p, pos)
				x, f := put(dt, ropeX, tok, heads, 2*half), put(engine.F32, inv, half)
				b.RoPE(x, p, f)
				y := get(x)
				b.RoPEBackward(x, p, f)
				return append(y, get(x)...)
			}},
			{"CrossEntropy", func(put placer) []float32 {
				tt := aligned(engine.I32, nil, tok)
				b.UploadInt32(tt, targets)
				l, d := put(engine.F32, make([]float32, tok), tok), put(dt, make([]float32, tok*v), tok, v)
				b.CrossEntropy(l, d, put(engine.F32, logits, tok, v), tt, put(engine.F32, []float32{1, 1, 0.5, 0, 1, 2}, tok), 0.25)
				return get(l, d)
			}},
			{"Embedding and its backward", func(put placer) []float32 {
				ids := aligned(engine.I32, nil, 4)
				b.UploadInt32(ids, []int32{4, 0, 4, 2})
				out := put(dt, make([]float32, 4*h), 4, h)
				b.Embedding(out, put(dt, rowsX, rows, h), ids)
				dTable := put(engine.F32, rowsR, rows, h)
				b.EmbeddingBackward(dTable, put(dt, rowsG[:4*h], 4, h), ids)
				return get(out, dTable)
			}},
			{"AdamW", func(put placer) []float32 {
				p, m, vv := put(engine.F32, xs, n), put(engine.F32, zs, n), put(engine.F32, make([]float32, n), n)
				b.AdamW(p, put(engine.F32, ys, n), m, vv, engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3})
				return get(p, m, vv)
			}},
			{"AdamWStep", func(put placer) []float32 {
				p, g, m, vv := put(engine.F32, xs, n), put(engine.F32, ys, n), put(engine.F32, zs, n), put(engine.F32, make([]float32, n), n)
				cp := put(dt, make([]float32, n), n)
				ctl := aligned(engine.F32, []float32{4e4, 1}, 2) // clipped: the norm is 200
				b.AdamWStep([]engine.AdamWTensors{{Param: p, Grad: g, M: m, V: vv, Copy: cp, WeightDecay: 0.1}},
					engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 2}, 1, ctl)
				return get(p, g, m, vv, cp)
			}},
		} {
			t.Run(c.name+" "+dt.String(), func(t *testing.T) {
				want := c.run(offset)
				if err := numtest.Equal(c.run(aligned), want); err != nil {
					t.Errorf("aligned (16-byte accesses) against one element off (element by element): %v", err)
				}
			})
		}
	}
}

// TestLongRowsEmulated checks the float32 sums at the lengths the
// conformance suite's shapes stay below — RMSNorm rows of H = 16384 and
// cross-entropy rows of V = 128256 (Llama 3's vocabulary) — against the
// CPU backend's float64 sums, within the bounds of rmsnorm.cu (rstd
// within 4.5e-7 relative: 1e-6 asked) and crossentropy.cu (the loss
// within 9e-7 absolute, the gradient within 9e-7 of its largest element:
// 2e-6 asked, for the float32 exponentials' own ulp on the CPU too).
func TestLongRowsEmulated(t *testing.T) {
	fakeCUDA(t)
	testLongRows(t, newFake(t, 0, GemmF32))
}

func testLongRows(t *testing.T, gpu *Backend) {
	host := cpu.New(cpu.Options{Threads: 2})
	rng := rand.New(rand.NewPCG(11, 12))
	randn := func(n int, mean, scale float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(mean + rng.NormFloat64()*scale)
		}
		return x
	}
	run := func(b engine.Backend, f func(put func(data []float32, shape ...int) *engine.Tensor) []*engine.Tensor) [][]float32 {
		var ts []*engine.Tensor
		put := func(data []float32, shape ...int) *engine.Tensor {
			x := b.Alloc(engine.F32, shape...)
			if data != nil {
				b.Upload(x, data)
			}
			ts = append(ts, x)
			return x
		}
		var out [][]float32
		for _, x := range f(put) {
			v := make([]float32, x.Len())
			b.Download(v, x)
			out = append(out, v)
		}
		for _, x := range ts {
			b.Free(x)
		}
		return out
	}

	const rows, h = 3, 16384
	x, w := randn(rows*h, 0.5, 2), randn(h, 1, 0.2) // a mean off zero: squares of one sign, large sums
	norm := func(b engine.Backend) [][]float32 {
		return run(b, func(put func([]float32, ...int) *engine.Tensor) []*engine.Tensor {
			out, rstd := put(nil, rows, h), put(nil, rows)
			b.RMSNorm(out, rstd, put(x, rows, h), put(w, h), 1e-5)
			return []*engine.Tensor{rstd, out}
		})
	}
	g, c := norm(gpu), norm(host)
	if err := numtest.Close(g[0], c[0], numtest.Tol{Rel: 1e-6}); err != nil {
		t.Errorf("RMSNorm rstd of rows of %d against the CPU's: %v", h, err)
	}
	if err := numtest.CloseMax(g[1], c[1], 2e-6); err != nil {
		t.Errorf("RMSNorm out of rows of %d against the CPU's: %v", h, err)
	}

	const n, v = 2, 128256
	logits := randn(n*v, 0, 3)
	ce := func(b engine.Backend) [][]float32 {
		return run(b, func(put func([]float32, ...int) *engine.Tensor) []*engine.Tensor {
			tg := b.Alloc(engine.I32, n)
			b.UploadInt32(tg, []int32{17, v - 1})
			defer b.Free(tg)
			l, d := put(nil, n), put(nil, n, v)
			b.CrossEntropy(l, d, put(logits, n, v), tg, put([]float32{1, 0.5}, n), 1)
			return []*engine.Tensor{l, d}
		})
	}
	g, c = ce(gpu), ce(host)
	if err := numtest.Close(g[0], c[0], numtest.Tol{Abs: 1e-6}); err != nil {
		t.Errorf("cross-entropy losses of %d logits against the CPU's: %v", v, err)
	}
	if err := numtest.CloseMax(g[1], c[1], 2e-6); err != nil {
		t.Errorf("cross-entropy gradient of %d logits against the CPU's: %v", v, err)
	}
}

// vectorKernels are the kernels that move 16 bytes a thread at a time
// (common.cuh's load8 and store8) on their aligned path.
var vectorKernels = []string{
	"cast", "add", "axpy", "scale", "swiglu", "swiglu_backward", "rmsnorm", "add_rmsnorm", "rmsnorm_backward_dx",
	"rmsnorm_backward_dw_partial", "rope", "cross_entropy", "embedding", "embedding_backward", "adamw", "adamw_multi",
	"add_bias", "bias_grad_partial",
}

// vectorLoad and vectorStore match PTX's 128-bit accesses of four 32-bit
// values (global or generic).
var (
	vectorLoad  = regexp.MustCompile(`\bld\.(global\.)?(nc\.)?v4\.(u32|b32|f32)\b`)
	vectorStore = regexp.MustCompile(`\bst\.(global\.)?v4\.(u32|b32|f32)\b`)
)

// checkVectorAccesses checks in ptx, the kernels compiled to PTX by the
// real NVRTC (TestKernelsCompileWithNVRTC's PTX compile), that each of
// vectorKernels loads and stores with 128-bit vector instructions (ld.v4
// / st.v4 of mt_v16's four words): what the emulator, which runs the same
// source as C++, cannot tell.
func checkVectorAccesses(t *testing.T, ptx string) {
	t.Helper()
	for _, name := range vectorKernels {
		start := strings.Index(ptx, ".entry "+name+"(")
		if start < 0 {
			t.Errorf("kernel %s is not in the PTX", name)
			continue
		}
		body := ptx[start:]
		if end := strings.Index(body[1:], ".entry "); end >= 0 {
			body = body[:end+1]
		}
		if !vectorLoad.MatchString(body) || !vectorStore.MatchString(body) {
			t.Errorf("kernel %s has no 128-bit vector load and store in its PTX", name)
		}
	}
}
