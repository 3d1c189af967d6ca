package enginetest

import (
	"fmt"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
)

// testBF16 checks BF16 tensors: zero-filled by Alloc and counted at 2
// bytes an element, Upload rounding to nearest even exactly as
// checkpoints.Float32ToBF16, Download widening exactly, Fill, and Copy
// between BF16 tensors and to and from F32 ones.
func testBF16(h *harness) {
	be := h.be
	before := be.MemStats().Allocated
	z := be.Alloc(engine.BF16, 5, 3)
	if z.DType() != engine.BF16 || z.Len() != 15 {
		h.t.Fatalf("Alloc(BF16, 5, 3) gave %v", z)
	}
	if grew := be.MemStats().Allocated - before; grew < 30 || grew >= 60 {
		h.t.Errorf("MemStats().Allocated grew by %d for 15 bf16 elements, want 30 (2 bytes each) or a little more", grew)
	}
	for i, v := range h.get(z) {
		if math.Float32bits(v) != 0 {
			h.t.Fatalf("Alloc'd BF16 element %d = %g, want +0", i, v)
		}
	}
	be.Free(z)

	// Values whose rounding matters: ties both ways, just past a tie, the
	// edge of the finite range, subnormals, zeros of both signs,
	// infinities and a NaN; then ordinary ones.
	special := []float32{
		0, float32(math.Copysign(0, -1)), 1, -3.5,
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), math.Float32frombits(0x3f808001),
		math.Float32frombits(0xbf80ffff), math.Float32frombits(0x7f7f7fff), math.Float32frombits(0x7f7f8000),
		math.SmallestNonzeroFloat32, 1e-40, float32(math.Inf(1)), float32(math.Inf(-1)),
	}
	const n = 301
	x := append(special, h.randn(n-len(special), 3)...)
	want := make([]float32, n)
	for i, v := range x {
		want[i] = roundBF16(v)
	}
	t := h.bf16(x, n)
	h.equal("Download of a BF16 tensor after Upload", h.get(t), want)
	nan := h.bf16([]float32{float32(math.NaN())}, 1)
	if v := h.get(nan)[0]; !math.IsNaN(float64(v)) {
		h.t.Errorf("Upload of NaN into a BF16 tensor gave %g", v)
	}

	f := h.bf16(nil, 70001)
	be.Fill(f, 1.00390625) // 1 + 2⁻⁸: a tie, to 1
	h.equal("Fill of a BF16 tensor", h.get(f), fill(70001, 1))

	dst := h.bf16(h.randn(n, 1), n)
	be.Copy(dst, t)
	h.equal("Copy BF16 → BF16", h.get(dst), want)
	wide := h.nan(n)
	be.Copy(wide, t)
	h.equal("Copy BF16 → F32", h.get(wide), want)
	narrow := h.bf16(nil, n)
	be.Copy(narrow, h.f32(x, n))
	h.equal("Copy F32 → BF16", h.get(narrow), want)
}

