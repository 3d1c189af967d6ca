package enginetest

import (
	"fmt"
	"github.com/memtrain/memtrain/internal/numtest"
	"math"
	"math/rand/v2"
	"testing"
)

// These tests prove the references: every reference backward equals the
// central finite differences of its reference forward, in float64. With
// step 1e-5 the truncation error is ~1e-10 and the rounding error ~1e-11,
// so a relative tolerance of 1e-6 leaves room while catching any wrong
// term.

// gradCheck compares grad, the claimed gradient of f at x, with central
// differences, perturbing x in place.
func gradCheck(t *testing.T, name string, x, grad []float64, f func() float64) {
	t.Helper()
	const step, tol = 1e-5, 1e-6
	fd := make([]float64, len(x))
	for i := range x {
		orig := x[i]
		x[i] = orig + step
		up := f()
		x[i] = orig - step
		down := f()
		x[i] = orig
		fd[i] = (up - down) / (2 * step)
	}
	// Within tol of the largest partial derivative, or of 1.
	if err := numtest.Close(grad, fd, numtest.Tol{Max: tol, Floor: 1}); err != nil {
		t.Errorf("%s: analytic gradient against finite differences: %v", name, err)
	}
}

// dot is Σ r·y, the scalar whose gradient with respect to y is r.
func dot(r, y []float64) float64 {
	var s float64
	for i := range r {
		s += r[i] * y[i]
	}
	return s
}

func randVec(rng *rand.Rand, n int, scale float64) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64() * scale
	}
	return x
}

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

func TestGradGemm(t *testing.T) {
	rng := newRand(1)
	const m, n, k = 3, 4, 5
	for tr := 0; tr < 4; tr++ {
		tA, tB := tr&1 != 0, tr&2 != 0
		lda, ldb := k, n
		if tA {
			lda = m
		}
		if tB {
			ldb = k
		}
		a, b, c0, r := randVec(rng, m*k, 1), randVec(rng, k*n, 1), randVec(rng, m*n, 1), randVec(rng, m*n, 1)
		const alpha, beta = 0.7, 0.3
		f := func() float64 {
			c := append([]float64(nil), c0...)
			refGemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, n)
			return dot(r, c)
		}
		dA, dB, dC0 := refGemmBackward(tA, tB, m, n, k, alpha, a, b, beta, r)
		name := fmt.Sprintf("Gemm tA=%v tB=%v", tA, tB)
		gradCheck(t, name+" dA", a, dA, f)
		gradCheck(t, name+" dB", b, dB, f)
		gradCheck(t, name+" dC", c0, dC0, f)
	}
}

func TestGradEmbedding(t *testing.T) {
	rng := newRand(2)
	const V, H = 5, 3
	ids := []int32{1, 4, 1, 0, 1}
	table, r := randVec(rng, V*H, 1), randVec(rng, len(ids)*H, 1)
	gradCheck(t, "Embedding dTable", table, refEmbeddingBackward(r, ids, V, H),
		func() float64 { return dot(r, refEmbedding(table, ids, H)) })
}

func TestGradRMSNorm(t *testing.T) {
	rng := newRand(3)
	const N, H, eps = 3, 6, 1e-5
	x, w, r := randVec(rng, N*H, 1), randVec(rng, H, 1), randVec(rng, N*H, 1)
	f := func() float64 {
		out, _ := refRMSNorm(x, w, N, H, eps)
		return dot(r, out)
	}
	dx, dw := refRMSNormBackward(r, x, w, N, H, eps)
	gradCheck(t, "RMSNorm dx", x, dx, f)
	gradCheck(t, "RMSNorm dw", w, dw, f)
}

func TestGradBias(t *testing.T) {
	rng := newRand(10)
	const N, H = 4, 3
	y, bias, r := randVec(rng, N*H, 1), randVec(rng, H, 1), randVec(rng, N*H, 1)
	gradCheck(t, "AddBias dBias", bias, refBiasGrad(r, H), func() float64 { return dot(r, refAddBias(y, bias)) })
}

func TestGradRoPE(t *testing.T) {
	rng := newRand(4)
	const N, heads, D = 4, 2, 6
	pos := []int32{0, 1, 17, 4000}
	inv := ropeInvFreq(D, 10000)
	x, r := randVec(rng, N*heads*D, 1), randVec(rng, N*heads*D, 1)
	gradCheck(t, "RoPE dx", x, refRoPE(r, pos, inv, heads, -1),
		func() float64 { return dot(r, refRoPE(x, pos, inv, heads, 1)) })
}

func TestGradSwiGLU(t *testing.T) {
	rng := newRand(5)
	const n = 9
	gate, up, r := randVec(rng, n, 2), randVec(rng, n, 1), randVec(rng, n, 1)
	f := func() float64 { return dot(r, refSwiGLU(gate, up)) }
	dg, du := refSwiGLUBackward(r, gate, up)
	gradCheck(t, "SwiGLU dGate", gate, dg, f)
	gradCheck(t, "SwiGLU dUp", up, du, f)
}

