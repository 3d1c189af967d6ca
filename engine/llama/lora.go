package llama

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// LoRA adapters (PEFT's LoRA, Hu et al. 2021): each adapted projection
// y = x·Wᵀ becomes
//
//	y = x·Wᵀ + s·(drop(x)·Aᵀ)·Bᵀ,  A [r, in], B [out, r]
//
// with W frozen and only A and B trained; s = alpha/r, or alpha/√r with
// rsLoRA. A model with adapters allocates no gradient for its base
// weights, and keeps them in their checkpoint's dtype (Options.BaseDType)
// when the backend can multiply by it.
//
// The adapters are replicated on every rank of a grid, whole: they are
// small (r·(in+out) a projection, under 1% of a Llama's weights at r =
// 16), so splitting them would save little memory, while keeping them
// whole lets every rank read the same optimizer state and checkpoint.
// A rank multiplies by the part of A and B its base block needs (A's
// columns of the block's input features, B's rows of its output
// features, strided views of the whole matrices), so that on X and Y
// ranks the adapter's product splits exactly as the base's:
//
//	z = drop(x)·A[:, cols]ᵀ, summed over the ranks that split the input
//	    (the base's partial products are summed there too), [N, r]
//	y[:, rows] += s·z·B[rows, :]ᵀ
//
// and its backward all-reduces the rank-r dz over the ranks that split
// the output. Each rank adds its blocks' gradients into the whole
// gradient tensors; ReduceGradients sums A's over the input's ranks and
// B's over the output's, then both over the ranks that split the batch
// (data and Z), after which every rank holds the same gradients.

// The projections of a decoder block, in blockWeights' (and a layer's
// state dict's) order; checkpoints.LoRAModules names them.
const (
	projQ = iota
	projK
	projV
	projO
	projGate
	projUp
	projDown
	numProj
)

// An Adapter is one projection's LoRA matrices, with the part of them
// this rank's base block multiplies.
type Adapter struct {
	A, B *engine.Param // lora_A [r, in], lora_B [out, r], whole

	// r0, r1 are the base block's output rows (B's rows), c0, c1 its
	// input columns (A's columns); in and out are the groups that split
	// the projection's input and output features (nil: a group of one
	// rank, as on one rank).
	r0, r1, c0, c1 int
	in, out        comm.Comm
}

// aBlock is A's columns [c0, c1) of t (A's value or gradient), a strided
// view: Gemm's leading dimension is A's full width.
func (ad *Adapter) aBlock(t *engine.Tensor) *engine.Tensor {
	r, in := ad.A.Full[0], ad.A.Full[1]
	return t.View(ad.c0, (r-1)*in+(ad.c1-ad.c0))
}

// bBlock is B's rows [r0, r1) of t (B's value or gradient).
func (ad *Adapter) bBlock(t *engine.Tensor) *engine.Tensor {
	r := ad.B.Full[1]
	return t.View(ad.r0*r, (ad.r1-ad.r0)*r)
}

// loraState is what a model with adapters keeps beside its layers.
type loraState struct {
	cfg      *checkpoints.AdapterConfig
	scale    float32
	params   []*engine.Param // every A and B, in PEFT's state-dict order
	frozenDW *engine.Tensor  // [max(H, D)]: the frozen norms' discarded weight gradient
	// keys are the training pass's sequence keys for the dropout masks
	// (Batch.Keys); nil numbers the sequences from 0.
	keys []uint64
	host []float32 // applyDropout's buffer, reused
}

// checkLoRA checks the options' adapter against the model and its grid.
func checkLoRA(cfg *checkpoints.Config, opt Options) error {
	a := opt.LoRA
	if a == nil {
		if opt.BaseDType != engine.F32 {
			return fmt.Errorf("llama: base weights in %v need adapters (the trained weights are float32)", opt.BaseDType)
		}
		return nil
	}
	if err := a.Validate(); err != nil {
		return err
	}
	if opt.BaseDType != engine.F32 && opt.BaseDType != engine.BF16 {
		return fmt.Errorf("llama: base weights in %v: want f32 or bf16", opt.BaseDType)
	}
	if opt.Activations == engine.BF16 && opt.BaseDType != engine.BF16 {
		return fmt.Errorf("llama: bf16 activations multiply the frozen base in bf16: hold it in bf16, not %v", opt.BaseDType)
	}
	return nil
}

