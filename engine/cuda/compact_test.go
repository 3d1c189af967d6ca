package cuda

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/finetune"
	"github.com/memtrain/memtrain/internal/numtest"
)

// compactPart is one parameter part of a compact-state test: n elements
// placed in the whole parameter by at.
type compactPart struct {
	name string
	n    int
	at   engine.ElementIndex
}

// compactParts are awkward placements: a whole 3 × 100 matrix (rows not
// a multiple of the 64-column blocks), a ZeRO chunk of an X/Y/Z shard
// that starts mid-row and mid-block (columns 37…129 of rows 1…4 of a
// 5 × 150 matrix, from its element 20 + 7), and a vector of 5,000
// elements: more than one adamw_multi chunk of elements (4,096) and of
// 8-bit pieces (64 pieces).
func compactParts() []compactPart {
	shard := engine.Shard{Row0: 1, Row1: 5, Col0: 37, Col1: 130, Flat0: 20, Flat1: 4 * 93}
	return []compactPart{
		{"whole 3×100", 300, engine.ElementIndex{Shard: engine.WholeShard(3, 100), Cols: 100}},
		{"shard chunk", 4*93 - 20 - 7 - 11, engine.ElementIndex{Shard: shard, Cols: 150}.Offset(7)},
		{"vector 5000", 5000, engine.ElementIndex{Shard: engine.WholeShard(1, 5000), Cols: 5000}},
	}
}

// compactState is one backend's AdamW state for the compact tests: the
// tensors of each part and of a float32 parameter stepped beside them.
type compactState struct {
	b   engine.Backend
	ts  []engine.AdamWTensors
	ctl *engine.Tensor
}

// newCompactState uploads the same random state into b: a split master
// through SplitMaster, BF16 moments rounded by Upload, I8 moments
// through EncodeMoment, so that the CPU's and the GPU's states start
// equal when those are.
func newCompactState(b engine.Backend, split bool, moments engine.DType, parts []compactPart) *compactState {
	s := &compactState{b: b, ctl: b.Alloc(engine.F32, 2)}
	rng := rand.New(rand.NewPCG(21, 22))
	random := func(n int, scale float64, positive bool) []float32 {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(rng.NormFloat64() * scale)
			if positive {
				x[i] = float32(math.Abs(float64(x[i])))
			}
		}
		return x
	}
	up := func(dt engine.DType, x []float32) *engine.Tensor {
		t := b.Alloc(dt, len(x))
		b.Upload(t, x)
		return t
	}
	ms := b.(engine.MasterSplitter)
	for i, p := range parts {
		t := engine.AdamWTensors{Grad: up(engine.F32, random(p.n, 0.1, false)), WeightDecay: 0.1}
		master := up(engine.F32, random(p.n, 1, false))
		if split {
			t.Copy, t.Low = b.Alloc(engine.BF16, p.n), b.Alloc(engine.BF16, p.n)
			ms.SplitMaster(t.Copy, t.Low, master)
		} else {
			t.Param, t.Copy = master, b.Alloc(engine.BF16, p.n)
			b.Copy(t.Copy, master)
		}
		m, v := random(p.n, 0.01, false), random(p.n, 1e-3, true)
		if moments != engine.F32 {
			t.Round = &engine.MomentRound{Seed: 5, Tensor: engine.TensorKey(fmt.Sprint("w", i)), Index: p.at}
		}
		switch moments {
		case engine.I8:
			q := &engine.Int8Moments{Starts: engine.Int8Pieces(p.at, p.n)}
			q.MScale, q.VScale = b.Alloc(engine.F32, len(q.Starts)-1), b.Alloc(engine.F32, len(q.Starts)-1)
			t.M, t.V, t.Int8 = b.Alloc(engine.I8, p.n), b.Alloc(engine.I8, p.n), q
			ms.EncodeMoment(t.M, q, 0, up(engine.F32, m))
			ms.EncodeMoment(t.V, q, 1, up(engine.F32, v))
		default:
			t.M, t.V = up(moments, m), up(moments, v)
		}
		s.ts = append(s.ts, t)
	}
	// A float32 parameter in the same step.
	s.ts = append(s.ts, engine.AdamWTensors{Param: up(engine.F32, random(77, 1, false)), Grad: up(engine.F32, random(77, 0.1, false)),
		M: up(engine.F32, random(77, 0.01, false)), V: up(engine.F32, random(77, 1e-3, true))})
	return s
}