// testGemmBF16B checks Gemm by a BF16 B (A and C F32), the products a
// frozen bf16 weight enters: against the float64 product with B's
// values as the tensor holds them (rounded to bf16), for every transpose,
// padded rows, batches with B's stride or a shared B, alpha and beta, a
// Beta = 0 over NaN and K = 0; the model's two shapes by name.
func testGemmBF16B(h *harness) {
	sizes := [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 13, 33}, {64, 3, 70}, {2, 19, 1}, {70, 66, 9}, {20, 40, 300}}
	coefs := [][2]float32{{1, 0}, {0.5, 1}, {-1.25, 0.75}, {1, 1}}
	for si, s := range sizes {
		for tr := 0; tr < 4; tr++ {
			m, n, k := s[0], s[1], s[2]
			tA, tB := tr&1 != 0, tr&2 != 0
			batch := 1 + 2*((si+tr)%2)
			alpha, beta := coefs[(si+tr)%len(coefs)][0], coefs[(si+tr)%len(coefs)][1]
			name := fmt.Sprintf("Gemm by BF16 B %dx%dx%d tA=%v tB=%v batch %d alpha %g beta %g", m, n, k, tA, tB, batch, alpha, beta)
			h.checkGemmBF16B(name, m, n, k, tA, tB, batch, si%3 == 1, alpha, beta, false)
		}
	}
	h.checkGemmBF16B("Gemm by BF16 B, beta 0 over NaN", 9, 21, 14, false, true, 2, false, 1, 0, true)
	// The model's products with a weight W [o, k]: the forward
	// out = in·Wᵀ and the input gradient din = dout·W.
	const rows, o, k = 37, 48, 40
	h.checkGemmBF16B("Gemm by BF16 W, forward in·Wᵀ", rows, o, k, false, true, 1, false, 1, 0, false)
	h.checkGemmBF16B("Gemm by BF16 W, input gradient dout·W", rows, k, o, false, false, 1, false, 1, 0, false)

	// K = 0: C = Beta·C, B not read.
	c0 := h.randn(6, 1)
	c := h.f32(c0, 2, 3)
	h.be.Gemm(engine.GemmParams{M: 2, N: 3, K: 0, Alpha: 1, Beta: 0.5, LDA: 1, LDB: 3, LDC: 3}, h.f32(nil, 1), h.bf16(nil, 1), c)
	want := make([]float64, 6)
	for i := range want {
		want[i] = 0.5 * float64(c0[i])
	}
	h.close("Gemm by BF16 B, K=0", h.get(c), want, tolElem)
}

// checkGemmBF16B is checkGemm with B a BF16 tensor (its padding a NaN,
// which must not be read), shared by the batch (stride 0) if shareB.
func (h *harness) checkGemmBF16B(name string, m, n, k int, tA, tB bool, batch int, shareB bool, alpha, beta float32, nanC bool) {
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	nan := float32(math.NaN())
	A := h.gemmOperand(ar, ac, batch, nan)
	bBatch := batch
	if shareB {
		bBatch = 1
	}
	B := h.gemmOperand(br, bc, bBatch, nan)
	strideB := B.stride
	if shareB {
		strideB = 0
	}
	C := h.gemmOperand(m, n, batch, 777)
	if nanC {
		for i := range C.data {
			if C.inside(i) {
				C.data[i] = nan
			}
		}
	}
	p := engine.GemmParams{TransA: tA, TransB: tB, M: m, N: n, K: k, Alpha: alpha, Beta: beta,
		LDA: A.ld, LDB: B.ld, LDC: C.ld, Batch: batch, StrideA: A.stride, StrideB: strideB, StrideC: C.stride}
	ta, tb, tc := h.f32(A.data, len(A.data)), h.bf16(B.data, len(B.data)), h.f32(C.data, len(C.data))
	h.be.Gemm(p, ta, tb, tc)

	want := f64(C.data)
	a64 := f64(A.data)
	b64 := make([]float64, len(B.data))
	for i, v := range B.data {
		b64[i] = float64(checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(v)))
	}
	for i := 0; i < batch; i++ {
		refGemm(tA, tB, m, n, k, float64(alpha), a64[i*A.stride:], A.ld, b64[i*strideB:], B.ld,
			float64(beta), want[i*C.stride:], C.ld)
	}
	got := h.get(tc)
	var gIn, gPad []float32
	var wIn []float64
	for i := range got {
		if C.inside(i) {
			gIn, wIn = append(gIn, got[i]), append(wIn, want[i])
		} else {
			gPad = append(gPad, got[i])
		}
	}
	h.close(name, gIn, wIn, sqrtTol(tolSum, k))
	for i, v := range gPad {
		if v != 777 {
			h.t.Errorf("%s: padding element %d of C changed to %g", name, i, v)
			break
		}
	}
}

