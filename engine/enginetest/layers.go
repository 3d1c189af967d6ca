package enginetest

import (
	"fmt"
	"math"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/internal/numtest"
)

func testEmbedding(h *harness) {
	for _, c := range []struct{ V, H, N int }{{11, 7, 13}, {50, 300, 200}, {3, 1, 5}} {
		name := fmt.Sprintf("V=%d H=%d N=%d", c.V, c.H, c.N)
		table := h.randn(c.V*c.H, 1)
		ids := h.ints(c.N, c.V)
		ids[c.N-1] = ids[0] // a repeated token accumulates
		tIDs := h.i32(ids, c.N)
		out := h.nan(c.N, c.H)
		h.be.Embedding(out, h.f32(table, c.V, c.H), tIDs)
		want := make([]float32, 0, c.N*c.H)
		for _, id := range ids {
			want = append(want, table[int(id)*c.H:(int(id)+1)*c.H]...)
		}
		h.equal("Embedding "+name, h.get(out), want)

		dt0 := h.randn(c.V*c.H, 1)
		dOut := h.randn(c.N*c.H, 1)
		dTable, tdOut := h.f32(dt0, c.V, c.H), h.f32(dOut, c.N, c.H)
		h.be.EmbeddingBackward(dTable, tdOut, tIDs)
		h.be.EmbeddingBackward(dTable, tdOut, tIDs)
		ref := refEmbeddingBackward(f64(dOut), ids, c.V, c.H)
		h.close("EmbeddingBackward twice "+name, h.get(dTable), addScaled(dt0, 2, ref), sqrtTol(tolSum, c.N))
	}
}

func testRMSNorm(h *harness) {
	for _, c := range []struct {
		N, H int
		eps  float32
	}{{3, 5, 1e-5}, {7, 64, 1e-6}, {130, 300, 1e-5}, {1, 3, 1e-5}} {
		name := fmt.Sprintf("N=%d H=%d", c.N, c.H)
		x := h.randn(c.N*c.H, 2)
		w := make([]float32, c.H)
		for j := range w {
			w[j] = float32(1 + 0.2*h.rng.NormFloat64())
		}
		tx, tw := h.f32(x, c.N, c.H), h.f32(w, c.H)
		out, rstd := h.nan(c.N, c.H), h.nan(c.N)
		h.be.RMSNorm(out, rstd, tx, tw, c.eps)
		wantOut, wantR := refRMSNorm(f64(x), f64(w), c.N, c.H, float64(c.eps))
		h.close("RMSNorm out "+name, h.get(out), wantOut, tolElem)
		h.close("RMSNorm rstd "+name, h.get(rstd), wantR, tolElem)

		dOut := h.randn(c.N*c.H, 1)
		dw0 := h.randn(c.H, 1)
		dx, dw := h.nan(c.N, c.H), h.f32(dw0, c.H)
		h.be.RMSNormBackward(dx, dw, h.f32(dOut, c.N, c.H), tx, tw, rstd)
		h.be.RMSNormBackward(dx, dw, h.f32(dOut, c.N, c.H), tx, tw, rstd)
		wantDx, wantDw := refRMSNormBackward(f64(dOut), f64(x), f64(w), c.N, c.H, float64(c.eps))
		h.close("RMSNormBackward dx "+name, h.get(dx), wantDx, sqrtTol(tolSum, c.H))
		h.close("RMSNormBackward dw twice "+name, h.get(dw), addScaled(dw0, 2, wantDw), sqrtTol(tolSum, c.N))
	}
}

