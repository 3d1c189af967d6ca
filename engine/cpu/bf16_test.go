package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/gemm"
	"github.com/memtrain/memtrain/internal/numtest"
)

// bf16Values are float32s whose rounding to bf16 matters: ties to even
// both ways, just off ties, the largest finite bf16 and what rounds past
// it, subnormals, signed zeros, infinities and NaNs.
var bf16Values = []float32{
	0, float32(math.Copysign(0, -1)), 1, -1, 1.5, 3.14159,
	math.Float32frombits(0x3f808000), // a tie, rounds down to even
	math.Float32frombits(0x3f818000), // a tie, rounds up to even
	math.Float32frombits(0x3f808001), // just past a tie
	math.Float32frombits(0x7f7f7fff), // rounds down to the largest finite bf16
	math.Float32frombits(0x7f7f8000), // rounds up to infinity
	math.MaxFloat32, math.SmallestNonzeroFloat32, 1e-40,
	float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
	math.Float32frombits(0xff800001), // a signalling NaN
}

func TestBF16Tensors(t *testing.T) {
	b := New(Options{Threads: 2})
	before := b.MemStats()
	x := b.Alloc(engine.BF16, 3, 7)
	if x.DType() != engine.BF16 || x.Len() != 21 || x.Bytes() != 42 {
		t.Fatalf("Alloc(BF16, 3, 7) = %v, %d bytes", x, x.Bytes())
	}
	if got := b.MemStats().Allocated - before.Allocated; got != 42 {
		t.Errorf("MemStats counts %d bytes for 21 bf16 elements, want 42", got)
	}
	out := make([]float32, 21)
	b.Download(out, x)
	if err := numtest.Equal(out, make([]float32, len(out))); err != nil {
		t.Fatalf("Alloc'd BF16, want +0: %v", err)
	}

	// Upload rounds as checkpoints.Float32ToBF16, Download widens exactly,
	// and BF16s shares the bit patterns.
	src := make([]float32, 21)
	copy(src, bf16Values)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := len(bf16Values); i < len(src); i++ {
		src[i] = float32(rng.NormFloat64())
	}
	b.Upload(x, src)
	b.Download(out, x)
	bits := BF16s(x)
	widened := make([]float32, len(src))
	for i, v := range src {
		h := checkpoints.Float32ToBF16(v)
		if bits[i] != h {
			t.Errorf("Upload(%g): bits %#04x, want %#04x", v, bits[i], h)
		}
		widened[i] = checkpoints.BF16ToFloat32(h)
	}
	if err := numtest.Equal(out, widened); err != nil {
		t.Errorf("Download, against checkpoints.BF16ToFloat32: %v", err)
	}
	row := x.Row(1)
	BF16s(row)[2] = 0x4040 // 3
	b.Download(out, x)
	if err := numtest.Scalar(float64(out[9]), 3, numtest.Tol{}); err != nil {
		t.Errorf("a write through BF16s of a row did not reach the tensor: %v: %v", out[7:14], err)
	}
	if s := BF16s(row); len(s) != 7 || cap(s) != 7 {
		t.Errorf("BF16s of a row: len %d cap %d, want 7 and 7", len(s), cap(s))
	}

	// Fill rounds its value.
	b.Fill(row, 1.00390625) // 1 + 2⁻⁸, a tie: rounds to 1
	b.Download(out[:7], row)
	if err := numtest.Equal(out[:7], []float32{1, 1, 1, 1, 1, 1, 1}); err != nil {
		t.Fatalf("Fill(1+2⁻⁸), want 1: %v", err)
	}

	// Copy: BF16 to BF16 (overlapping views of one storage too), and
	// casts both ways.
	y := b.Alloc(engine.BF16, 21)
	b.Copy(y, x)
	if fmt.Sprint(BF16s(y)) != fmt.Sprint(BF16s(x)) {
		t.Errorf("Copy BF16 → BF16: %v, want %v", BF16s(y), BF16s(x))
	}
	want := append([]uint16(nil), BF16s(y)[:20]...)
	b.Copy(y.View(1, 20), y.View(0, 20))
	if fmt.Sprint(BF16s(y)[1:]) != fmt.Sprint(want) {
		t.Errorf("overlapping Copy: %v, want %v", BF16s(y)[1:], want)
	}
	f := b.Alloc(engine.F32, 21)
	b.Copy(f, x)
	b.Download(out, x)
	if err := numtest.Equal(Float32s(f), out); err != nil {
		t.Errorf("Copy BF16 → F32: %v", err)
	}
	b.Upload(f, src)
	b.Copy(y, f)
	for i, v := range src {
		if BF16s(y)[i] != checkpoints.Float32ToBF16(v) {
			t.Errorf("Copy F32 → BF16 of %g: %#04x, want %#04x", v, BF16s(y)[i], checkpoints.Float32ToBF16(v))
		}
	}
	ids := b.Alloc(engine.I32, 21)
	mustPanic(t, "I32", func() { b.Copy(ids, x) })
	mustPanic(t, "BF16s: dtype: a f32", func() { BF16s(f) })

	for _, tt := range []*engine.Tensor{x, y, f, ids} {
		b.Free(tt)
	}
	if got := b.MemStats().Allocated; got != before.Allocated {
		t.Errorf("MemStats().Allocated = %d after Free, want %d", got, before.Allocated)
	}
	mustPanic(t, "freed", func() { BF16s(x) })
}

