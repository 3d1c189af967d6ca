package finetune

import (
	"fmt"
	"math"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

// OptimizerConfig chooses and tunes the optimizer.
type OptimizerConfig struct {
	Name        string  `yaml:"name" json:"name" default:"adamw" resume:"same" help:"adamw or sgd"`
	Beta1       float64 `yaml:"beta1" json:"beta1" default:"0.9" help:"AdamW β1"`
	Beta2       float64 `yaml:"beta2" json:"beta2" default:"0.95" help:"AdamW β2"`
	Eps         float64 `yaml:"eps" json:"eps" default:"1e-8" help:"AdamW ε"`
	WeightDecay float64 `yaml:"weight_decay" json:"weight_decay" default:"0.1" help:"decoupled weight decay: p -= lr·wd·p before the update"`
	DecayNorms  bool    `yaml:"decay_norms" json:"decay_norms" help:"apply weight decay to RMSNorm weights too (off by default, as is usual)"`
	Moments     string  `yaml:"moments" json:"moments" default:"fp32" help:"AdamW's moments: fp32; bf16 (2 bytes each, updated in float32 and rounded stochastically, keyed by the seed, step, tensor and element, so alike on every grid); or int8 (1 byte each and a float32 scale a block of 64 columns: m linear, v in the fourth-root domain, rounded stochastically alike; not with zero 1). CPU backend"`
	Fused       bool    `yaml:"fused" help:"apply AdamW unit by unit during the backward pass (a layer's, the head's, the embedding's weights as soon as their gradients are final), so that no whole-model gradient is held: 4 bytes a parameter fewer, bit for bit the same steps; one micro-batch a step (batch_size = micro_batch), full fine-tuning, zero 0; with clip > 0 a norm-only forward and backward first, about twice a step's compute"`
	// Seed keys bf16 and 8-bit moments' stochastic rounding (a run's
	// seed; newRunOptimizer sets it).
	Seed uint64 `yaml:"-" json:"-"`
}

// Validate checks the configuration.
func (c OptimizerConfig) Validate() error {
	switch c.Name {
	case "adamw":
		if !(c.Beta1 >= 0 && c.Beta1 < 1) || !(c.Beta2 >= 0 && c.Beta2 < 1) || !(c.Eps > 0) {
			return fmt.Errorf("finetune: adamw needs 0 ≤ β1, β2 < 1 and ε > 0, got %v, %v, %v", c.Beta1, c.Beta2, c.Eps)
		}
	case "sgd":
	default:
		return fmt.Errorf("finetune: optimizer %q (want adamw or sgd)", c.Name)
	}
	switch {
	case c.Moments != "" && c.Moments != "fp32" && c.Moments != "bf16" && c.Moments != "int8":
		return fmt.Errorf("finetune: moments %q (want fp32, bf16 or int8)", c.Moments)
	case c.compactMoments() && c.Name != "adamw":
		return fmt.Errorf("finetune: %s moments are AdamW's; optimizer %s has none", c.Moments, c.Name)
	case c.Fused && c.Name != "adamw":
		return fmt.Errorf("finetune: optimizer.fused: true fuses AdamW's step into the backward; optimizer.name is %s (want adamw)", c.Name)
	}
	if c.WeightDecay < 0 || math.IsInf(c.WeightDecay, 0) || math.IsNaN(c.WeightDecay) {
		return fmt.Errorf("finetune: weight decay %v (want ≥ 0)", c.WeightDecay)
	}
	return nil
}

// Optimizer updates parameters from their gradients. Its state (AdamW's
// two moments) lives on the backend beside the parameters, shaped like
// each rank's shards, so that it is saved like the weights (in pieces
// with their full tensors' shapes) and read onto any other grid.
type Optimizer struct {
	cfg     OptimizerConfig
	backend engine.Backend
	params  []*engine.Param
	m, v    []*engine.Tensor      // AdamW moments, parallel to params; nil for SGD
	int8    []*engine.Int8Moments // 8-bit moments' scales and pieces, parallel to params; nil otherwise
	fused   []engine.AdamWTensors // params with their moments and decay, for AdamWStep
	index   map[*engine.Param]int // each param's place in params, for a fused step's units (AdamW)
	zero    *zeroShard            // ZeRO-1's chunks (zero.go); nil without
	// Step counts the updates done; AdamW's bias correction uses it.
	Step int
}

// NewOptimizer allocates the optimizer's state for params.
func NewOptimizer(b engine.Backend, params []*engine.Param, cfg OptimizerConfig) (*Optimizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkCompact(b, params, cfg); err != nil {
		return nil, err
	}
	o := &Optimizer{cfg: cfg, backend: b, params: params}
	if cfg.Name == "adamw" {
		o.index = map[*engine.Param]int{}
		for i, p := range params {
			// A fused optimizer's model has no gradients outside its
			// step: the moments take the shard's shape from its weight.
			shape := llama.ShardShape(p)
			o.m = append(o.m, b.Alloc(cfg.momentDType(), shape...))
			o.v = append(o.v, b.Alloc(cfg.momentDType(), shape...))
			o.fused = append(o.fused, engine.AdamWTensors{Param: p.Value, Grad: p.Grad, M: o.m[i], V: o.v[i],
				Copy: p.Copy, Low: p.Low, Round: cfg.round(p, 0), Int8: o.newInt8(p), WeightDecay: float32(o.weightDecay(p))})
			o.index[p] = i
		}
	}
	return o, nil
}

// unitStep is one AdamW step at h applied unit by unit: the llama.Updater
// of a fused step (llama.Options.FusedOptimizer), whose gradients exist
// only while their unit is updated.
type unitStep struct {
	o *Optimizer
	h engine.AdamWParams
}

// UpdateUnit is AdamWStep on params alone, with their gradients of now:
// elementwise, so bit for bit those params' part of one AdamWStep over
// every parameter with the same control values.
func (u unitStep) UpdateUnit(params []*engine.Param, ctl *engine.Tensor, maxNorm float32) {
	ts := make([]engine.AdamWTensors, len(params))
	for k, p := range params {
		i, ok := u.o.index[p]
		if !ok {
			panic("finetune: fused step of a parameter the optimizer does not hold: " + p.Name)
		}
		ts[k] = u.o.fused[i]
		ts[k].Grad = p.Grad
	}
	u.o.backend.AdamWStep(ts, u.h, maxNorm, ctl)
}

// hyper are AdamW's hyper-parameters for the step at lr that o.Step
// counts.
func (o *Optimizer) hyper(lr float64) engine.AdamWParams {
	return engine.AdamWParams{LR: float32(lr), Beta1: float32(o.cfg.Beta1), Beta2: float32(o.cfg.Beta2),
		Eps: float32(o.cfg.Eps), Step: o.Step}
}

// momentDType is the dtype AdamW's moments are held in.
func (c OptimizerConfig) momentDType() engine.DType {
	switch c.Moments {
	case "bf16":
		return engine.BF16
	case "int8":
		return engine.I8
	}
	return engine.F32
}

// compactMoments reports whether the moments are held in fewer bits
// than float32's.
func (c OptimizerConfig) compactMoments() bool { return c.Moments == "bf16" || c.Moments == "int8" }

// round is the stochastic rounding key of p's bf16 or 8-bit moments, for
// the part of p's shard that starts off elements in (a ZeRO chunk); nil
// for float32 moments.
func (c OptimizerConfig) round(p *engine.Param, off int) *engine.MomentRound {
	if !c.compactMoments() {
		return nil
	}
	ix := engine.ElementIndex{Shard: p.Shard, Cols: p.Full[len(p.Full)-1]}
	return &engine.MomentRound{Seed: c.Seed, Tensor: engine.TensorKey(p.Name), Index: ix.Offset(off)}
}

// checkCompact refuses split masters (engine.Param.Low) to an optimizer
// other than AdamW, whose fused step alone updates them in place, and
// bf16 or 8-bit moments to a backend whose step does not take them.
func checkCompact(b engine.Backend, params []*engine.Param, cfg OptimizerConfig) error {
	for _, p := range params {
		if p.Low != nil && cfg.Name != "adamw" {
			return fmt.Errorf("finetune: a split master is updated by AdamW's fused step only, not by %s", cfg.Name)
		}
	}
	if _, ok := b.(engine.MasterSplitter); cfg.compactMoments() && !ok {
		return fmt.Errorf("finetune: the %s backend holds AdamW's moments in float32 only, not %s", b.Name(), cfg.Moments)
	}
	return nil
}

// weightDecay is p's decoupled weight decay: none for norm weights unless
// the configuration decays them.
func (o *Optimizer) weightDecay(p *engine.Param) float64 {
	if !p.Decay && !o.cfg.DecayNorms {
		return 0
	}
	return o.cfg.WeightDecay
}

// updateClipped is AdamW's Update as one fused step on the device,
// clipping the gradients to maxNorm (≤ 0: no clipping) and skipping the
// update when ctl's norm or loss is not finite (Backend.AdamWStep).
func (o *Optimizer) updateClipped(lr, maxNorm float64, ctl *engine.Tensor) error {
	o.Step++
	o.backend.AdamWStep(o.fused, o.hyper(lr), float32(maxNorm), ctl)
	if o.zero != nil {
		// A step skipped on a non-finite norm or loss left every chunk
		// as it was; gathering them is harmless.
		if err := o.zero.gather(o.params, passWeight); err != nil {
			return err
		}
	}
	return nil
}

// Update applies one step at learning rate lr to every parameter. A
// ZeRO optimizer (NewShardedOptimizer) updates by TrainStep's fused step
// only: Update panics.
func (o *Optimizer) Update(lr float64) {
	if o.zero != nil {
		panic("finetune: Update on a ZeRO optimizer: its step is TrainStep's fused AdamWStep")
	}
	for _, t := range o.fused {
		if t.Low != nil || t.Round != nil {
			panic("finetune: Update on compact state (a split master, bf16 or 8-bit moments): its step is TrainStep's fused AdamWStep")
		}
	}
	o.Step++
	for i, p := range o.params {
		wd := o.weightDecay(p)
		switch o.cfg.Name {
		case "adamw":
			o.backend.AdamW(p.Value, p.Grad, o.m[i], o.v[i], engine.AdamWParams{
				LR: float32(lr), Beta1: float32(o.cfg.Beta1), Beta2: float32(o.cfg.Beta2),
				Eps: float32(o.cfg.Eps), WeightDecay: float32(wd), Step: o.Step,
			})
		case "sgd":
			if wd != 0 {
				o.backend.Scale(p.Value, float32(1-lr*wd))
			}
			o.backend.Axpy(p.Value, float32(-lr), p.Grad)
		}
		// A mixed-precision model multiplies by the bf16 copy: it must
		// follow the master weight (AdamWStep writes it in its own pass).
		if p.Copy != nil {
			o.backend.Copy(p.Copy, p.Value)
		}
	}
}

// newInt8 allocates the scales of p's 8-bit moments (its shard's pieces,
// engine.Int8Pieces) and records them; nil unless the moments are int8.
func (o *Optimizer) newInt8(p *engine.Param) *engine.Int8Moments {
	if o.cfg.Moments != "int8" {
		return nil
	}
	ix := engine.ElementIndex{Shard: p.Shard, Cols: p.Full[len(p.Full)-1]}
	q := &engine.Int8Moments{Starts: engine.Int8Pieces(ix, engine.Elements(llama.ShardShape(p)))}
	q.MScale, q.VScale = o.backend.Alloc(engine.F32, len(q.Starts)-1), o.backend.Alloc(engine.F32, len(q.Starts)-1)
	o.int8 = append(o.int8, q)
	return q
}

// moment is parameter i's moment k (1: m, 2: v) as float32, which done
// releases: the moment itself, or 8-bit moments decoded into a
// temporary.
func (o *Optimizer) moment(i, k int) (t *engine.Tensor, done func()) {
	t = [2][]*engine.Tensor{o.m, o.v}[k-1][i]
	if o.int8 == nil || t == nil {
		return t, func() {}
	}
	f := o.backend.Empty(engine.F32, t.Shape...)
	o.backend.(engine.MasterSplitter).DecodeMoment(f, t, o.int8[i], k-1)
	return f, func() { o.backend.Free(f) }
}

// setMoment sets parameter i's moment k (1: m, 2: v) by fill, which
// writes a float32 tensor of its shape: the moment itself, or for 8-bit
// moments a temporary then encoded.
func (o *Optimizer) setMoment(i, k int, fill func(*engine.Tensor) error) error {
	t := [2][]*engine.Tensor{o.m, o.v}[k-1][i]
	if o.int8 == nil {
		return fill(t)
	}
	f := o.backend.Empty(engine.F32, t.Shape...)
	defer o.backend.Free(f)
	if err := fill(f); err != nil {
		return err
	}
	o.backend.(engine.MasterSplitter).EncodeMoment(t, o.int8[i], k-1, f)
	return nil
}

// Moments returns AdamW's state tensors (first and second moments),
// parallel to the parameters; nil for SGD. Under ZeRO (NewShardedOptimizer)
// they are this rank's flat chunks (nil for an empty one).
func (o *Optimizer) Moments() (m, v []*engine.Tensor) { return o.m, o.v }

// Free releases the optimizer's state.
func (o *Optimizer) Free() {
	for i := range o.m {
		if o.m[i] != nil {
			o.backend.Free(o.m[i])
			o.backend.Free(o.v[i])
		}
	}
	for _, q := range o.int8 {
		o.backend.Free(q.MScale)
		o.backend.Free(q.VScale)
	}
	o.m, o.v, o.fused, o.int8 = nil, nil, nil, nil
}

// GradNorm is the global L2 norm of all gradients, summed in float64 in
// parameter order.
func GradNorm(b engine.Backend, params []*engine.Param) float64 {
	total := 0.0
	for _, s := range engine.SumSquaresEach(b, grads(params)) {
		total += float64(s)
	}
	return math.Sqrt(total)
}

// grads are the parameters' gradients, in order.
func grads(params []*engine.Param) []*engine.Tensor {
	gs := make([]*engine.Tensor, len(params))
	for i, p := range params {
		gs[i] = p.Grad
	}
	return gs
}

// ClipGradNorm scales every gradient by maxNorm/(norm+1e-6) when the
// global norm exceeds maxNorm, as torch.nn.utils.clip_grad_norm_ does, and
// returns the norm before clipping and whether it clipped. maxNorm ≤ 0
// disables clipping; a non-finite norm leaves the gradients alone.
func ClipGradNorm(b engine.Backend, params []*engine.Param, maxNorm float64) (norm float64, clipped bool) {
	norm = GradNorm(b, params)
	return norm, clipTo(b, params, norm, maxNorm)
}

// clipTo scales the gradients, whose global norm is norm, down to maxNorm
// (see ClipGradNorm) and reports whether it did.
func clipTo(b engine.Backend, params []*engine.Param, norm, maxNorm float64) bool {
	if maxNorm <= 0 {
		return false
	}
	if coef := maxNorm / (norm + 1e-6); coef < 1 {
		for _, p := range params {
			b.Scale(p.Grad, float32(coef))
		}
		return true
	}
	return false
}