// testAddRMSNorm checks AddRMSNorm against its definition on the same
// backend, bit for bit — Add(x, x, residual) then RMSNorm — and against
// the float64 reference of RMSNorm(x + residual) within RMSNorm's
// tolerances plus the sum's rounding (tolElem), for F32 and BF16 streams,
// widths that a GPU's vector accesses take whole (multiples of 8) and
// that they do not, and out = x (in place).
func testAddRMSNorm(h *harness) {
	for _, c := range []struct {
		N, H    int
		dt      engine.DType
		inPlace bool
	}{{3, 5, engine.F32, false}, {7, 64, engine.F32, true}, {130, 300, engine.F32, false}, {4, 1024, engine.F32, false},
		{5, 64, engine.BF16, false}, {3, 40, engine.BF16, true}} {
		name := fmt.Sprintf("N=%d H=%d %v in place %v", c.N, c.H, c.dt, c.inPlace)
		x, res := h.randn(c.N*c.H, 2), h.randn(c.N*c.H, 1)
		w := make([]float32, c.H)
		for j := range w {
			w[j] = float32(1 + 0.2*h.rng.NormFloat64())
		}
		put := h.f32
		if c.dt == engine.BF16 {
			put = h.bf16
		}
		const eps = 1e-5
		tw := h.f32(w, c.H)
		// The definition, on this backend.
		wx, wr := put(x, c.N, c.H), put(res, c.N, c.H)
		wantOut, wantRstd := put(nil, c.N, c.H), h.nan(c.N)
		h.be.Add(wx, wx, wr)
		h.be.RMSNorm(wantOut, wantRstd, wx, tw, eps)

		tx, tr, rstd := put(x, c.N, c.H), put(res, c.N, c.H), h.nan(c.N)
		out := tx
		if !c.inPlace {
			out = put(fill(c.N*c.H, float32(math.NaN())), c.N, c.H)
		}
		h.be.AddRMSNorm(out, rstd, tx, tr, tw, eps)
		h.equal("AddRMSNorm rstd "+name, h.get(rstd), h.get(wantRstd))
		h.equal("AddRMSNorm out "+name, h.get(out), h.get(wantOut))
		if !c.inPlace {
			h.equal("AddRMSNorm stream "+name, h.get(tx), h.get(wx))
		}
		if c.dt == engine.F32 {
			sum := make([]float64, len(x))
			for i := range x {
				sum[i] = float64(x[i]) + float64(res[i])
			}
			refOut, refR := refRMSNorm(sum, f64(w), c.N, c.H, eps)
			h.close("AddRMSNorm out against the reference "+name, h.get(out), refOut, 2*tolElem)
			h.close("AddRMSNorm rstd against the reference "+name, h.get(rstd), refR, 2*tolElem)
		}
	}
}

// ropeInvFreq returns Llama's inverse frequencies base^(−2j/D), in float32.
func ropeInvFreq(d int, base float64) []float32 {
	f := make([]float32, d/2)
	for j := range f {
		f[j] = float32(1 / math.Pow(base, float64(2*j)/float64(d)))
	}
	return f
}

func testRoPE(h *harness) {
	for _, c := range []struct{ N, heads, D int }{{5, 3, 8}, {9, 2, 64}, {1, 1, 2}, {300, 4, 32}} {
		name := fmt.Sprintf("N=%d heads=%d D=%d", c.N, c.heads, c.D)
		pos := h.ints(c.N, 4096)
		pos[0] = 0
		inv := ropeInvFreq(c.D, 10000)
		tPos, tInv := h.i32(pos, c.N), h.f32(inv, c.D/2)
		x := h.randn(c.N*c.heads*c.D, 1)
		tx := h.f32(x, c.N, c.heads, c.D)
		h.be.RoPE(tx, tPos, tInv)
		h.close("RoPE "+name, h.get(tx), refRoPE(f64(x), pos, inv, c.heads, 1), tolElem)

		h.be.RoPEBackward(tx, tPos, tInv)
		h.close("RoPEBackward∘RoPE "+name, h.get(tx), f64(x), tolElem)

		dx := h.randn(len(x), 1)
		tdx := h.f32(dx, c.N, c.heads, c.D)
		h.be.RoPEBackward(tdx, tPos, tInv)
		h.close("RoPEBackward "+name, h.get(tdx), refRoPE(f64(dx), pos, inv, c.heads, -1), tolElem)
	}
}