// testEmbeddingBF16 checks Embedding from a BF16 table (a frozen bf16
// embedding under LoRA): the rows widened exactly into an F32 output.
func testEmbeddingBF16(h *harness) {
	const V, H, N = 13, 37, 21
	table := h.randn(V*H, 1)
	for i := range table {
		table[i] = roundBF16(table[i])
	}
	ids := h.ints(N, V)
	out := h.nan(N, H)
	h.be.Embedding(out, h.bf16(table, V, H), h.i32(ids, N))
	want := make([]float32, 0, N*H)
	for _, id := range ids {
		want = append(want, table[int(id)*H:(int(id)+1)*H]...)
	}
	h.equal("Embedding of a BF16 table", h.get(out), want)
}

// bf16Unit is bf16's unit roundoff: 8 significant bits, so rounding to
// nearest even moves a value by at most 2⁻⁸ of itself (2⁻⁹ of the
// power of two above it). It is the tolerance every bf16 output adds to
// its kernel's float32 one, element by element (closeBF16).
const bf16Unit = 1.0 / 256

// closeBF16 checks a kernel's output stored in bf16 against the float64
// reference: each element within bf16Unit·|ref_i| (its one rounding to
// bf16) plus tol·max(max|ref|, floor) (the float32 computation before
// it, as close bounds it).
func (h *harness) closeBF16(what string, got []float32, want []float64, tol, floor float64) {
	h.t.Helper()
	h.within(what, got, want, bf16Unit, tol, floor)
}

// rounded returns x rounded to bf16 (and widened back): the values a BF16
// tensor holds after Upload of x, the inputs the references take.
func rounded(x []float32) []float32 {
	y := make([]float32, len(x))
	for i, v := range x {
		y[i] = roundBF16(v)
	}
	return y
}

// testGemmBF16 checks Gemm of BF16 A and B (bf16 activations by bf16
// weight copies), accumulated in float32, into an F32 C (a weight's
// gradient, the logits) and into a BF16 C (an activation, rounded once):
// every transpose, padded rows, batches, alpha and beta (beta = 1 adds
// into a BF16 C, as a residual does), a Beta = 0 over NaN, against the
// float64 product of the operands as the tensors hold them. A product of
// two bf16 values is exact in float32, so the F32 C is within the
// float32 GEMM's tolerance, tolSum·√K, and the BF16 C within that plus
// its rounding, 2⁻⁸ of each element (closeBF16).
func testGemmBF16(h *harness) {
	sizes := [][3]int{{1, 1, 1}, {3, 5, 7}, {17, 13, 33}, {64, 3, 70}, {2, 19, 1}, {20, 40, 300}}
	coefs := [][2]float32{{1, 0}, {0.5, 1}, {-1.25, 0.75}, {1, 1}}
	for si, s := range sizes {
		for tr := 0; tr < 4; tr++ {
			for _, cdt := range []engine.DType{engine.F32, engine.BF16} {
				m, n, k := s[0], s[1], s[2]
				tA, tB := tr&1 != 0, tr&2 != 0
				batch := 1 + 2*((si+tr)%2)
				alpha, beta := coefs[(si+tr)%len(coefs)][0], coefs[(si+tr)%len(coefs)][1]
				name := fmt.Sprintf("Gemm BF16·BF16→%v %dx%dx%d tA=%v tB=%v batch %d alpha %g beta %g", cdt, m, n, k, tA, tB, batch, alpha, beta)
				h.checkGemmBF16(name, m, n, k, tA, tB, batch, alpha, beta, cdt, false)
			}
		}
	}
	for _, cdt := range []engine.DType{engine.F32, engine.BF16} {
		h.checkGemmBF16(fmt.Sprintf("Gemm BF16·BF16→%v, beta 0 over NaN", cdt), 9, 21, 14, false, true, 2, 1, 0, cdt, true)
	}
}

