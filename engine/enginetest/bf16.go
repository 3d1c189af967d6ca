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