func testSwiGLU(h *harness) {
	for _, n := range []int{1, 37, 70001} {
		gate, up := h.randn(n, 3), h.randn(n, 1)
		// Saturated gates: σ at ±30 and ±100 must neither overflow nor
		// lose the product.
		for i, v := range []float32{30, -30, 100, -100} {
			if i < n {
				gate[i] = v
			}
		}
		tg, tu := h.f32(gate, n), h.f32(up, n)
		out := h.nan(n)
		h.be.SwiGLU(out, tg, tu)
		h.close(fmt.Sprintf("SwiGLU n=%d", n), h.get(out), refSwiGLU(f64(gate), f64(up)), tolElem)

		dOut := h.randn(n, 1)
		dg, du := h.nan(n), h.nan(n)
		h.be.SwiGLUBackward(dg, du, h.f32(dOut, n), tg, tu)
		wantG, wantU := refSwiGLUBackward(f64(dOut), f64(gate), f64(up))
		h.close(fmt.Sprintf("SwiGLUBackward dGate n=%d", n), h.get(dg), wantG, tolElem)
		h.close(fmt.Sprintf("SwiGLUBackward dUp n=%d", n), h.get(du), wantU, tolElem)
	}
}

// attentionGeometries covers one token, grouped queries (ratios 1, 2, 3
// and 4), head sizes 64 and 128 and small odd ones, B > 1, and sequences
// that span several tiles without filling the last (the CPU's tiles are 64
// positions, the CUDA kernels' 16 or 32 rows).
var attentionGeometries = []geometry{
	{B: 1, T: 1, heads: 2, kvHeads: 1, D: 4},
	{B: 1, T: 1, heads: 4, kvHeads: 4, D: 64},
	{B: 2, T: 5, heads: 4, kvHeads: 2, D: 8},
	{B: 1, T: 67, heads: 3, kvHeads: 1, D: 16},
	{B: 3, T: 9, heads: 6, kvHeads: 6, D: 5},
	{B: 2, T: 130, heads: 2, kvHeads: 1, D: 8},
	{B: 1, T: 70, heads: 4, kvHeads: 1, D: 3},
	{B: 1, T: 129, heads: 2, kvHeads: 2, D: 7},
	{B: 1, T: 200, heads: 8, kvHeads: 2, D: 64},
	{B: 2, T: 97, heads: 4, kvHeads: 4, D: 128},
	// Sliding windows (query i sees keys (i−W, i]): of one key, of three,
	// of 45 (a multiple of no tile size: the window's edge cuts tiles of
	// every backend) and 40, over sequences of several tiles, so that
	// whole key tiles fall outside some rows' windows; and windows of T
	// and past it, plain causal attention.
	{B: 1, T: 130, heads: 4, kvHeads: 2, D: 8, W: 1},
	{B: 2, T: 70, heads: 2, kvHeads: 1, D: 16, W: 3},
	{B: 1, T: 150, heads: 4, kvHeads: 1, D: 8, W: 45},
	{B: 1, T: 140, heads: 2, kvHeads: 2, D: 64, W: 40},
	{B: 1, T: 20, heads: 2, kvHeads: 1, D: 4, W: 20},
	{B: 1, T: 20, heads: 2, kvHeads: 1, D: 4, W: 25},
}