// checkGemmBF16 is checkGemm with A and B BF16 tensors and C of dtype
// cdt (their padding NaN or a sentinel, which must be neither read nor
// written).
func (h *harness) checkGemmBF16(name string, m, n, k int, tA, tB bool, batch int, alpha, beta float32, cdt engine.DType, nanC bool) {
	h.t.Helper()
	ar, ac := m, k
	if tA {
		ar, ac = k, m
	}
	br, bc := k, n
	if tB {
		br, bc = n, k
	}
	nan := float32(math.NaN())
	A, B := h.gemmOperand(ar, ac, batch, nan), h.gemmOperand(br, bc, batch, nan)
	const pad = 768 // exact in bf16
	C := h.gemmOperand(m, n, batch, pad)
	for i := range C.data {
		if C.inside(i) {
			if nanC {
				C.data[i] = nan
			} else if cdt == engine.BF16 {
				C.data[i] = roundBF16(C.data[i])
			}
		}
	}
	p := engine.GemmParams{TransA: tA, TransB: tB, M: m, N: n, K: k, Alpha: alpha, Beta: beta,
		LDA: A.ld, LDB: B.ld, LDC: C.ld, Batch: batch, StrideA: A.stride, StrideB: B.stride, StrideC: C.stride}
	tc := h.f32(C.data, len(C.data))
	if cdt == engine.BF16 {
		tc = h.bf16(C.data, len(C.data))
	}
	h.be.Gemm(p, h.bf16(A.data, len(A.data)), h.bf16(B.data, len(B.data)), tc)

	want := f64(C.data)
	a64, b64 := f64(rounded(A.data)), f64(rounded(B.data))
	for i := 0; i < batch; i++ {
		refGemm(tA, tB, m, n, k, float64(alpha), a64[i*A.stride:], A.ld, b64[i*B.stride:], B.ld,
			float64(beta), want[i*C.stride:], C.ld)
	}
	got := h.get(tc)
	var gIn []float32
	var wIn []float64
	for i := range got {
		if C.inside(i) {
			gIn, wIn = append(gIn, got[i]), append(wIn, want[i])
		} else if got[i] != pad {
			h.t.Errorf("%s: padding element %d of C changed to %g", name, i, got[i])
			return
		}
	}
	if cdt == engine.BF16 {
		h.closeBF16(name, gIn, wIn, sqrtTol(tolSum, k), 1e-6)
	} else {
		h.close(name, gIn, wIn, sqrtTol(tolSum, k))
	}
}