func TestGradAttention(t *testing.T) {
	rng := newRand(6)
	for _, g := range []geometry{
		{B: 2, T: 4, heads: 4, kvHeads: 2, D: 3},
		{B: 1, T: 5, heads: 2, kvHeads: 1, D: 4},
		{B: 1, T: 3, heads: 2, kvHeads: 2, D: 2},
		// Sliding windows: of one key (the row itself), of two.
		{B: 1, T: 4, heads: 2, kvHeads: 1, D: 3, W: 1},
		{B: 2, T: 5, heads: 4, kvHeads: 2, D: 2, W: 2},
	} {
		q, k, v := randVec(rng, g.qLen(), 1), randVec(rng, g.kvLen(), 1), randVec(rng, g.kvLen(), 1)
		r := randVec(rng, g.qLen(), 1)
		f := func() float64 {
			out, _ := refAttention(q, k, v, g)
			return dot(r, out)
		}
		dq, dk, dv := refAttentionBackward(r, q, k, v, g)
		name := fmt.Sprintf("Attention %+v", g)
		gradCheck(t, name+" dq", q, dq, f)
		gradCheck(t, name+" dk", k, dk, f)
		gradCheck(t, name+" dv", v, dv, f)
	}
}

func TestGradCrossEntropy(t *testing.T) {
	rng := newRand(7)
	const N, V, scale = 4, 7, 0.3
	logits := randVec(rng, N*V, 2)
	targets := []int32{3, -1, 6, 0}
	weights := []float64{1, 0, 0.5, 2}
	f := func() float64 {
		losses, _ := refCrossEntropy(logits, targets, weights, N, V, scale)
		var s float64
		for _, l := range losses {
			s += scale * l
		}
		return s
	}
	_, d := refCrossEntropy(logits, targets, weights, N, V, scale)
	gradCheck(t, "CrossEntropy dLogits", logits, d, f)
}

// TestRefAttentionKV checks the cache reference against the causal one,
// without a window and with one: prefilling from position 0, and decoding
// one position at a time, both give causal attention's output.
func TestRefAttentionKV(t *testing.T) {
	for _, W := range []int{0, 1, 4} {
		testRefAttentionKV(t, W)
	}
}

func testRefAttentionKV(t *testing.T, W int) {
	rng := newRand(8)
	g := geometry{B: 2, T: 6, heads: 4, kvHeads: 2, D: 3, W: W}
	q, k, v := randVec(rng, g.qLen(), 1), randVec(rng, g.kvLen(), 1), randVec(rng, g.kvLen(), 1)
	want, _ := refAttention(q, k, v, g)
	prefill := refAttentionKV(q, k, v, []int32{0, 0}, g.B, g.T, g.T, g.heads, g.kvHeads, g.D, W)
	if err := numtest.Close(prefill, want, numtest.Tol{Abs: 1e-12}); err != nil {
		t.Fatalf("window %d: prefill against causal attention: %v", W, err)
	}
	row := g.heads * g.D
	for pos := 0; pos < g.T; pos++ {
		qs := make([]float64, 0, g.B*row)
		for b := 0; b < g.B; b++ {
			qs = append(qs, q[(b*g.T+pos)*row:(b*g.T+pos+1)*row]...)
		}
		out := refAttentionKV(qs, k, v, []int32{int32(pos), int32(pos)}, g.B, 1, g.T, g.heads, g.kvHeads, g.D, W)
		for b := 0; b < g.B; b++ {
			w := want[(b*g.T+pos)*row : (b*g.T+pos+1)*row]
			if err := numtest.Close(out[b*row:(b+1)*row], w, numtest.Tol{Abs: 1e-12}); err != nil {
				t.Fatalf("window %d: decode at %d, sequence %d, against causal attention: %v", W, pos, b, err)
			}
		}
	}
}

// TestRefAdamWFirstStep checks the reference against AdamW's closed form
// at step 1, where the bias corrections make m̂ = g and v̂ = g²:
// p ← p(1 − lr·wd) − lr·g/(|g| + eps).
func TestRefAdamWFirstStep(t *testing.T) {
	p, g := []float64{1, -2, 0.5, 3}, []float64{0.3, -1e-3, 0, 5}
	m, v := make([]float64, 4), make([]float64, 4)
	h := adamw{lr: 0.01, beta1: 0.9, beta2: 0.95, eps: 1e-8, wd: 0.1, step: 1}
	want := make([]float64, 4)
	for i := range p {
		want[i] = p[i]*(1-h.lr*h.wd) - h.lr*g[i]/(math.Abs(g[i])+h.eps)
	}
	refAdamW(p, g, m, v, h)
	if err := numtest.Close(p, want, numtest.Tol{Abs: 1e-12}); err != nil {
		t.Errorf("p: %v", err)
	}
}

// TestRefRoPEInverse checks that rotating by −θ undoes rotating by θ and
// that the rotation preserves each head's norm.
func TestRefRoPEInverse(t *testing.T) {
	rng := newRand(9)
	pos := []int32{0, 5, 4095}
	inv := ropeInvFreq(8, 500000)
	x := randVec(rng, 3*2*8, 1)
	y := refRoPE(x, pos, inv, 2, 1)
	back := refRoPE(y, pos, inv, 2, -1)
	if err := numtest.Close(back, x, numtest.Tol{Abs: 1e-12}); err != nil {
		t.Fatalf("rotated there and back: %v", err)
	}
	if err := numtest.Scalar(dot(y, y), dot(x, x), numtest.Tol{Rel: 1e-12}); err != nil {
		t.Errorf("|RoPE(x)|² against |x|²: %v", err)
	}
}