// testAttention checks Attention's out and lse and AttentionBackward's
// gradients against the float64 references. Tolerances, relative to the
// largest reference magnitude (see close):
//
//   - out: tolSum·√(T+D), a softmax over up to T keys and a D-term dot;
//   - lse: tolSum·√D, one dot product's rounding before the log;
//   - dq, dk, dv: tolSum·√(T·group+D), sums over a group's heads and T
//     positions;
//
// and, for the case of large scores, each times max|S|: float32 scores
// of magnitude |S| carry an absolute error of about |S|·ε into the
// exponential, so the probabilities' relative error grows with them.
func testAttention(h *harness) {
	for _, g := range attentionGeometries {
		q, k, v := h.randn(g.qLen(), 1.5), h.randn(g.kvLen(), 1.5), h.randn(g.kvLen(), 1)
		h.checkAttention(fmt.Sprintf("%+v", g), g, q, k, v, 1)
	}
	testAttentionWindowPastT(h)

	// Large scores: every query and key near one shared direction u, so
	// that S ≈ 64·|u|²/√D is several hundred, far past where e^S overflows
	// float32 (88.7). Only a softmax that subtracts its (running) maximum
	// stays finite.
	g := geometry{B: 1, T: 150, heads: 4, kvHeads: 2, D: 16}
	u := h.randn(g.D, 1)
	near := func(n int) []float32 {
		x := h.randn(n, 0.8)
		for i := range x {
			x[i] += 8 * u[i%g.D]
		}
		return x
	}
	q, k, v := near(g.qLen()), near(g.kvLen()), h.randn(g.kvLen(), 1)
	maxS := 0.0
	for i := range g.qLen() / g.D {
		for j := range g.kvLen() / g.D {
			var s float64
			for d := range g.D {
				s += float64(q[i*g.D+d]) * float64(k[j*g.D+d])
			}
			maxS = math.Max(maxS, math.Abs(s)/math.Sqrt(float64(g.D)))
		}
	}
	if maxS < 200 {
		h.t.Fatalf("large-score case: max |S| = %g, want scores past float32's e^88.7", maxS)
	}
	h.checkAttention(fmt.Sprintf("large scores (max |S| %.0f) %+v", maxS, g), g, q, k, v, maxS)
}

// testAttentionWindowPastT requires a window of T or more to be plain
// causal attention bit for bit: the same tiles, in the same order, with
// the same masks, forward and backward.
func testAttentionWindowPastT(h *harness) {
	g := geometry{B: 1, T: 75, heads: 4, kvHeads: 2, D: 8}
	q, k, v, dOut := h.randn(g.qLen(), 1.5), h.randn(g.kvLen(), 1.5), h.randn(g.kvLen(), 1), h.randn(g.qLen(), 1)
	tq, tk, tv := h.f32(q, g.B, g.T, g.heads, g.D), h.f32(k, g.B, g.T, g.kvHeads, g.D), h.f32(v, g.B, g.T, g.kvHeads, g.D)
	tdo := h.f32(dOut, g.B, g.T, g.heads, g.D)
	run := func(window int) [][]float32 {
		out, lse := h.nan(g.B, g.T, g.heads, g.D), h.nan(g.B, g.heads, g.T)
		h.be.Attention(out, lse, tq, tk, tv, window)
		dq, dk, dv := h.nan(g.B, g.T, g.heads, g.D), h.nan(g.B, g.T, g.kvHeads, g.D), h.nan(g.B, g.T, g.kvHeads, g.D)
		h.be.AttentionBackward(dq, dk, dv, tdo, tq, tk, tv, out, lse, window)
		return [][]float32{h.get(out), h.get(lse), h.get(dq), h.get(dk), h.get(dv)}
	}
	causal := run(0)
	for _, w := range []int{g.T, g.T + 1, 1 << 30} {
		for i, got := range run(w) {
			h.equal(fmt.Sprintf("Attention window %d of T %d, %s", w, g.T, []string{"out", "lse", "dq", "dk", "dv"}[i]), got, causal[i])
		}
	}
}

// maxAbs is the largest magnitude in x (0 for none).
func maxAbs(x []float64) float64 {
	m := 0.0
	for _, v := range x {
		m = math.Max(m, math.Abs(v))
	}
	return m
}