// testActivationsBF16 checks the kernels that touch activations with
// their activations in BF16 tensors (norm weights, rstd, lse and weight
// gradients F32, as a mixed-precision model holds them): each against
// its float64 reference on the inputs as the bf16 tensors hold them,
// within the F32 case's tolerance plus, for a bf16 output, its one
// rounding, 2⁻⁸ of each element (closeBF16). Outputs start as NaN (or a
// value to accumulate onto).
func testActivationsBF16(h *harness) {
	bf, get := h.bf16, h.get

	// Add, Axpy and Scale, BF16 into BF16 and mixed.
	const n = 1001
	x, y := rounded(h.randn(n, 2)), h.randn(n, 1)
	dst := bf(nil, n)
	h.be.Add(dst, bf(x, n), h.f32(y, n))
	want := make([]float64, n)
	for i := range want {
		want[i] = float64(x[i]) + float64(y[i])
	}
	h.closeBF16("Add BF16+F32→BF16", get(dst), want, tolElem, 1e-6)
	d0 := rounded(h.randn(n, 1))
	acc := bf(d0, n)
	h.be.Axpy(acc, -0.75, bf(x, n))
	for i := range want {
		want[i] = float64(d0[i]) - 0.75*float64(x[i])
	}
	h.closeBF16("Axpy BF16 += α·BF16", get(acc), want, tolElem, 1e-6)
	sc := bf(x, n)
	h.be.Scale(sc, 0.3)
	for i := range want {
		want[i] = 0.3 * float64(x[i])
	}
	h.closeBF16("Scale BF16", get(sc), want, tolElem, 1e-6)

	// Embedding into BF16 rows (from a BF16 table: its bits; from an F32
	// one: rounded once), and its backward from BF16 rows into F32.
	const V, H, N = 13, 37, 21
	table := h.randn(V*H, 1)
	ids := h.ints(N, V)
	ids[N-1] = ids[0]
	tIDs := h.i32(ids, N)
	for _, tdt := range []engine.DType{engine.BF16, engine.F32} {
		out := bf(nil, N, H)
		tt := bf(table, V, H)
		if tdt == engine.F32 {
			tt = h.f32(table, V, H)
		}
		h.be.Embedding(out, tt, tIDs)
		wantRows := make([]float32, 0, N*H)
		for _, id := range ids {
			wantRows = append(wantRows, rounded(table[int(id)*H:(int(id)+1)*H])...)
		}
		h.equal(fmt.Sprintf("Embedding from a %v table into BF16", tdt), get(out), wantRows)
	}
	dOut := rounded(h.randn(N*H, 1))
	dt0 := h.randn(V*H, 1)
	dTable := h.f32(dt0, V, H)
	h.be.EmbeddingBackward(dTable, bf(dOut, N, H), tIDs)
	h.close("EmbeddingBackward from BF16 rows", get(dTable), addScaled(dt0, 1, refEmbeddingBackward(f64(dOut), ids, V, H)), sqrtTol(tolSum, N))

	// RMSNorm: x, out, dOut and dx BF16; w, rstd and dw F32.
	for _, c := range []struct{ N, H int }{{3, 5}, {130, 300}} {
		name := fmt.Sprintf("N=%d H=%d", c.N, c.H)
		xs := rounded(h.randn(c.N*c.H, 2))
		w := make([]float32, c.H)
		for j := range w {
			w[j] = float32(1 + 0.2*h.rng.NormFloat64())
		}
		tx, tw := bf(xs, c.N, c.H), h.f32(w, c.H)
		out, rstd := bf(nil, c.N, c.H), h.nan(c.N)
		h.be.Fill(out, float32(math.NaN()))
		h.be.RMSNorm(out, rstd, tx, tw, 1e-5)
		wo, wr := refRMSNorm(f64(xs), f64(w), c.N, c.H, 1e-5)
		h.closeBF16("RMSNorm BF16 out "+name, get(out), wo, tolElem, 1e-6)
		h.close("RMSNorm BF16 rstd "+name, get(rstd), wr, tolElem)
		g := rounded(h.randn(c.N*c.H, 1))
		dw0 := h.randn(c.H, 1)
		dx, dw := bf(nil, c.N, c.H), h.f32(dw0, c.H)
		h.be.Fill(dx, float32(math.NaN()))
		h.be.RMSNormBackward(dx, dw, bf(g, c.N, c.H), tx, tw, rstd)
		wdx, wdw := refRMSNormBackward(f64(g), f64(xs), f64(w), c.N, c.H, 1e-5)
		h.closeBF16("RMSNormBackward BF16 dx "+name, get(dx), wdx, sqrtTol(tolSum, c.H), 1e-6)
		h.close("RMSNormBackward BF16 dw "+name, get(dw), addScaled(dw0, 1, wdw), sqrtTol(tolSum, c.N))
	}

	// RoPE in place on BF16, both directions.
	{
		const N, heads, D = 9, 3, 16
		pos := h.ints(N, 4096)
		inv := ropeInvFreq(D, 10000)
		tPos, tInv := h.i32(pos, N), h.f32(inv, D/2)
		xr := rounded(h.randn(N*heads*D, 1))
		tx := bf(xr, N, heads, D)
		h.be.RoPE(tx, tPos, tInv)
		h.closeBF16("RoPE BF16", get(tx), refRoPE(f64(xr), pos, inv, heads, 1), tolElem, 1e-6)
		tx = bf(xr, N, heads, D)
		h.be.RoPEBackward(tx, tPos, tInv)
		h.closeBF16("RoPEBackward BF16", get(tx), refRoPE(f64(xr), pos, inv, heads, -1), tolElem, 1e-6)
	}

	// SwiGLU and its backward on BF16.
	{
		gate, up := rounded(h.randn(n, 3)), rounded(h.randn(n, 1))
		tg, tu := bf(gate, n), bf(up, n)
		out := bf(nil, n)
		h.be.SwiGLU(out, tg, tu)
		h.closeBF16("SwiGLU BF16", get(out), refSwiGLU(f64(gate), f64(up)), tolElem, 1e-6)
		do := rounded(h.randn(n, 1))
		dg, du := bf(nil, n), bf(nil, n)
		h.be.SwiGLUBackward(dg, du, bf(do, n), tg, tu)
		wg, wu := refSwiGLUBackward(f64(do), f64(gate), f64(up))
		h.closeBF16("SwiGLUBackward BF16 dGate", get(dg), wg, tolElem, 1e-6)
		h.closeBF16("SwiGLUBackward BF16 dUp", get(du), wu, tolElem, 1e-6)
	}

	// Attention on BF16 q, k, v and out (lse F32), its backward from a
	// BF16 dOut and the BF16 out into BF16 gradients (δ from out as
	// stored: refAttentionBackwardOut), and cached attention.
	// The last two have sliding windows, the one of head size 64 over
	// several of every backend's tiles (CUDA's tensor-core kernels take
	// it).
	for _, g := range []geometry{{B: 2, T: 5, heads: 4, kvHeads: 2, D: 8}, {B: 1, T: 70, heads: 4, kvHeads: 1, D: 16},
		{B: 1, T: 70, heads: 4, kvHeads: 1, D: 16, W: 9}, {B: 1, T: 140, heads: 2, kvHeads: 1, D: 64, W: 37}} {
		name := fmt.Sprintf("%+v", g)
		q, k, v := rounded(h.randn(g.qLen(), 1.5)), rounded(h.randn(g.kvLen(), 1.5)), rounded(h.randn(g.kvLen(), 1))
		tq, tk, tv := bf(q, g.B, g.T, g.heads, g.D), bf(k, g.B, g.T, g.kvHeads, g.D), bf(v, g.B, g.T, g.kvHeads, g.D)
		out, lse := bf(nil, g.B, g.T, g.heads, g.D), h.nan(g.B, g.heads, g.T)
		h.be.Attention(out, lse, tq, tk, tv, g.W)
		wo, wl := refAttention(f64(q), f64(k), f64(v), g)
		h.closeBF16("Attention BF16 out "+name, get(out), wo, sqrtTol(tolSum, g.T+g.D), 1e-6)
		h.close("Attention BF16 lse "+name, get(lse), wl, sqrtTol(tolSum, g.D))

		do := rounded(h.randn(g.qLen(), 1))
		dq, dk, dv := bf(nil, g.B, g.T, g.heads, g.D), bf(nil, g.B, g.T, g.kvHeads, g.D), bf(nil, g.B, g.T, g.kvHeads, g.D)
		h.be.AttentionBackward(dq, dk, dv, bf(do, g.B, g.T, g.heads, g.D), tq, tk, tv, out, lse, g.W)
		wq, wk, wv := refAttentionBackwardOut(f64(do), f64(q), f64(k), f64(v), f64(get(out)), g)
		tol := sqrtTol(tolSum, g.T*g.heads/g.kvHeads+g.D)
		floor := maxAbs(wv) * math.Max(maxAbs(f64(k)), maxAbs(f64(q))) / math.Sqrt(float64(g.D))
		h.closeBF16("AttentionBackward BF16 dq "+name, get(dq), wq, tol, floor)
		h.closeBF16("AttentionBackward BF16 dk "+name, get(dk), wk, tol, floor)
		h.closeBF16("AttentionBackward BF16 dv "+name, get(dv), wv, tol, 1e-6)

		kvOut := bf(nil, g.B, g.T, g.heads, g.D)
		h.be.AttentionKV(kvOut, tq, tk, tv, h.i32(make([]int32, g.B), g.B), g.W)
		h.closeBF16("AttentionKV BF16 prefill "+name, get(kvOut), wo, sqrtTol(tolSum, g.T+g.D), 1e-6)
	}
}