// TestBF16RefusedByKernels checks that the kernels that take no BF16
// tensor — the loss, the reductions and the optimizer, which stay
// float32 in mixed precision — say so, naming themselves; and that the
// misfits of a Gemm with a BF16 operand are still caught.
func TestBF16RefusedByKernels(t *testing.T) {
	b := New(Options{Threads: 1})
	h := b.Alloc(engine.BF16, 2, 4)
	f := b.Alloc(engine.F32, 2, 4)
	one := b.Alloc(engine.F32, 1)
	ids := b.Alloc(engine.I32, 2)
	mustPanic(t, "CrossEntropy: dtype: a bf16 tensor", func() { b.CrossEntropy(b.Alloc(engine.F32, 2), nil, h, ids, b.Alloc(engine.F32, 2), 1) })
	mustPanic(t, "SumSquares: dtype: a bf16 tensor", func() { b.SumSquares(one, h) })
	mustPanic(t, "Sum: dtype: a bf16 tensor", func() { b.Sum(one, h) })
	mustPanic(t, "AdamW: dtype: a bf16 tensor", func() { b.AdamW(h, f, f, f, engine.AdamWParams{Step: 1}) })
	p := engine.GemmParams{M: 2, N: 2, K: 4, Alpha: 1, LDA: 4, LDB: 4, LDC: 2, TransB: true}
	c := b.Alloc(engine.F32, 2, 2)
	mustPanic(t, "Gemm: shape: B needs", func() { b.Gemm(p, f, h.View(0, 7), c) })
	mustPanic(t, "Gemm: shape: A needs", func() { b.Gemm(p, h.View(0, 7), f, c) })
}