// checkAttention runs Attention and AttentionBackward on q, k, v and a
// random dOut and compares every output with the references, the
// tolerances (see testAttention) multiplied by widen.
func (h *harness) checkAttention(name string, g geometry, q, k, v []float32, widen float64) {
	h.t.Helper()
	tq := h.f32(q, g.B, g.T, g.heads, g.D)
	tk := h.f32(k, g.B, g.T, g.kvHeads, g.D)
	tv := h.f32(v, g.B, g.T, g.kvHeads, g.D)
	out, lse := h.nan(g.B, g.T, g.heads, g.D), h.nan(g.B, g.heads, g.T)
	h.be.Attention(out, lse, tq, tk, tv, g.W)
	wantOut, wantL := refAttention(f64(q), f64(k), f64(v), g)
	h.close("Attention out "+name, h.get(out), wantOut, widen*sqrtTol(tolSum, g.T+g.D))
	h.close("Attention lse "+name, h.get(lse), wantL, widen*sqrtTol(tolSum, g.D))

	dOut := h.randn(g.qLen(), 1)
	dq, dk, dv := h.nan(g.B, g.T, g.heads, g.D), h.nan(g.B, g.T, g.kvHeads, g.D), h.nan(g.B, g.T, g.kvHeads, g.D)
	h.be.AttentionBackward(dq, dk, dv, h.f32(dOut, g.B, g.T, g.heads, g.D), tq, tk, tv, out, lse, g.W)
	wq, wk, wv := refAttentionBackward(f64(dOut), f64(q), f64(k), f64(v), g)
	tol := widen * sqrtTol(tolSum, g.T*g.heads/g.kvHeads+g.D)
	// dq and dk sum terms dS·k/√D and dS·q/√D with dS = P⊙(dP − δ), which
	// cancels exactly where a row sees one key (T = 1: P = 1, dP = δ)
	// but not in float32, where dP and δ = rowsum(dOut⊙out) round
	// differently. Their floor is the size of such a term, |dv|·|k|/√D.
	floor := maxAbs(wv) * math.Max(maxAbs(f64(k)), maxAbs(f64(q))) / math.Sqrt(float64(g.D))
	h.closeFloor("AttentionBackward dq "+name, h.get(dq), wq, tol, floor)
	h.closeFloor("AttentionBackward dk "+name, h.get(dk), wk, tol, floor)
	h.close("AttentionBackward dv "+name, h.get(dv), wv, tol)
}