// step uploads the gradients grads and the control (n2, loss) and takes
// one AdamWStep.
func (s *compactState) step(grads [][]float32, n2, loss float32, h engine.AdamWParams, maxNorm float32) {
	for i, t := range s.ts {
		s.b.Upload(t.Grad, grads[i])
	}
	s.b.Upload(s.ctl, []float32{n2, loss})
	s.b.AdamWStep(s.ts, h, maxNorm, s.ctl)
}

// snapshot is every output of the state, as float32: masters, copies,
// low halves, moments (8-bit ones decoded) and scales, the clipped
// gradients; a bf16 tensor downloads widened, its bits shifted, so that
// equal floats are equal bits.
func (s *compactState) snapshot() map[string][]float32 {
	out := map[string][]float32{}
	get := func(name string, t *engine.Tensor) {
		if t != nil {
			x := make([]float32, t.Len())
			s.b.Download(x, t)
			out[name] = x
		}
	}
	for i, t := range s.ts {
		get(fmt.Sprint(i, " param"), t.Param)
		get(fmt.Sprint(i, " grad"), t.Grad)
		get(fmt.Sprint(i, " copy"), t.Copy)
		get(fmt.Sprint(i, " low"), t.Low)
		if t.Int8 == nil {
			get(fmt.Sprint(i, " m"), t.M)
			get(fmt.Sprint(i, " v"), t.V)
			continue
		}
		for k, c := range []*engine.Tensor{t.M, t.V} {
			x := s.b.Empty(engine.F32, c.Len())
			s.b.(engine.MasterSplitter).DecodeMoment(x, c, t.Int8, k)
			get(fmt.Sprint(i, " moment ", k), x)
			s.b.Free(x)
		}
		get(fmt.Sprint(i, " m scales"), t.Int8.MScale)
		get(fmt.Sprint(i, " v scales"), t.Int8.VScale)
	}
	return out
}

// TestAdamWStepCompactEmulated: AdamWStep on compact state — a split
// master, BF16 moments, 8-bit moments, and the split master with either
// — in one launch with a float32 parameter, over awkward parts
// (compactParts), for steps unclipped, clipped, skipped on a non-finite
// loss (nothing changes) and clipped again: every output of the GPU's is
// the CPU backend's bit for bit, each step.
func TestAdamWStepCompactEmulated(t *testing.T) {
	fakeCUDA(t)
	testAdamWStepCompact(t, newFake(t, 0, GemmF32))
}

// TestGPUAdamWStepCompact is TestAdamWStepCompactEmulated on a GPU: the
// kernel compiled by NVRTC, bit for bit the CPU's too.
func TestGPUAdamWStepCompact(t *testing.T) {
	needGPU(t)
	testAdamWStepCompact(t, newGPU(t, 0, GemmF32))
}

