package cuda

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/numtest"
)

// These tests run the tensor-core attention (kernels/flash.cu, on the
// emulated warp collectives of kernels/warp.cuh) on the fake GPU against a
// float64 reference of causal grouped-query attention, in a sliding window
// where a case has one.

// flashCase is one attention geometry on the tensor-core path; W is its
// sliding window (0: plain causal).
type flashCase struct{ B, T, heads, kvHeads, D, W int }

func (c flashCase) String() string {
	s := fmt.Sprintf("B%d T%d H%d KV%d D%d", c.B, c.T, c.heads, c.kvHeads, c.D)
	if c.W > 0 {
		s += fmt.Sprintf(" W%d", c.W)
	}
	return s
}

// first is the first key that query t sees: t−W+1 in a window of W, 0
// without one.
func (c flashCase) first(t int) int {
	if c.W == 0 {
		return 0
	}
	return max(0, t-c.W+1)
}

// flashCases cover ragged lengths around the tiles (the forward's 64
// packed rows and 32 keys, the backward's 64 keys and 32 or 16 rows) from
// 1 to 300, GQA groups of 1, 2, 4 and 8 and both head sizes, every
// combination; B and the heads are small, as the emulator runs every GPU
// thread as a fiber. Two more cases have two sequences and two key/value
// heads.
func flashCases() []flashCase {
	var cs []flashCase
	// Every group size meets every length up to 129 (one and two tiles of
	// either width, the edges of each); the longer lengths (three tiles
	// and more, whose cost is T²) take two group sizes each, every group
	// size among them.
	groups := func(T int) []int {
		switch T {
		case 200:
			return []int{4, 8}
		case 255:
			return []int{2, 4}
		case 300:
			return []int{1, 2}
		}
		return []int{1, 2, 4, 8}
	}
	for _, T := range []int{1, 2, 15, 16, 17, 63, 64, 65, 127, 129, 200, 255, 300} {
		for _, G := range groups(T) {
			for _, D := range []int{64, 128} {
				cs = append(cs, flashCase{B: 1, T: T, heads: G, kvHeads: 1, D: D})
			}
		}
	}
	cs = append(cs, flashCase{B: 2, T: 33, heads: 8, kvHeads: 2, D: 64}, flashCase{B: 2, T: 40, heads: 4, kvHeads: 2, D: 128})
	// Sliding windows over several tiles, whose cost is T·W: of one key;
	// of 17, 50 and 97, multiples of no tile size, so that a window's edge
	// cuts the forward's key tiles and the backward's query tiles
	// anywhere and a query tile's dq sums start past key tile 0; of 64, a
	// key tile; and of T, plain causal attention.
	return append(cs, flashCase{B: 1, T: 300, heads: 2, kvHeads: 1, D: 64, W: 1}, flashCase{B: 1, T: 200, heads: 1, kvHeads: 1, D: 128, W: 1},
		flashCase{B: 1, T: 129, heads: 4, kvHeads: 1, D: 64, W: 17},
		flashCase{B: 1, T: 255, heads: 4, kvHeads: 1, D: 128, W: 50},
		flashCase{B: 1, T: 200, heads: 8, kvHeads: 1, D: 64, W: 97},
		flashCase{B: 2, T: 129, heads: 4, kvHeads: 2, D: 128, W: 64},
		flashCase{B: 1, T: 65, heads: 2, kvHeads: 1, D: 64, W: 65})
}

// flashInputs are bf16-rounded q, k, v and dOut of a case: scores of a
// standard deviation near 2, so that the softmax is far from uniform and
// a key wrongly masked or let through moves the output.
type flashInputs struct {
	q, k, v, dOut []float32
}

func newFlashInputs(c flashCase, seed uint64) flashInputs {
	r := rand.New(rand.NewPCG(seed, uint64(c.T)))
	randn := func(n int, sd float64) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(float32(sd * r.NormFloat64())))
		}
		return x
	}
	nq, nkv := c.B*c.T*c.heads*c.D, c.B*c.T*c.kvHeads*c.D
	return flashInputs{q: randn(nq, 1.5), k: randn(nkv, 1.5), v: randn(nkv, 1), dOut: randn(nq, 1)}
}