func testAttentionKV(h *harness) {
	const B, tmax, heads, kvHeads, D = 2, 12, 4, 2, 8
	for _, c := range []struct {
		n, window int
		start     []int32
	}{
		{1, 0, []int32{11, 4}}, {3, 0, []int32{0, 7}}, {1, 0, []int32{0, 0}},
		// Sliding windows: of one key, of three, of five over a prompt of
		// three (its queries' windows start at different rows), and of
		// the whole cache and past it.
		{1, 1, []int32{11, 4}}, {1, 3, []int32{11, 1}}, {3, 5, []int32{0, 7}}, {2, 12, []int32{10, 3}}, {1, 40, []int32{11, 0}},
	} {
		name := fmt.Sprintf("n=%d start=%v window=%d", c.n, c.start, c.window)
		kc, vc := h.randn(B*tmax*kvHeads*D, 1.5), h.randn(B*tmax*kvHeads*D, 1)
		// Cache rows past the last query's position, and before the
		// first query's window, must not be read.
		for b, s := range c.start {
			for t := range tmax {
				if t >= windowStart(int(s), c.window) && t < int(s)+c.n {
					continue
				}
				for i := 0; i < kvHeads*D; i++ {
					kc[(b*tmax+t)*kvHeads*D+i] = float32(math.NaN())
					vc[(b*tmax+t)*kvHeads*D+i] = float32(math.NaN())
				}
			}
		}
		q := h.randn(B*c.n*heads*D, 1.5)
		out := h.nan(B, c.n, heads, D)
		h.be.AttentionKV(out, h.f32(q, B, c.n, heads, D), h.f32(kc, B, tmax, kvHeads, D),
			h.f32(vc, B, tmax, kvHeads, D), h.i32(c.start, B), c.window)
		want := refAttentionKV(f64(q), f64(kc), f64(vc), c.start, B, c.n, tmax, heads, kvHeads, D, c.window)
		h.close("AttentionKV "+name, h.get(out), want, sqrtTol(tolSum, tmax+D))
	}

	// Prefill from position 0 is ordinary causal attention, with a window
	// or without.
	for _, W := range []int{0, 3} {
		g := geometry{B: 2, T: 7, heads: 4, kvHeads: 2, D: 8, W: W}
		q, k, v := h.randn(g.qLen(), 1.5), h.randn(g.kvLen(), 1.5), h.randn(g.kvLen(), 1)
		tq := h.f32(q, g.B, g.T, g.heads, g.D)
		tk, tv := h.f32(k, g.B, g.T, g.kvHeads, g.D), h.f32(v, g.B, g.T, g.kvHeads, g.D)
		full, lse := h.nan(g.B, g.T, g.heads, g.D), h.nan(g.B, g.heads, g.T)
		h.be.Attention(full, lse, tq, tk, tv, W)
		kvOut := h.nan(g.B, g.T, g.heads, g.D)
		h.be.AttentionKV(kvOut, tq, tk, tv, h.i32([]int32{0, 0}, 2), W)
		h.close(fmt.Sprintf("AttentionKV prefill = Attention, window %d", W), h.get(kvOut), f64(h.get(full)), sqrtTol(tolSum, g.T+g.D))
	}
}

func testCrossEntropy(h *harness) {
	// Row 1 and row 4 have weight 0 and invalid targets (padding); row 3
	// is shifted by 1000 and row 5 spread ×50, which a naive softmax
	// would overflow.
	const N, V = 6, 11
	logits := h.randn(N*V, 3)
	for j := 0; j < V; j++ {
		logits[3*V+j] += 1000
		logits[5*V+j] *= 50
	}
	targets := h.ints(N, V)
	targets[1], targets[4] = -1, 999
	weights := []float32{1, 0, 0.5, 2, 0, 1}
	h.checkCrossEntropy("N=6 V=11", logits, targets, weights, N, V, 0.25)

	const N2, V2 = 3, 5003
	h.checkCrossEntropy("N=3 V=5003", h.randn(N2*V2, 2), h.ints(N2, V2), fill(N2, 1), N2, V2, 1)
}

func (h *harness) checkCrossEntropy(name string, logits []float32, targets []int32, weights []float32, n, v int, scale float32) {
	tl, tt, tw := h.f32(logits, n, v), h.i32(targets, n), h.f32(weights, n)
	wantL, wantD := refCrossEntropy(f64(logits), targets, f64(weights), n, v, float64(scale))

	losses, dLogits := h.nan(n), h.nan(n, v)
	h.be.CrossEntropy(losses, dLogits, tl, tt, tw, scale)
	gotL, gotD := h.get(losses), h.get(dLogits)
	h.close("CrossEntropy losses "+name, gotL, wantL, tolElem)
	h.close("CrossEntropy dLogits "+name, gotD, wantD, tolElem)
	for i, w := range weights {
		if w != 0 {
			continue
		}
		if gotL[i] != 0 {
			h.t.Errorf("CrossEntropy %s: loss of weight-0 row %d is %g, want 0", name, i, gotL[i])
		}
		for j := 0; j < v; j++ {
			if gotD[i*v+j] != 0 {
				h.t.Errorf("CrossEntropy %s: gradient of weight-0 row %d is %g at %d, want 0", name, i, gotD[i*v+j], j)
				break
			}
		}
	}

	lossOnly := h.nan(n)
	h.be.CrossEntropy(lossOnly, nil, tl, tt, tw, scale)
	h.close("CrossEntropy without dLogits "+name, h.get(lossOnly), wantL, tolElem)
}