func testAdamWStepCompact(t *testing.T, gpu *Backend) {
	parts := compactParts()
	for _, c := range []struct {
		name    string
		split   bool
		moments engine.DType
	}{
		{"split master", true, engine.F32},
		{"bf16 moments", false, engine.BF16},
		{"int8 moments", false, engine.I8},
		{"split master, bf16 moments", true, engine.BF16},
		{"split master, int8 moments", true, engine.I8},
	} {
		t.Run(c.name, func(t *testing.T) {
			host := newCompactState(cpu.New(cpu.Options{Threads: 2}), c.split, c.moments, parts)
			dev := newCompactState(gpu, c.split, c.moments, parts)
			if err := numtest.Each(dev.snapshot(), host.snapshot(), numtest.Equal[float32]); err != nil {
				t.Fatalf("initial state: %v", err)
			}
			rng := rand.New(rand.NewPCG(31, 32))
			h := engine.AdamWParams{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8}
			for i, s := range []struct {
				n2, loss, maxNorm float32
				changes           bool
			}{
				{4, 1, 0, true},                      // unclipped
				{400, 1, 1, true},                    // clipped: coefficient 1/20
				{400, float32(math.NaN()), 1, false}, // skipped
				{float32(math.Inf(1)), 1, 0, false},  // skipped
				{900, 2, 1, true},                    // clipped again
			} {
				h.Step++
				grads := make([][]float32, len(host.ts))
				for j, tt := range host.ts {
					grads[j] = make([]float32, tt.Grad.Len())
					for k := range grads[j] {
						grads[j][k] = float32(rng.NormFloat64() * 0.1)
					}
				}
				before := dev.snapshot()
				host.step(grads, s.n2, s.loss, h, s.maxNorm)
				dev.step(grads, s.n2, s.loss, h, s.maxNorm)
				got := dev.snapshot()
				if err := numtest.Each(got, host.snapshot(), numtest.Equal[float32]); err != nil {
					t.Fatalf("step %d: against the CPU's: %v", i+1, err)
				}
				if !s.changes {
					for name := range before {
						if len(name) > 5 && name[len(name)-5:] == " grad" {
							before[name] = got[name] // the new gradient, uploaded
						}
					}
					if err := numtest.Each(got, before, numtest.Equal[float32]); err != nil {
						t.Fatalf("step %d (not finite): the state changed: %v", i+1, err)
					}
					h.Step-- // a skipped step does not count
				}
			}
		})
	}
}

// TestMasterSplitterEmulated: SplitMaster and JoinMaster are
// engine.SplitF32 and JoinF32 element for element — ties (a low half of
// 0x8000), subnormals, zeros of both signs, infinities and NaNs among
// random bits — and DecodeMoment and EncodeMoment are the CPU backend's,
// codes and scales, on pieces that start mid-block.
func TestMasterSplitterEmulated(t *testing.T) {
	fakeCUDA(t)
	testMasterSplitter(t, newFake(t, 0, GemmF32))
}

// TestGPUMasterSplitter is TestMasterSplitterEmulated on a GPU.
func TestGPUMasterSplitter(t *testing.T) {
	needGPU(t)
	testMasterSplitter(t, newGPU(t, 0, GemmF32))
}

func testMasterSplitter(t *testing.T, gpu *Backend) {
	rng := rand.New(rand.NewPCG(41, 42))
	const n = 1000
	bits := make([]uint32, n)
	for i := range bits {
		bits[i] = rng.Uint32()
	}
	copy(bits, []uint32{0, 0x8000_0000, 0x3f80_8000, 0x3f81_8000, 0xbf80_8000, 0x0000_0001, 0x007f_ffff, 0x7f80_0000, 0xff80_0000,
		0x7fc0_0000, 0xffc0_1234, 0x7f7f_ffff, 0x7f7f_8000, 0x4049_0fdb})
	x := make([]float32, n)
	wantHi, wantLo := make([]float32, n), make([]float32, n)
	for i, u := range bits {
		x[i] = math.Float32frombits(u)
		hi, lo := engine.SplitF32(x[i])
		wantHi[i], wantLo[i] = math.Float32frombits(uint32(hi)<<16), math.Float32frombits(uint32(lo)<<16)
	}
	master := gpu.Alloc(engine.F32, n)
	gpu.Upload(master, x)
	hiT, loT := gpu.Alloc(engine.BF16, n), gpu.Alloc(engine.BF16, n)
	gpu.SplitMaster(hiT, loT, master)
	gotHi, gotLo := make([]float32, n), make([]float32, n)
	gpu.Download(gotHi, hiT)
	gpu.Download(gotLo, loT)
	if err := numtest.Equal(gotHi, wantHi); err != nil {
		t.Errorf("SplitMaster's high halves: %v", err)
	}
	if err := numtest.Equal(gotLo, wantLo); err != nil {
		t.Errorf("SplitMaster's low halves: %v", err)
	}
	// JoinMaster of random halves, written as they are.
	his, los := make([]uint16, n), make([]uint16, n)
	want := make([]float32, n)
	for i := range his {
		his[i], los[i] = uint16(rng.Uint32()), uint16(rng.Uint32())
		want[i] = engine.JoinF32(his[i], los[i])
	}
	uploadHalves(gpu, hiT, his)
	uploadHalves(gpu, loT, los)
	gpu.JoinMaster(master, hiT, loT)
	got := make([]float32, n)
	gpu.Download(got, master)
	if err := numtest.Equal(got, want); err != nil {
		t.Errorf("JoinMaster: %v", err)
	}

	// 8-bit moments: encode random values to nearest, on both backends,
	// and decode them again.
	host := cpu.New(cpu.Options{Threads: 2})
	for _, p := range compactParts() {
		for k := range 2 {
			vals := make([]float32, p.n)
			for i := range vals {
				vals[i] = float32(rng.NormFloat64() * 0.01)
				if k == 1 {
					vals[i] *= vals[i]
				}
			}
			codec := func(b engine.Backend) map[string][]float32 {
				q := &engine.Int8Moments{Starts: engine.Int8Pieces(p.at, p.n)}
				q.MScale, q.VScale = b.Alloc(engine.F32, len(q.Starts)-1), b.Alloc(engine.F32, len(q.Starts)-1)
				src, dst, codes := b.Alloc(engine.F32, p.n), b.Alloc(engine.F32, p.n), b.Alloc(engine.I8, p.n)
				b.Upload(src, vals)
				b.(engine.MasterSplitter).EncodeMoment(codes, q, k, src)
				b.(engine.MasterSplitter).DecodeMoment(dst, codes, q, k)
				out := map[string][]float32{"decoded": make([]float32, p.n), "scales": make([]float32, len(q.Starts)-1)}
				b.Download(out["decoded"], dst)
				b.Download(out["scales"], [2]*engine.Tensor{q.MScale, q.VScale}[k])
				return out
			}
			if err := numtest.Each(codec(gpu), codec(host), numtest.Equal[float32]); err != nil {
				t.Errorf("%s, moment %d: against the CPU's: %v", p.name, k, err)
			}
		}
	}
}