// TestBF16InPlace: an in-place kernel on BF16 (RoPE; Add into one of its
// operands; a backward whose dx is its dOut) reads and writes one
// stand-in, as the F32 kernel on the same values would.
func TestBF16InPlace(t *testing.T) {
	b := New(Options{Threads: 2})
	rng := rand.New(rand.NewPCG(9, 9))
	vals := func(n int) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(float32(rng.NormFloat64())))
		}
		return x
	}
	get := func(x *engine.Tensor) []float32 {
		out := make([]float32, x.Len())
		b.Download(out, x)
		return out
	}
	put := func(dt engine.DType, v []float32, shape ...int) *engine.Tensor {
		x := b.Alloc(dt, shape...)
		b.Upload(x, v)
		return x
	}
	round := func(x []float32) []float32 {
		for i, v := range x {
			x[i] = checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(v))
		}
		return x
	}
	x, y := vals(64), vals(64)
	hx, fx := put(engine.BF16, x, 64), put(engine.F32, x, 64)
	b.Add(hx, hx, put(engine.BF16, y, 64))
	b.Add(fx, fx, put(engine.F32, y, 64))
	if err := numtest.Equal(get(hx), round(get(fx))); err != nil {
		t.Errorf("Add in place on BF16: %v", err)
	}
	// RMSNormBackward with dx = dOut.
	const n, hd = 4, 16
	xs, g, w := vals(n*hd), vals(n*hd), vals(hd)
	rstd, tw := b.Alloc(engine.F32, n), put(engine.F32, w, hd)
	b.RMSNorm(b.Alloc(engine.F32, n, hd), rstd, put(engine.F32, xs, n, hd), tw, 1e-5)
	hg, fg := put(engine.BF16, g, n, hd), put(engine.F32, g, n, hd)
	b.RMSNormBackward(hg, b.Alloc(engine.F32, hd), hg, put(engine.BF16, xs, n, hd), tw, rstd)
	b.RMSNormBackward(fg, b.Alloc(engine.F32, hd), fg, put(engine.F32, xs, n, hd), tw, rstd)
	if err := numtest.Equal(get(hg), round(get(fg))); err != nil {
		t.Errorf("RMSNormBackward with dx = dOut on BF16: %v", err)
	}
}