func testArgmax(h *harness) {
	check := func(name string, x []float32, n, v int) {
		out := h.i32(fill32(n, -7), n)
		h.be.Argmax(out, h.f32(x, n, v))
		h.equalInt("Argmax "+name, h.getInt(out), refArgmax(x, n, v))
	}
	inf := float32(math.Inf(1))
	check("ties", []float32{
		1, 3, 3, 2,
		5, 5, 5, 5,
		-1, -2, -1, -3,
		-inf, -inf, -inf, -inf,
		0, 0, inf, inf,
	}, 5, 4)
	check("V=1", []float32{4, -2, 0}, 3, 1)
	const N, V = 7, 1000
	x := h.randn(N*V, 1)
	for i := 0; i < N; i++ {
		// A repeated maximum in every row.
		a, b := h.rng.IntN(V), h.rng.IntN(V)
		x[i*V+a], x[i*V+b] = 10, 10
	}
	check("random rows with repeated maxima", x, N, V)
}

func fill32(n int, v int32) []int32 {
	x := make([]int32, n)
	for i := range x {
		x[i] = v
	}
	return x
}

func testAdamW(h *harness) {
	for _, n := range []int{1, 1000, 70001} {
		name := fmt.Sprintf("n=%d", n)
		hp := engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1}
		ref := adamw{lr: float64(hp.LR), beta1: float64(hp.Beta1), beta2: float64(hp.Beta2),
			eps: float64(hp.Eps), wd: float64(hp.WeightDecay)}
		p0 := h.randn(n, 1)
		tp, tm, tv := h.f32(p0, n), h.f32(nil, n), h.f32(nil, n)
		p, m, v := f64(p0), make([]float64, n), make([]float64, n)
		for step := 1; step <= 4; step++ {
			g := h.randn(n, 0.1*float64(step))
			if n > 2 {
				g[0] = 0     // no gradient: only the decay moves it
				g[1] = 1e-10 // eps dominates the denominator
			}
			hp.Step, ref.step = step, step
			h.be.AdamW(tp, h.f32(g, n), tm, tv, hp)
			refAdamW(p, f64(g), m, v, ref)
			h.close(fmt.Sprintf("AdamW param %s step %d", name, step), h.get(tp), p, tolElem)
			h.close(fmt.Sprintf("AdamW m %s step %d", name, step), h.get(tm), m, tolElem)
			h.close(fmt.Sprintf("AdamW v %s step %d", name, step), h.get(tv), v, tolElem)
		}
	}
}

// testSum checks Sum against a float64 sum, signs mixed so that nothing
// cancels by luck.
func testSum(h *harness) {
	for _, n := range []int{1, 5, 100003} {
		x := h.randn(n, 3)
		var want float64
		for _, v := range x {
			want += float64(v)
		}
		dst := h.nan(1)
		h.be.Sum(dst, h.f32(x, n))
		// Accumulated in float64: only the final rounding remains (relative
		// to the sum of magnitudes, which bounds the rounding of each block).
		var mag float64
		for _, v := range x {
			mag += math.Abs(float64(v))
		}
		if err := numtest.Scalar(float64(h.get(dst)[0]), want, numtest.Tol{Abs: 1e-6 * mag}); err != nil {
			h.t.Errorf("Sum n=%d: %v", n, err)
		}
	}
}