// uploadHalves writes 16-bit words into the BF16 tensor t as they are
// (Upload would round floats, quieting a NaN-shaped low half).
func uploadHalves(b *Backend, t *engine.Tensor, h []uint16) {
	b.do(func() {
		v := b.bf16View("test", "t", t)
		b.copyToDevice(v.ptr, pointerTo(h), v.bytes())
	})
}

// TestCompactStateMisuseEmulated: AdamWStep refuses compact state it
// cannot take, with an *engine.Misuse of AdamWStep, before it launches
// anything: a split master with a Param, without a Copy or with float32
// halves, moments of the wrong dtype for their key (BF16 without Round,
// F32 with it, I8 without Int8), 8-bit moments without a Round key or
// in another count of pieces than Round.Index places, a float32 copy
// beside compact moments; and DecodeMoment and EncodeMoment refuse what
// their kernel cannot take.
func TestCompactStateMisuseEmulated(t *testing.T) {
	fakeCUDA(t)
	b := newFake(t, 0, GemmF32)
	n := 100
	ix := engine.ElementIndex{Shard: engine.WholeShard(1, n), Cols: n}
	round := &engine.MomentRound{Seed: 1, Tensor: 2, Index: ix}
	ctl := b.Alloc(engine.F32, 2)
	b.Upload(ctl, []float32{1, 1})
	f32 := func() *engine.Tensor { return b.Alloc(engine.F32, n) }
	bf16 := func() *engine.Tensor { return b.Alloc(engine.BF16, n) }
	i8 := func() *engine.Tensor { return b.Alloc(engine.I8, n) }
	int8 := func(starts []int) *engine.Int8Moments {
		return &engine.Int8Moments{Starts: starts, MScale: b.Alloc(engine.F32, len(starts)-1), VScale: b.Alloc(engine.F32, len(starts)-1)}
	}
	for name, ts := range map[string]engine.AdamWTensors{
		"split master with a param":   {Param: f32(), Grad: f32(), M: f32(), V: f32(), Copy: bf16(), Low: bf16()},
		"split master without a copy": {Grad: f32(), M: f32(), V: f32(), Low: bf16()},
		"split master, f32 low":       {Grad: f32(), M: f32(), V: f32(), Copy: bf16(), Low: f32()},
		"bf16 moments without Round":  {Param: f32(), Grad: f32(), M: bf16(), V: bf16()},
		"f32 moments with Round":      {Param: f32(), Grad: f32(), M: f32(), V: f32(), Round: round},
		"i8 moments without Int8":     {Param: f32(), Grad: f32(), M: i8(), V: i8(), Round: round},
		"int8 without Round":          {Param: f32(), Grad: f32(), M: i8(), V: i8(), Int8: int8(engine.Int8Pieces(ix, n))},
		"int8 of too few pieces":      {Param: f32(), Grad: f32(), M: i8(), V: i8(), Round: round, Int8: int8([]int{0, 100})},
		"int8, f32 codes":             {Param: f32(), Grad: f32(), M: f32(), V: f32(), Round: round, Int8: int8(engine.Int8Pieces(ix, n))},
		"f32 copy, bf16 moments":      {Param: f32(), Grad: f32(), M: bf16(), V: bf16(), Copy: f32(), Round: round},
	} {
		func() {
			defer func() {
				var m *engine.Misuse
				if err, _ := recover().(error); !errors.As(err, &m) || m.Op != "AdamWStep" {
					t.Errorf("%s: AdamWStep panicked with %v, want an *engine.Misuse of AdamWStep", name, err)
				}
			}()
			b.AdamWStep([]engine.AdamWTensors{ts}, engine.AdamWParams{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 1}, 0, ctl)
		}()
	}
	// DecodeMoment and EncodeMoment refuse a piece longer than a block (a
	// warp's 64 elements) and scales of another count, in their names.
	for name, q := range map[string]*engine.Int8Moments{
		"a piece of 100":  int8([]int{0, 100}),
		"scales of three": {Starts: engine.Int8Pieces(ix, n), MScale: f32(), VScale: f32()},
	} {
		for op, call := range map[string]func(){
			"DecodeMoment": func() { b.DecodeMoment(f32(), i8(), q, 0) },
			"EncodeMoment": func() { b.EncodeMoment(i8(), q, 1, f32()) },
		} {
			func() {
				defer func() {
					var m *engine.Misuse
					if err, _ := recover().(error); !errors.As(err, &m) || m.Op != op {
						t.Errorf("%s: %s panicked with %v, want an *engine.Misuse of %[2]s", name, op, err)
					}
				}()
				call()
			}()
		}
	}
}