// newAdapters allocates zero adapters on m's layers, as opt.LoRA targets.
func (m *Model) newAdapters() {
	a, b := m.Options.LoRA, m.backend
	st := &loraState{cfg: a, scale: float32(a.Scale())}
	specs := m.Config.AdapterTensorSpecs(a)
	i := 0
	for l, layer := range m.Layers {
		base := [numProj]*engine.Param{layer.Q, layer.K, layer.V, layer.O, layer.Gate, layer.Up, layer.Down}
		for p, module := range checkpoints.LoRAModules() {
			if !a.Targets(module) {
				continue
			}
			mk := func(s checkpoints.TensorSpec) *engine.Param {
				p := &engine.Param{
					Name: s.Name, Full: append([]int(nil), s.Shape...),
					Split: s.Split, Shard: engine.WholeShard(s.Shape[0], s.Shape[1]),
					Value: b.Alloc(engine.F32, s.Shape...), Grad: b.Alloc(engine.F32, s.Shape...),
					Decay: true, // as PEFT trains them: every non-bias, non-norm weight decays
				}
				if m.d.act == engine.BF16 {
					p.Copy = b.Alloc(engine.BF16, s.Shape...) // the passes multiply by it
				}
				return p
			}
			sh := base[p].Shard
			// A's columns are the target's input columns, B's rows its
			// output rows: each sums over the ranks that split them, as
			// the target's declared split says.
			rows, cols := base[p].Split.Axes()
			ad := &Adapter{A: mk(specs[i]), B: mk(specs[i+1]), r0: sh.Row0, r1: sh.Row1, c0: sh.Col0, c1: sh.Col1, in: m.axisGroup(cols), out: m.axisGroup(rows)}
			if specs[i].Name != checkpoints.LoRATensorName(l, module, "A") {
				panic("llama: adapter order differs from checkpoints.AdapterTensorSpecs")
			}
			layer.LoRA[p] = ad
			st.params = append(st.params, ad.A, ad.B)
			i += 2
		}
	}
	st.frozenDW = b.Alloc(engine.F32, max(m.d.H, m.d.D)) // a norm's [H/X], or a head norm's [D]
	m.lora = st
}

// axisGroup is the group of the ranks along a model-parallel axis, nil
// for none or an axis of one rank (m.gx, m.gy).
func (m *Model) axisGroup(a checkpoints.Axis) comm.Comm {
	switch a {
	case checkpoints.AxisX:
		return m.gx
	case checkpoints.AxisY:
		return m.gy
	}
	return nil
}

// Adapter is the model's adapter configuration, nil without adapters.
func (m *Model) Adapter() *checkpoints.AdapterConfig {
	if m.lora == nil {
		return nil
	}
	return m.lora.cfg
}

// Trainable lists the parameters a training step updates: the adapters'
// matrices with adapters (in PEFT's order), every parameter without.
func (m *Model) Trainable() []*engine.Param {
	if m.lora != nil {
		return m.lora.params
	}
	return m.Params()
}

// InitAdapters initialises the adapters as PEFT does: A from
// kaiming_uniform_(a=√5), i.e. U(−1/√in, 1/√in), B zero, so that the
// adapted model starts equal to its base. Each matrix draws from its own
// stream of seed; every rank of a grid draws the same.
func (m *Model) InitAdapters(seed uint64) {
	if m.lora == nil {
		return
	}
	for i, p := range m.lora.params {
		v := make([]float32, p.Value.Len())
		if i%2 == 0 { // A
			r := rand.New(rand.NewPCG(seed, uint64(i)*0x9E3779B97F4A7C15))
			bound := 1 / math.Sqrt(float64(p.Full[1]))
			for j := range v {
				v[j] = float32((2*r.Float64() - 1) * bound)
			}
		}
		m.backend.Upload(p.Value, v)
		m.refreshCopy(p, p.Value)
	}
}

// LoadAdapters reads every adapter matrix by PEFT name from r (an
// adapter's weights or a training checkpoint's).
func (m *Model) LoadAdapters(r interface {
	ReadFloat32(name string) ([]float32, error)
}) error {
	if m.lora == nil {
		return errors.New("llama: the model has no adapters to load")
	}
	for _, p := range m.lora.params {
		v, err := r.ReadFloat32(p.Name)
		if err != nil {
			return err
		}
		if len(v) != p.Value.Len() {
			return fmt.Errorf("llama: adapter tensor %q has %d elements, want %d", p.Name, len(v), p.Value.Len())
		}
		m.backend.Upload(p.Value, v)
		m.refreshCopy(p, p.Value)
	}
	return nil
}

// AdapterTensors returns the adapters' matrices by PEFT name, ready for
// checkpoints.SaveAdapter.
func (m *Model) AdapterTensors() []checkpoints.Tensor {
	if m.lora == nil {
		return nil
	}
	out := make([]checkpoints.Tensor, len(m.lora.params))
	for i, p := range m.lora.params {
		v := make([]float32, p.Value.Len())
		m.backend.Download(v, p.Value)
		out[i] = checkpoints.Tensor{Name: p.Name, Shape: append([]int(nil), p.Full...), Data: v}
	}
	return out
}