// TestGemmBF16B checks that a BF16 B gives the bits of the same Gemm with
// the widened F32 B: edge tiles, the skinny path, both transposes of
// either operand, row strides past the columns, batches (B shared or
// not), alpha and beta, on 1 and 2 threads, with the Go GEMM, gonum's and
// OpenBLAS's (these two multiplying a widened copy).
func TestGemmBF16B(t *testing.T) {
	impls := map[string]func(threads int) gemm.Impl{
		"go":    func(threads int) gemm.Impl { return gemm.New(threads) },
		"gonum": func(int) gemm.Impl { return gemm.Reference{} },
	}
	if _, err := gemm.Select("openblas", 1); err == nil {
		impls["openblas"] = func(threads int) gemm.Impl { g, _ := gemm.Select("openblas", threads); return g }
	} else {
		t.Logf("OpenBLAS not tested: %v", err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	type shape struct{ m, n, k, batch int }
	shapes := []shape{{1, 1, 1, 1}, {3, 5, 7, 1}, {7, 33, 20, 2}, {16, 100, 64, 1}, {17, 19, 300, 1},
		{70, 66, 9, 3}, {97, 130, 257, 1}, {200, 48, 515, 2}}
	for name, newImpl := range impls {
		for _, threads := range []int{1, 2} {
			b := New(Options{Threads: threads, GEMM: newImpl(threads)})
			for si, s := range shapes {
				if name != "go" && s.m*s.n*s.k*s.batch > 1<<22 {
					continue
				}
				for tr := 0; tr < 4; tr++ {
					tA, tB := tr&1 != 0, tr&2 != 0
					shareB := (si+tr)%3 == 0 && s.batch > 1
					alpha, beta := []float32{1, 0.5, -2}[(si+tr)%3], []float32{0, 1, 0.25}[(si+2*tr)%3]
					ar, ac, br, bc := engine.GemmParams{TransA: tA, TransB: tB, M: s.m, N: s.n, K: s.k}.Stored()
					p := engine.GemmParams{TransA: tA, TransB: tB, M: s.m, N: s.n, K: s.k, Alpha: alpha, Beta: beta,
						LDA: ac + tr, LDB: bc + si%3, LDC: s.n + 1, Batch: s.batch}
					p.StrideA, p.StrideB, p.StrideC = ar*p.LDA+1, br*p.LDB+2, s.m*p.LDC
					if shareB {
						p.StrideB = 0
					}
					nb := (s.batch-1)*p.StrideB + br*p.LDB
					a := upload(b, randn(rng, s.batch*p.StrideA), s.batch*p.StrideA)
					b16 := b.Alloc(engine.BF16, nb)
					b.Upload(b16, randn(rng, nb))
					b32 := b.Alloc(engine.F32, nb)
					b.Copy(b32, b16)
					c0 := randn(rng, s.batch*p.StrideC)
					want, got := upload(b, c0, len(c0)), upload(b, c0, len(c0))
					b.Gemm(p, a, b32, want)
					b.Gemm(p, a, b16, got)
					if err := numtest.Equal(Float32s(got), Float32s(want)); err != nil {
						t.Errorf("%s/threads=%d: %+v: BF16 B differs from the widened F32 B: %v", name, threads, p, err)
					}
					for _, x := range []*engine.Tensor{a, b16, b32, want, got} {
						b.Free(x)
					}
				}
			}
		}
	}
}

// TestGemmBF16BModel checks the two products a frozen weight W [o, k]
// enters: the forward out = in·Wᵀ and the input gradient din = dout·W,
// against W in float32, with threads 1 and 2 giving the same bits.
func TestGemmBF16BModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const n, k, o = 37, 96, 160
	var first [2][]float32
	for _, threads := range []int{1, 2} {
		b := New(Options{Threads: threads})
		w16 := b.Alloc(engine.BF16, o, k)
		b.Upload(w16, randn(rng, o*k))
		w32 := b.Alloc(engine.F32, o, k)
		b.Copy(w32, w16)
		in, dout := upload(b, randn(rng, n*k), n, k), upload(b, randn(rng, n*o), n, o)
		for i, c := range []struct {
			p      engine.GemmParams
			a      *engine.Tensor
			cols   int
			single string
		}{
			{engine.GemmParams{TransB: true, M: n, N: o, K: k, Alpha: 1, LDA: k, LDB: k, LDC: o}, in, o, "forward"},
			{engine.GemmParams{M: n, N: k, K: o, Alpha: 1, LDA: o, LDB: k, LDC: k}, dout, k, "input gradient"},
		} {
			want, got := b.Alloc(engine.F32, n, c.cols), b.Alloc(engine.F32, n, c.cols)
			b.Gemm(c.p, c.a, w32, want)
			b.Gemm(c.p, c.a, w16, got)
			if err := numtest.Equal(Float32s(got), Float32s(want)); err != nil {
				t.Errorf("threads %d: %s: BF16 W differs from the widened F32 W: %v", threads, c.single, err)
			}
			if threads == 1 {
				first[i] = Float32s(got)
			} else if err := numtest.Equal(Float32s(got), first[i]); err != nil {
				t.Errorf("%s: 2 threads differ from 1: %v", c.single, err)
			}
		}
		rng = rand.New(rand.NewPCG(5, 6))
	}
}

// TestGemmBF16Activations checks a Gemm of a BF16 A by a BF16 B (bf16
// activations by a weight's bf16 copy, or by bf16 activations) into a F32
// C: the bits of gemm.GemmBF16 on the same bit patterns, problem by
// problem of a batch, on 1 and 2 threads alike; within float32 rounding of
// the F32 product on the widened values; into a BF16 C, that result
// rounded once; and a BF16 A by a F32 B, the F32 product with A widened.
func TestGemmBF16Activations(t *testing.T) {
	type shape struct{ m, n, k, batch int }
	var first [][]float32
	for _, threads := range []int{1, 2} {
		rng := rand.New(rand.NewPCG(7, 8)) // the same operands on each
		b := New(Options{Threads: threads})
		for si, s := range []shape{{40, 70, 33, 1}, {97, 130, 257, 2}, {200, 48, 515, 1}, {17, 300, 64, 3}, {8, 20, 9, 1}} {
			for tr := 0; tr < 4; tr++ {
				tA, tB := tr&1 != 0, tr&2 != 0
				ar, ac, br, bc := engine.GemmParams{TransA: tA, TransB: tB, M: s.m, N: s.n, K: s.k}.Stored()
				beta := []float32{0, 1, 0.5}[(si+tr)%3]
				p := engine.GemmParams{TransA: tA, TransB: tB, M: s.m, N: s.n, K: s.k, Alpha: 1, Beta: beta,
					LDA: ac + tr%2, LDB: bc + si%2, LDC: s.n + 1, Batch: s.batch}
				p.StrideA, p.StrideB, p.StrideC = ar*p.LDA+1, br*p.LDB, s.m*p.LDC
				na, nb := s.batch*p.StrideA, s.batch*p.StrideB
				a16, b16 := b.Alloc(engine.BF16, na), b.Alloc(engine.BF16, nb)
				b.Upload(a16, randn(rng, na))
				b.Upload(b16, randn(rng, nb))
				a32, b32 := b.Alloc(engine.F32, na), b.Alloc(engine.F32, nb)
				b.Copy(a32, a16)
				b.Copy(b32, b16)
				c0 := randn(rng, s.batch*p.StrideC)
				got := upload(b, c0, len(c0))
				b.Gemm(p, a16, b16, got)
				want := append([]float32(nil), c0...)
				for i := 0; i < s.batch; i++ {
					gemm.GemmBF16(b.gemm, tA, tB, s.m, s.n, s.k, 1, BF16s(a16)[i*p.StrideA:], p.LDA,
						BF16s(b16)[i*p.StrideB:], p.LDB, beta, want[i*p.StrideC:], p.LDC)
				}
				name := fmt.Sprintf("threads %d, %+v", threads, p)
				if err := numtest.Equal(Float32s(got), want); err != nil {
					t.Errorf("%s: BF16 A·B differs from gemm.GemmBF16: %v", name, err)
				}
				if threads == 1 {
					first = append(first, Float32s(got))
				} else if err := numtest.Equal(Float32s(got), first[0]); err != nil {
					t.Errorf("%s: 2 threads differ from 1: %v", name, err)
				}
				if threads == 2 {
					first = first[1:]
				}
				ref := upload(b, c0, len(c0))
				b.Gemm(p, a32, b32, ref)
				if err := numtest.Close(Float32s(got), Float32s(ref), numtest.Tol{Abs: 1e-4, Rel: 1e-4}); err != nil {
					t.Fatalf("%s: C against the F32 product: %v", name, err)
				}
				// Into a BF16 C: the F32 result rounded once.
				c16 := b.Alloc(engine.BF16, len(c0))
				b.Upload(c16, c0)
				wide := b.Alloc(engine.F32, len(c0))
				b.Copy(wide, c16)
				b.Gemm(p, a16, b16, wide)
				b.Gemm(p, a16, b16, c16)
				for i, v := range Float32s(wide) {
					if BF16s(c16)[i] != checkpoints.Float32ToBF16(v) {
						t.Fatalf("%s: BF16 C[%d] = %#04x, want %g rounded", name, i, BF16s(c16)[i], v)
					}
				}
				// A BF16 A by a F32 B: A widened.
				mixed, plain := upload(b, c0, len(c0)), upload(b, c0, len(c0))
				b.Gemm(p, a16, b32, mixed)
				b.Gemm(p, a32, b32, plain)
				if err := numtest.Equal(Float32s(mixed), Float32s(plain)); err != nil {
					t.Errorf("%s: BF16 A by F32 B differs from the widened A: %v", name, err)
				}
				for _, x := range []*engine.Tensor{a16, b16, a32, b32, got, ref, c16, wide, mixed, plain} {
					b.Free(x)
				}
			}
		}
	}
}