// flashRef is the float64 reference: out, lse and the gradients, with
// each element's error bound for the tensor-core kernels (flashBounds).
type flashRef struct {
	out, lse, dq, dk, dv      []float64
	outB, lseB, dqB, dkB, dvB []float64
}

// bf16Unit is bf16's unit roundoff, 2⁻⁸.
const bf16Unit = 1.0 / 256

// flashBound is an element's bound: its own rounding to bf16 (2⁻⁸ of
// itself), the bf16 rounding of the probabilities (forward: P before P·V;
// backward: P before Pᵀ·dOut and dS before dSᵀ·q and dS·k), each term off
// by at most 2⁻⁸ of itself, so at most 2⁻⁸ of mag, the sum of the terms'
// magnitudes (with a tenth more for the second-order terms and the
// float32 sums, each over at most a few hundred products: ~10⁻⁵ relative),
// 10⁻⁶ of the tensor's largest magnitude for results that cancel, and
// extra, the float32 error of dS carried into dq and dk (which a dS that
// cancels to 0, as at T = 1, leaves alone: flashRef's dsErr).
func flashBound(want, mag, maxMag, extra float64) float64 {
	return bf16Unit*math.Abs(want) + 1.1*bf16Unit*mag + 1e-6*maxMag + extra
}

// reference computes flashRef from the inputs, with δ = rowsum(dOut ⊙
// out) from out as the kernel stored it (outStored), as the backward does.
func (in flashInputs) reference(c flashCase, outStored []float32) flashRef {
	G, D := c.heads/c.kvHeads, c.D
	scale := 1 / math.Sqrt(float64(D))
	nq, nkv := c.B*c.T*c.heads*D, c.B*c.T*c.kvHeads*D
	r := flashRef{out: make([]float64, nq), lse: make([]float64, c.B*c.heads*c.T), dq: make([]float64, nq),
		dk: make([]float64, nkv), dv: make([]float64, nkv)}
	outMag, dqMag, dkMag, dvMag := make([]float64, nq), make([]float64, nq), make([]float64, nkv), make([]float64, nkv)
	dqErr, dkErr := make([]float64, nq), make([]float64, nkv)
	qi := func(b, t, h int) int { return ((b*c.T+t)*c.heads + h) * D }
	ki := func(b, t, kv int) int { return ((b*c.T+t)*c.kvHeads + kv) * D }
	p := make([]float64, c.T)
	ds, dsErr := make([]float64, c.T), make([]float64, c.T)
	for b := range c.B {
		for h := range c.heads {
			kv := h / G
			for t := range c.T {
				m := math.Inf(-1)
				for j := c.first(t); j <= t; j++ {
					s := 0.0
					for d := range D {
						s += float64(in.q[qi(b, t, h)+d]) * float64(in.k[ki(b, j, kv)+d])
					}
					p[j] = s * scale
					m = math.Max(m, p[j])
				}
				l := 0.0
				for j := c.first(t); j <= t; j++ {
					p[j] = math.Exp(p[j] - m)
					l += p[j]
				}
				r.lse[(b*c.heads+h)*c.T+t] = m + math.Log(l)
				delta, deltaAbs := 0.0, 0.0
				for d := range D {
					x := float64(in.dOut[qi(b, t, h)+d]) * float64(outStored[qi(b, t, h)+d])
					delta += x
					deltaAbs += math.Abs(x)
				}
				for j := c.first(t); j <= t; j++ {
					p[j] /= l
					dp, dpAbs := 0.0, 0.0
					for d := range D {
						x := float64(in.dOut[qi(b, t, h)+d]) * float64(in.v[ki(b, j, kv)+d])
						dp += x
						dpAbs += math.Abs(x)
					}
					ds[j] = p[j] * (dp - delta)
					// dP and δ are float32 sums of D exact products:
					// each off by at most D·2⁻²⁴ of its terms' magnitudes;
					// twice that bounds dS's error with p's own.
					dsErr[j] = 2 * p[j] * float64(D) * math.Pow(2, -24) * (dpAbs + deltaAbs)
				}
				for d := range D {
					o, om, dq, dqm, dqe := 0.0, 0.0, 0.0, 0.0, 0.0
					for j := c.first(t); j <= t; j++ {
						vv, kk := float64(in.v[ki(b, j, kv)+d]), float64(in.k[ki(b, j, kv)+d])
						o += p[j] * vv
						om += p[j] * math.Abs(vv)
						dq += ds[j] * kk
						dqm += math.Abs(ds[j] * kk)
						dqe += dsErr[j] * math.Abs(kk)
					}
					r.out[qi(b, t, h)+d], outMag[qi(b, t, h)+d] = o, om
					r.dq[qi(b, t, h)+d], dqMag[qi(b, t, h)+d], dqErr[qi(b, t, h)+d] = dq*scale, dqm*scale, dqe*scale
				}
				for j := c.first(t); j <= t; j++ {
					for d := range D {
						qq, g := float64(in.q[qi(b, t, h)+d]), float64(in.dOut[qi(b, t, h)+d])
						r.dk[ki(b, j, kv)+d] += ds[j] * qq * scale
						dkMag[ki(b, j, kv)+d] += math.Abs(ds[j]*qq) * scale
						dkErr[ki(b, j, kv)+d] += dsErr[j] * math.Abs(qq) * scale
						r.dv[ki(b, j, kv)+d] += p[j] * g
						dvMag[ki(b, j, kv)+d] += p[j] * math.Abs(g)
					}
				}
			}
		}
	}
	bounds := func(want, mag, extra []float64) []float64 {
		mx := 0.0
		for _, x := range mag {
			mx = math.Max(mx, x)
		}
		out := make([]float64, len(want))
		for i := range want {
			e := 0.0
			if extra != nil {
				e = extra[i]
			}
			out[i] = flashBound(want[i], mag[i], mx, e)
		}
		return out
	}
	r.outB, r.dqB, r.dkB, r.dvB = bounds(r.out, outMag, nil), bounds(r.dq, dqMag, dqErr), bounds(r.dk, dkMag, dkErr), bounds(r.dv, dvMag, nil)
	// lse: the scores' float32 sums of exact bf16 products over D ≤ 128
	// terms and the float32 sum of the row's probabilities are good to
	// ~10⁻⁵ relative; 3·10⁻⁵ of max(1, |lse|) bounds them.
	r.lseB = make([]float64, len(r.lse))
	for i, x := range r.lse {
		r.lseB[i] = 3e-5 * math.Max(1, math.Abs(x))
	}
	return r
}