// loraForward adds projection p's adapter product into out, the base
// linear's output (this rank's block of it): z = drop(x)·Aᵀ [N, r] (kept
// in z for the backward), out += s·z·Bᵀ. It does nothing where the
// projection has no adapter. s is the training pass's scratch, nil when
// evaluating (no dropout).
func (m *Model) loraForward(l, p int, z, x, out *engine.Tensor, s *loraScratch) {
	ad := m.Layers[l].LoRA[p]
	if ad == nil {
		return
	}
	m.loraZ(l, p, z, x, s)
	r, n := m.lora.cfg.R, x.Dim(0)
	m.backend.Gemm(engine.GemmParams{TransB: true, M: n, N: ad.r1 - ad.r0, K: r, Alpha: m.lora.scale, Beta: 1, LDA: r, LDB: r, LDC: out.Dim(1)},
		z, ad.bBlock(passWeight(ad.B)), out)
}

// loraZ computes projection p's z = drop(x)·Aᵀ alone: this rank's
// columns' partial product, summed over the ranks that split the input.
func (m *Model) loraZ(l, p int, z, x *engine.Tensor, s *loraScratch) {
	ad := m.Layers[l].LoRA[p]
	r, n := m.lora.cfg.R, x.Dim(0)
	x = m.dropped(l, p, x, s)
	acc := m.partial(z) // a bf16 z summed in float32 and rounded once
	m.backend.Gemm(engine.GemmParams{TransB: true, M: n, N: r, K: ad.c1 - ad.c0, Alpha: 1, LDA: x.Dim(1), LDB: ad.A.Full[1], LDC: r},
		x, ad.aBlock(passWeight(ad.A)), acc)
	m.roundSum(z, acc, ad.in)
}

// loraBackward is loraForward's backward: from dy, the gradient of the
// projection's output (this rank's block), it adds the adapter's
// gradients of this rank's blocks
//
//	dB += s·dyᵀ·z,  dz = s·dy·B,  dA += dzᵀ·drop(x)
//
// and adds drop'(dz·A) into din, the projection's input gradient. din is
// then a partial sum over the ranks that split the output, as the base's
// input gradient is (the caller sums them together); dz, which dA
// needs whole, is all-reduced over them.
func (m *Model) loraBackward(l, p int, z, x, dy, din *engine.Tensor, s *loraScratch) {
	ad := m.Layers[l].LoRA[p]
	if ad == nil {
		return
	}
	b, r, sc := m.backend, m.lora.cfg.R, m.lora.scale
	n, inW, rows := x.Dim(0), ad.A.Full[1], ad.r1-ad.r0
	cols := ad.c1 - ad.c0
	dz := s.dz.View(0, n, r)
	b.Gemm(engine.GemmParams{TransA: true, M: rows, N: r, K: n, Alpha: sc, Beta: 1, LDA: dy.Dim(1), LDB: r, LDC: r}, dy, z, ad.bBlock(ad.B.Grad))
	bw, aw := ad.bBlock(passWeight(ad.B)), ad.aBlock(passWeight(ad.A))
	b.Gemm(engine.GemmParams{M: n, N: r, K: rows, Alpha: sc, LDA: dy.Dim(1), LDB: r, LDC: r}, dy, bw, dz)
	din = m.partial(din) // where the base's input gradient accumulates
	if m.lora.cfg.LoRADropout == 0 {
		b.Gemm(engine.GemmParams{M: n, N: cols, K: r, Alpha: 1, Beta: 1, LDA: r, LDB: inW, LDC: din.Dim(1)}, dz, aw, din)
	} else {
		dxd := s.xd.View(0, n, cols)
		b.Gemm(engine.GemmParams{M: n, N: cols, K: r, Alpha: 1, LDA: r, LDB: inW, LDC: cols}, dz, aw, dxd)
		m.applyDropout(l, p, dxd, dxd)
		b.Axpy(din, 1, dxd)
	}
	allReduce(dz, ad.out)
	xd := m.dropped(l, p, x, s)
	b.Gemm(engine.GemmParams{TransA: true, M: r, N: cols, K: n, Alpha: 1, Beta: 1, LDA: r, LDB: xd.Dim(1), LDC: inW}, dz, xd, ad.aBlock(ad.A.Grad))
}