// TestCompactStateTrainsEmulated: a mixed-precision Llama on the fake
// GPU fine-tunes through finetune.TrainStep with each compact state that
// the planner's cheapest answers use — a split master, bf16 and 8-bit
// moments, and both — as the CPU backend does: step losses and gradient
// norms within bf16StepLossTol of the CPU's, the tolerance of the float32
// state (the first row) too, and of TestGridBF16Emulated. The two
// backends' passes round the same float32 values, summed in other
// orders, now and then to neighbouring bf16 numbers; their AdamW steps
// are the same bit for bit (TestAdamWStepCompactEmulated), so the runs
// differ by what the passes feed the steps. Three steps, so that the
// third step's loss is of weights updated from compact moments (the
// first update is of float32 moments before any rounding), with
// AdamW's ε = 0.1 so that an update is a smooth function of the
// gradient: at 1e-8 it is about lr·sign(g), a gradient near zero whose
// sign a rounding flipped moves its weight by 2·lr, and an 8-bit moment
// that differs in its last bits can round to a neighbouring code; at
// 1e-8 the float32 state's third step already differed by 6.7e-4, beyond
// the tolerance. Measured at 0.1: 1.4e-7 relative for the float32, split
// and bf16 states, 2.5e-5 for 8-bit moments. The compact moments' losses
// differ from the float32 state's: the compact state is what trained.
func TestCompactStateTrainsEmulated(t *testing.T) {
	fakeCUDA(t)
	gpu := newFake(t, 0, GemmF32)
	cfg := gridConfig()
	weights := checkpoints.RandomWeights(cfg, 5)
	batches := gridBatches(cfg)
	var f32Loss []float64
	for _, c := range []struct {
		master, moments string
	}{
		{"fp32", "fp32"},
		{"split", "fp32"},
		{"fp32", "bf16"},
		{"fp32", "int8"},
		{"split", "bf16"},
		{"split", "int8"},
	} {
		t.Run("master "+c.master+", moments "+c.moments, func(t *testing.T) {
			opts := llama.Options{Activations: engine.BF16, SplitMaster: c.master == "split"}
			oc := gridOptimizer
			oc.Moments, oc.Seed, oc.Eps = c.moments, 7, 1e-1
			want, err := gridTrainOptimizer(cpu.New(cpu.Options{Threads: 1}), cfg, weights, batches, opts, oc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := gridTrainOptimizer(gpu, cfg, weights, batches, opts, oc)
			if err != nil {
				t.Fatal(err)
			}
			loss, norm := stepSeries(got)
			wantLoss, wantNorm := stepSeries(want)
			if err := numtest.Close(loss, wantLoss, numtest.Tol{Rel: bf16StepLossTol}); err != nil {
				t.Errorf("step losses against the CPU's: %v", err)
			}
			if err := numtest.Close(norm, wantNorm, numtest.Tol{Rel: bf16StepLossTol}); err != nil {
				t.Errorf("gradient norms against the CPU's: %v", err)
			}
			dl, _ := numtest.Measure(loss, wantLoss)
			dg, _ := numtest.Measure(norm, wantNorm)
			t.Logf("losses %v; largest difference from the CPU's, relative to the largest value: %.2g", loss, max(dl.MaxRel, dg.MaxRel))
			switch {
			case c.master == "fp32" && c.moments == "fp32":
				f32Loss = wantLoss
			case c.moments != "fp32" && f32Loss != nil && numtest.Equal(wantLoss, f32Loss) == nil:
				t.Errorf("%s moments' losses %v are float32 moments'", c.moments, wantLoss)
			}
		})
	}
}

// TestCompactStateResumesEmulated: compact state saved from the fake
// GPU and loaded into a fresh model there — split masters joined for the
// checkpoint and split again, 8-bit moments decoded and encoded again
// (JoinMaster, SplitMaster, DecodeMoment, EncodeMoment) — resumes
// exactly: the resumed run's next step and weights are the uninterrupted
// run's bit for bit.
func TestCompactStateResumesEmulated(t *testing.T) {
	fakeCUDA(t)
	gpu := newFake(t, 0, GemmF32)
	cfg := gridConfig()
	batches := gridBatches(cfg)
	opts := llama.Options{Activations: engine.BF16, SplitMaster: true}
	oc := gridOptimizer
	oc.Moments, oc.Seed = "int8", 7
	// run makes a model of weights seeded seed and its optimizer.
	run := func(seed uint64) (*llama.Model, *finetune.Optimizer) {
		m, err := llama.New(gpu, cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Free)
		if err := m.SetWeights(checkpoints.RandomWeights(cfg, seed)); err != nil {
			t.Fatal(err)
		}
		o, err := finetune.NewOptimizer(gpu, m.Params(), oc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(o.Free)
		return m, o
	}
	step := func(m *llama.Model, o *finetune.Optimizer, b llama.Batch) finetune.StepResult {
		r, err := finetune.TrainStep(m, o, gridShare(b, 1, 0), 1e-2, 1)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	m, o := run(5)
	for _, b := range batches[:2] {
		step(m, o, b)
	}
	dir := t.TempDir()
	if err := finetune.SaveCheckpoint(dir, finetune.StepName(2), m, o, finetune.TrainerState{Step: 2, OptimizerStep: o.Step}, finetune.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	m2, o2 := run(6)
	if _, err := finetune.LoadCheckpoint(filepath.Join(dir, finetune.StepName(2)), m2, o2); err != nil {
		t.Fatal(err)
	}
	want, got := step(m, o, batches[2]), step(m2, o2, batches[2])
	if err := numtest.Equal([]float64{got.Loss, got.GradNorm}, []float64{want.Loss, want.GradNorm}); err != nil {
		t.Errorf("the resumed step's loss and gradient norm: %v", err)
	}
	w, w2 := m.Weights(), m2.Weights()
	for i := range w {
		if err := numtest.Equal(w2[i].Data, w[i].Data); err != nil {
			t.Errorf("%s after the resumed step: %v", w[i].Name, err)
		}
	}
}