// testAdamWStepCopy checks AdamWStep's refresh of a BF16 copy of each
// parameter (a mixed-precision model's weights): after a step the copy
// holds the updated float32 parameter rounded to nearest even, bit for
// bit, and a skipped step (a non-finite norm) leaves it alone.
func testAdamWStepCopy(h *harness) {
	sizes := []int{1, 4097, 70001}
	hp := engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	var ts []engine.AdamWTensors
	for i, n := range sizes {
		ts = append(ts, engine.AdamWTensors{Param: h.f32(h.randn(n, 1), n), Grad: h.f32(h.randn(n, 0.3), n),
			M: h.f32(nil, n), V: h.f32(nil, n), Copy: h.bf16(nil, n), WeightDecay: float32(i) * 0.05})
	}
	for s, loss := range []float32{2.5, float32(math.NaN()), 2.5} {
		hp.Step = s + 1
		before := make([][]float32, len(ts))
		for i, t := range ts {
			before[i] = h.get(t.Copy)
		}
		h.be.AdamWStep(ts, hp, 0.5, h.f32([]float32{4, loss}, 2))
		for i, t := range ts {
			what := fmt.Sprintf("AdamWStep copy, step %d, tensor %d", s+1, i)
			if math.IsNaN(float64(loss)) {
				h.equal(what+" (skipped: unchanged)", h.get(t.Copy), before[i])
			} else {
				h.equal(what, h.get(t.Copy), rounded(h.get(t.Param)))
			}
		}
	}
}