// dropped returns drop(x): x itself without dropout, else x with the
// pass's mask applied, in the scratch.
func (m *Model) dropped(l, p int, x *engine.Tensor, s *loraScratch) *engine.Tensor {
	if s == nil || s.xd == nil { // evaluating, or no dropout
		return x
	}
	xd := s.xd.View(0, x.Dim(0), x.Dim(1))
	m.applyDropout(l, p, xd, x)
	return xd
}

// applyDropout writes src's elements [N, in], each kept with probability
// 1 − q and scaled by 1/(1 − q) or zeroed, into dst (which may be src).
// The mask of an element is a hash of its sequence's key (Batch.Keys),
// its position in the sequence, its feature, the layer and the
// projection: the same in a pass's forward, its recomputation and its
// backward, and whatever the micro-batch or rank the sequence is in. It
// runs on the host: the adapters' inputs cross once each way.
func (m *Model) applyDropout(l, p int, dst, src *engine.Tensor) {
	q := m.lora.cfg.LoRADropout
	if cap(m.lora.host) < src.Len() {
		m.lora.host = make([]float32, src.Len())
	}
	v := m.lora.host[:src.Len()]
	m.backend.Download(v, src)
	n, in := src.Dim(0), src.Dim(1)
	c0 := uint64(m.Layers[l].LoRA[p].c0) // the features' global index, whatever the grid
	T := m.ws.T
	keep := float32(1 / (1 - q))
	// drop(x) of a bf16 x is a bf16 activation, rounded as one rank's
	// bf16 xd holds it even where a grid keeps xd float32 (loraPlan).
	half := src.DType() == engine.BF16
	threshold := uint64(q * (1 << 53))
	site := uint64(l)<<8 | uint64(p)
	for row := 0; row < n; row++ {
		s, t := row/T, row%T
		key := uint64(s)
		if m.lora.keys != nil {
			key = m.lora.keys[s]
		}
		base := mix(mix(mix(key)^site) ^ uint64(t))
		vr := v[row*in : (row+1)*in]
		for j := range vr {
			if mix(base^(c0+uint64(j)))>>11 < threshold {
				vr[j] = 0
			} else if vr[j] *= keep; half {
				vr[j] = checkpoints.BF16ToFloat32(checkpoints.Float32ToBF16(vr[j]))
			}
		}
	}
	m.backend.Upload(dst, v)
}

// mix is SplitMix64's finaliser: a bijective hash of 64 bits.
func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// loraScratch is the adapters' workspace shared by the layers: the rank-r
// gradient and, with dropout, one projection's dropped input.
type loraScratch struct {
	dz, xd *engine.Tensor // [N, r], [N, max in] (nil without dropout)
}

// loraPlan lists the adapters' workspace tensors: each adapted
// projection's z [N, r] in each layer set (sets of them), then the
// shared scratch for training.
func loraPlan(d dims, N, sets int, train bool) []tensorPlan {
	a := d.lora
	if a == nil {
		return nil
	}
	var p []tensorPlan
	n := 0
	for _, module := range checkpoints.LoRAModules() {
		if a.Targets(module) {
			n++
		}
	}
	for i := 0; i < sets*n; i++ {
		p = append(p, tensorPlan{"lora_z", d.act, []int{N, a.R}})
	}
	if train {
		// dz is summed over the ranks that split the output after its
		// partial product feeds the input gradient, and with dropout
		// drop'(dz·A) joins that float32 partial sum from xd: on such
		// grids both stay float32 and are never rounded (grid.go,
		// partial).
		dt := d.act
		if d.x > 1 || d.y > 1 {
			dt = engine.F32
		}
		p = append(p, tensorPlan{"lora_dz", dt, []int{N, a.R}})
		if a.LoRADropout > 0 {
			p = append(p, tensorPlan{"lora_xd", dt, []int{N, max(d.H, d.Q, d.I)}})
		}
	}
	return p
}

// reduceAdapterGradients completes the adapters' gradients on a grid:
// each rank added its blocks' into the whole tensors, so A's are summed
// over the ranks that split the projection's input, B's over those that
// split its output, then both over the ranks that split the batch (data
// and Z). Every rank then holds the same gradients.
func (m *Model) reduceAdapterGradients() error {
	g := m.Options.Parallel
	bs := m.gradientBuckets()
	for _, l := range m.Layers {
		for _, ad := range l.LoRA {
			if ad != nil {
				bs.add(ad.A.Grad, ad.in)
				bs.add(ad.B.Grad, ad.out)
			}
		}
	}
	bs.finish() // the blocks are assembled before the batch's ranks add theirs
	for _, p := range m.lora.params {
		bs.add(p.Grad, g.DataZ)
	}
	bs.finish()
	return nil
}