// flashRun is what the backend computed for a case.
type flashRun struct {
	out, lse, dq, dk, dv []float32
}

// runFlash runs Attention and AttentionBackward on b with BF16 tensors.
func runFlash(t *testing.T, b *Backend, c flashCase, in flashInputs, backward bool) flashRun {
	t.Helper()
	put := func(x []float32, shape ...int) *engine.Tensor {
		tt := b.Alloc(engine.BF16, shape...)
		t.Cleanup(func() { b.Free(tt) })
		if x != nil {
			b.Upload(tt, x)
		}
		return tt
	}
	get := func(x *engine.Tensor) []float32 {
		out := make([]float32, x.Len())
		b.Download(out, x)
		return out
	}
	qs, kvs := []int{c.B, c.T, c.heads, c.D}, []int{c.B, c.T, c.kvHeads, c.D}
	q, k, v := put(in.q, qs...), put(in.k, kvs...), put(in.v, kvs...)
	out := put(nil, qs...)
	lse := b.Alloc(engine.F32, c.B, c.heads, c.T)
	t.Cleanup(func() { b.Free(lse) })
	b.Attention(out, lse, q, k, v, c.W)
	r := flashRun{out: get(out), lse: get(lse)}
	if backward {
		dq, dk, dv := put(nil, qs...), put(nil, kvs...), put(nil, kvs...)
		b.AttentionBackward(dq, dk, dv, put(in.dOut, qs...), q, k, v, out, lse, c.W)
		r.dq, r.dk, r.dv = get(dq), get(dk), get(dv)
	}
	if err := b.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return r
}