// testCrossEntropyBF16 checks CrossEntropy into a BF16 dLogits (mixed
// precision's head gradient): the gradient computed in float32 and
// rounded once, so bit for bit the F32 dLogits of the same call rounded
// to bf16 — weight-0 rows zero, and the losses unchanged.
func testCrossEntropyBF16(h *harness) {
	for _, c := range []struct {
		n, v    int
		weights []float32
		scale   float32
	}{
		{6, 11, []float32{1, 0, 0.5, 2, 0, 1}, 0.25},
		{3, 5003, []float32{1, 1, 1}, 1},
		{5, 32000, []float32{0.5, 1, 0, 1, 3}, 1.0 / 4096},
	} {
		name := fmt.Sprintf("N=%d V=%d", c.n, c.v)
		logits := h.randn(c.n*c.v, 3)
		targets := h.ints(c.n, c.v)
		for i, w := range c.weights {
			if w == 0 {
				targets[i] = -1 // padding
			}
		}
		tl, tt, tw := h.f32(logits, c.n, c.v), h.i32(targets, c.n), h.f32(c.weights, c.n)
		lossF, dF := h.nan(c.n), h.nan(c.n, c.v)
		h.be.CrossEntropy(lossF, dF, tl, tt, tw, c.scale)
		lossH, dH := h.nan(c.n), h.bf16(fill(c.n*c.v, float32(math.NaN())), c.n, c.v)
		h.be.CrossEntropy(lossH, dH, tl, tt, tw, c.scale)
		want, got := rounded(h.get(dF)), h.get(dH)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				h.t.Errorf("CrossEntropy %s: bf16 dLogits[%d] = %g, want %g (the float32 gradient rounded)", name, i, got[i], want[i])
				break
			}
		}
		gl, wl := h.get(lossH), h.get(lossF)
		for i := range wl {
			if math.Float32bits(gl[i]) != math.Float32bits(wl[i]) {
				h.t.Errorf("CrossEntropy %s: loss[%d] = %g with a bf16 dLogits, %g with F32", name, i, gl[i], wl[i])
			}
		}
	}
}