// testAdamWStep checks the multi-tensor step against AdamW a tensor on the
// same backend (bit for bit, with the gradients scaled first by
// engine.ClipCoefficient as the step scales them) and against the float64
// reference, and that a non-finite norm or loss changes nothing.
func testAdamWStep(h *harness) {
	sizes := []int{1, 4097, 1000, 70001, 0, 3}
	decays := []float32{0.1, 0, 0.1, 0.01, 0.1, 0}
	hp := engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
	for _, tc := range []struct {
		name    string
		maxNorm float32
		n2Scale float32 // ctl's squared norm = the true one × this
		loss    float32
		skip    bool
	}{
		{"no clipping", 0, 1, 2.5, false},
		{"clip inactive", 1e9, 1, 2.5, false},
		{"clipped", 0.5, 1, 2.5, false},
		{"NaN norm", 0.5, float32(math.NaN()), 2.5, true},
		{"infinite loss", 0.5, 1, float32(math.Inf(1)), true},
		{"NaN loss, no clipping", 0, 1, float32(math.NaN()), true},
	} {
		var step, mirror []engine.AdamWTensors
		var refs [][4][]float64 // p, m, v per tensor
		for i, n := range sizes {
			p0 := h.randn(n, 1)
			step = append(step, engine.AdamWTensors{Param: h.f32(p0, n), Grad: h.f32(nil, n), M: h.f32(nil, n), V: h.f32(nil, n), WeightDecay: decays[i]})
			mirror = append(mirror, engine.AdamWTensors{Param: h.f32(p0, n), Grad: h.f32(nil, n), M: h.f32(nil, n), V: h.f32(nil, n), WeightDecay: decays[i]})
			refs = append(refs, [4][]float64{f64(p0), make([]float64, n), make([]float64, n)})
		}
		for s := 1; s <= 3; s++ {
			hp.Step = s
			var n2 float64
			grads := make([][]float32, len(sizes))
			for i, n := range sizes {
				grads[i] = h.randn(n, 0.3*float64(s))
				for _, g := range grads[i] {
					n2 += float64(g) * float64(g)
				}
				h.be.Upload(step[i].Grad, grads[i])
				h.be.Upload(mirror[i].Grad, grads[i])
			}
			ctl := h.f32([]float32{float32(n2) * tc.n2Scale, tc.loss}, 2)
			before := make([][]float32, len(sizes))
			for i := range step {
				before[i] = h.get(step[i].Param)
			}
			h.be.AdamWStep(step, hp, tc.maxNorm, ctl)
			what := fmt.Sprintf("AdamWStep %s step %d", tc.name, s)
			if tc.skip {
				for i := range step {
					h.equal(fmt.Sprintf("%s tensor %d param (unchanged)", what, i), h.get(step[i].Param), before[i])
				}
				continue
			}
			coef := engine.ClipCoefficient(float32(n2), tc.maxNorm)
			if tc.name == "clipped" && coef >= 1 {
				h.t.Fatalf("%s: the case does not clip (coefficient %v)", what, coef)
			}
			for i, t := range mirror {
				if coef != 1 {
					h.be.Scale(t.Grad, coef)
				}
				one := hp
				one.WeightDecay = t.WeightDecay
				h.be.AdamW(t.Param, t.Grad, t.M, t.V, one)
				h.equal(fmt.Sprintf("%s tensor %d param vs AdamW", what, i), h.get(step[i].Param), h.get(t.Param))
				h.equal(fmt.Sprintf("%s tensor %d grad vs clipped", what, i), h.get(step[i].Grad), h.get(t.Grad))
				h.equal(fmt.Sprintf("%s tensor %d m vs AdamW", what, i), h.get(step[i].M), h.get(t.M))
				h.equal(fmt.Sprintf("%s tensor %d v vs AdamW", what, i), h.get(step[i].V), h.get(t.V))

				g := f64(grads[i])
				for j := range g {
					g[j] *= float64(coef)
				}
				r := refs[i]
				refAdamW(r[0], g, r[1], r[2], adamw{lr: float64(hp.LR), beta1: float64(hp.Beta1), beta2: float64(hp.Beta2),
					eps: float64(hp.Eps), wd: float64(t.WeightDecay), step: s})
				h.close(fmt.Sprintf("%s tensor %d param vs reference", what, i), h.get(step[i].Param), r[0], tolElem)
			}
		}
	}
}