// checkFlash compares a run with the reference, returning the first
// failing comparison.
func checkFlash(got flashRun, want flashRef, backward bool) error {
	type cmp struct {
		name       string
		got        []float32
		want, bnds []float64
	}
	cs := []cmp{{"out", got.out, want.out, want.outB}, {"lse", got.lse, want.lse, want.lseB}}
	if backward {
		cs = append(cs, cmp{"dq", got.dq, want.dq, want.dqB}, cmp{"dk", got.dk, want.dk, want.dkB}, cmp{"dv", got.dv, want.dv, want.dvB})
	}
	for _, c := range cs {
		if err := numtest.CloseBounds(c.got, c.want, c.bnds); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// TestFlashAttentionEmulated checks the tensor-core forward and backward
// against the float64 reference within the bounds of flashBound, on
// ragged lengths from 1 to 300, groups of 1 to 8, head sizes 64 and 128.
func TestFlashAttentionEmulated(t *testing.T) {
	fakeCUDA(t)
	testFlashAttention(t, newFake)
}

// TestGPUFlashAttention is TestFlashAttentionEmulated and
// TestFlashAttentionDeterministicEmulated on a GPU: the same bounds hold
// for the hardware's sums.
func TestGPUFlashAttention(t *testing.T) {
	needGPU(t)
	testFlashAttention(t, newGPU)
	testFlashDeterministic(t, newGPU)
}

func testFlashAttention(t *testing.T, newBackend maker) {
	b := newBackend(t, 0, GemmF32)
	for _, c := range flashCases() {
		t.Run(c.String(), func(t *testing.T) {
			in := newFlashInputs(c, 1)
			got := runFlash(t, b, c, in, flashBackward)
			if err := checkFlash(got, in.reference(c, got.out), flashBackward); err != nil {
				t.Error(err)
			}
		})
	}
}

// flashBackward says whether the tests run the backward too.
const flashBackward = true

// TestFlashAttentionDeterministicEmulated runs the tensor-core attention
// twice on inputs whose query tiles take their dq from several key tiles
// each (the first past key tile 0 with a window), and requires
// bit-identical results: the dq sums follow a fixed order (no atomics).
func TestFlashAttentionDeterministicEmulated(t *testing.T) {
	fakeCUDA(t)
	testFlashDeterministic(t, newFake)
}

func testFlashDeterministic(t *testing.T, newBackend maker) {
	b := newBackend(t, 0, GemmF32)
	for _, c := range []flashCase{{B: 1, T: 300, heads: 2, kvHeads: 1, D: 128}, {B: 2, T: 150, heads: 8, kvHeads: 2, D: 64},
		{B: 1, T: 300, heads: 2, kvHeads: 1, D: 128, W: 70}} {
		in := newFlashInputs(c, 3)
		first, second := runFlash(t, b, c, in, true), runFlash(t, b, c, in, true)
		for _, x := range []struct {
			name      string
			got, want []float32
		}{{"out", second.out, first.out}, {"lse", second.lse, first.lse}, {"dq", second.dq, first.dq}, {"dk", second.dk, first.dk}, {"dv", second.dv, first.dv}} {
			if err := numtest.Equal(x.got, x.want); err != nil {
				t.Errorf("%v: %s differs between two runs: %v", c, x.name, err)
			}
		}
	}
}

// TestFlashAttentionWindowSkipsTilesEmulated counts the tensor-core
// kernels' mma operations (the fake's fakecuda_mma_count) and requires a
// windowed call to visit no more tiles than its window reaches, O(T·W),
// where without the skipping it would visit the causal triangle's: every
// (block, tile) step runs the same mma operations, so the causal call's
// count over its exact number of steps gives a step's, and the windowed
// count must stay within that times a bound on its steps from the
// geometry alone (a block's positions and their windows span L
// consecutive keys, or its keys' windows L consecutive packed rows,
// which at most ⌈L/tile⌉ + 1 tiles cover).
func TestFlashAttentionWindowSkipsTilesEmulated(t *testing.T) {
	f := newWarpFake(t)
	b := newFake(t, 0, GemmF32)
	const W = 40
	causal := flashCase{B: 1, T: 512, heads: 2, kvHeads: 1, D: 64}
	windowed := causal
	windowed.W = W
	in := newFlashInputs(causal, 5)
	G, rows := causal.heads/causal.kvHeads, causal.T*causal.heads/causal.kvHeads
	ceil := func(a, b int) int { return (a + b - 1) / b }
	// The forward's blocks of fmRows packed rows, over key tiles of
	// fmKeys; the backward's blocks of fbKeys keys, over query tiles of
	// bq packed rows.
	var fwdCausal, fwdBound, bwdCausal, bwdBound int
	for p0 := 0; p0 < rows; p0 += fmRows {
		first, last := p0/G, (min(p0+fmRows, rows)-1)/G
		fwdCausal += last/fmKeys + 1
		fwdBound += ceil(last-first+W, fmKeys) + 1
	}
	bq := fbQTile / causal.D
	for k0 := 0; k0 < causal.T; k0 += fbKeys {
		bwdCausal += ceil(rows, bq) - k0*G/bq
		lastPos := min(causal.T-1, k0+fbKeys-1+W-1)
		bwdBound += ceil((lastPos+1-k0)*G, bq) + 1
	}
	count := func(c flashCase) (fwd, bwd int64) {
		start := f.mmaCount()
		runFlash(t, b, c, in, false)
		mid := f.mmaCount()
		runFlash(t, b, c, in, true)
		return mid - start, f.mmaCount() - mid - (mid - start)
	}
	cf, cb := count(causal)
	wf, wb := count(windowed)
	t.Logf("mma operations: forward %d causal, %d in a window of %d; backward %d, %d", cf, wf, W, cb, wb)
	for _, x := range []struct {
		name                    string
		causal, steps, got, max int64
	}{{"forward", cf, int64(fwdCausal), wf, int64(fwdBound)}, {"backward", cb, int64(bwdCausal), wb, int64(bwdBound)}} {
		if x.causal == 0 || x.causal%x.steps != 0 {
			t.Fatalf("%s: %d mma operations causal, not a multiple of its %d steps", x.name, x.causal, x.steps)
		}
		per := x.causal / x.steps
		if x.got > per*x.max || x.max >= x.steps {
			t.Errorf("%s: %d mma operations in a window of %d, more than %d steps of %d (causal: %d steps)", x.name, x.got, W, x.max, per, x.steps)
		}
	}
}

// TestFlashAttentionLayoutEmulated runs the tensor-core attention with the
// emulator's mma fragment layout permuted (fakecuda_set_mma_permuted: A's
// row halves swapped) and requires the comparison to fail — the kernels
// depend on the real layout, and the tests see it — and to pass again
// with the real layout.
func TestFlashAttentionLayoutEmulated(t *testing.T) {
	f := newWarpFake(t)
	b := newFake(t, 0, GemmF32)
	c := flashCase{B: 1, T: 40, heads: 2, kvHeads: 1, D: 64}
	in := newFlashInputs(c, 2)
	f.setPermute(1)
	got := runFlash(t, b, c, in, flashBackward)
	f.setPermute(0)
	if err := checkFlash(got, in.reference(c, got.out), flashBackward); err == nil {
		t.Error("attention with a permuted mma fragment layout matches the reference")
	} else {
		t.Logf("with the layout permuted: %v", err)
	}
	got = runFlash(t, b, c, in, flashBackward)
	if err := checkFlash(got, in.reference(c, got.out), flashBackward); err != nil {
		t.Errorf("with the real layout: %v", err)
	}
}

// TestFlashSharedConstants: the geometry the Go code launches with is the
// kernels'.
func TestFlashSharedConstants(t *testing.T) {
	src, _ := kernelSource()
	for name, want := range map[string]int{
		"FM_THREADS":     fmThreads,
		"FM_ROWS":        fmRows,
		"FM_KEYS":        fmKeys,
		"FB_KEYS":        fbKeys,
		"FB_QTILE_ELEMS": fbQTile,
	} {
		m := regexp.MustCompile(`#define ` + name + ` (\d+)`).FindStringSubmatch(src)
		if m == nil {
			t.Errorf("no #define %s in the sources", name)
			continue
		}
		if got, _ := strconv.Atoi(m[1]); got != want {
			t.Errorf("#define %s %d, the Go code uses %d", name, got, want)
		}
	}
}

// Tolerances of a mixed-precision Llama step whose attention takes the
// tensor-core kernels, against the CPU's, in units of bf16's u = 2⁻⁸.
// Unlike the float32 kernels, which round each attention output once from
// nearly the CPU's value (TestModelBF16Emulated's tolerances), these round
// P (and dS) to bf16 as the operand of a tensor-core product, as
// FlashAttention-2 does: every attention output moves by up to u of its
// terms' magnitudes, and then rounds to a neighbouring bf16 value of the
// CPU's in a good fraction of the elements, not now and then. Through two
// layers and the backward that makes every gradient differ by about u in
// relative L2 (measured on the emulator: at most 1.9%, 5u, for head sizes
// 64 and 128), and each updated weight — AdamW's first step moves each by
// about its learning rate, in the direction of its gradient's sign, which
// a gradient near zero may flip — by at most 1.1% (2.8u) in relative L2.
// So: the loss within u/8 relative (measured at most 3.3·10⁻⁴ = u/12),
// every gradient and updated weight within 8u in relative L2.
const (
	flashStepLossTol = bf16U / 8
	flashStepL2Tol   = 8 * bf16U
)

// TestModelBF16FlashEmulated runs a mixed-precision Llama whose heads are
// 64 and 128 wide, so that its bf16 attention takes the tensor-core
// kernels, on the emulated GPU and on the CPU: greedy generations of the
// random model are the same, and a training step's loss, gradients and
// AdamW-updated weights are the CPU's within the tolerances above.
// (TestModelBF16Emulated's model, with heads of 8, takes the float32
// kernels.) The initial weights' spread shrinks as 1/√hidden, so that the
// logits are as large as testConfig's.
func TestModelBF16FlashEmulated(t *testing.T) {
	fakeCUDA(t)
	for _, D := range []int{64, 128} {
		t.Run(fmt.Sprintf("D%d", D), func(t *testing.T) {
			cfg := testConfig()
			cfg.HiddenSize, cfg.NumAttentionHeads, cfg.NumKeyValueHeads = 2*D, 2, 1
			cfg.InitializerRange = 0.3 * math.Sqrt(32/float64(cfg.HiddenSize))
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			batch := randomBatch(cfg, 2, 24)
			opt := llama.Options{Activations: engine.BF16}
			host := randomModelWith(t, cpu.New(cpu.Options{Threads: 2}), cfg, opt)
			gpu := randomModelWith(t, newFake(t, 0, GemmF32), cfg, opt)
			sameGenerations(t, gpu, host, [][]int32{batch.IDs[:5], batch.IDs[24:30], batch.IDs[:1]}, "the bf16 model")

			refLoss, refOut := trainStep(t, host, batch)
			loss, out := trainStep(t, gpu, batch)
			worst, worstName := 0.0, ""
			for _, name := range slices.Sorted(maps.Keys(refOut)) {
				if d, err := numtest.Measure(out[name], refOut[name]); err == nil && d.L2 > worst {
					worst, worstName = d.L2, name
				}
			}
			t.Logf("loss %.6f, CPU %.6f; worst %s at relative L2 %.3g", loss.Mean(), refLoss.Mean(), worstName, worst)
			if err := numtest.Scalar(loss.Mean(), refLoss.Mean(), numtest.Tol{Rel: flashStepLossTol}); err != nil || loss.Weight != refLoss.Weight {
				t.Errorf("loss (weight %v) against the CPU's (weight %v): %v", loss.Weight, refLoss.Weight, err)
			}
			if err := numtest.EachL2(out, refOut, flashStepL2Tol); err != nil {
				t.Errorf("against the CPU's: %v", err)
			}
		})
	}
}
