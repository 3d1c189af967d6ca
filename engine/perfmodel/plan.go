package perfmodel

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/internal/units"
)

// A Step is the shape of one optimizer step on a grid.
type Step struct {
	Grid Grid `json:"grid"`
	// SeqLen is the tokens per sequence.
	SeqLen int `json:"seq_len"`
	// MicroBatch is the sequences per micro-batch on each (data, z)
	// coordinate; the X·Y ranks sharing it see the same tokens.
	MicroBatch int `json:"micro_batch"`
	// MicroBatches is the number of micro-batches whose gradients
	// accumulate into one optimizer step.
	MicroBatches int `json:"micro_batches"`
	// Recompute is the engine's recomputation: full re-runs each
	// decoder layer's forward before its backward, keeping only the
	// layers' inputs; selective re-runs only its norms and SwiGLU.
	Recompute llama.Recompute `json:"recompute"`
}

// GlobalBatchTokens is the tokens of one optimizer step over all ranks.
func (s Step) GlobalBatchTokens() int64 {
	return int64(s.MicroBatch) * int64(s.SeqLen) * int64(s.MicroBatches) * int64(s.Grid.Data) * int64(s.Grid.Z)
}

func (s Step) validate(cfg *checkpoints.Config) error {
	if s.SeqLen < 1 || s.MicroBatch < 1 || s.MicroBatches < 1 {
		return fmt.Errorf("perfmodel: step needs a positive sequence length, micro-batch and micro-batch count (got %d, %d, %d)", s.SeqLen, s.MicroBatch, s.MicroBatches)
	}
	return s.Grid.Validate(cfg)
}

// Recompute chooses activation recomputation in Search.
type Recompute int

const (
	// RecomputeAuto tries none, selective and full recomputation and
	// keeps whichever is fastest and fits.
	RecomputeAuto Recompute = iota
	// RecomputeOn is full recomputation alone.
	RecomputeOn
	// RecomputeOff is none.
	RecomputeOff
	// RecomputeSelective is selective recomputation alone.
	RecomputeSelective
)

func (r Recompute) String() string {
	switch r {
	case RecomputeOn:
		return "on"
	case RecomputeOff:
		return "off"
	case RecomputeSelective:
		return "selective"
	}
	return "auto"
}

// ParseRecompute accepts "auto", "on" (full), "off" and "selective".
func ParseRecompute(s string) (Recompute, error) {
	for _, r := range []Recompute{RecomputeAuto, RecomputeOn, RecomputeOff, RecomputeSelective} {
		if r.String() == s {
			return r, nil
		}
	}
	return 0, fmt.Errorf("perfmodel: unknown recompute mode %q (want auto, on, off or selective)", s)
}

// modes are the engine's recomputation modes r lets Search try.
func (r Recompute) modes() []llama.Recompute {
	switch r {
	case RecomputeOn:
		return []llama.Recompute{llama.RecomputeFull}
	case RecomputeOff:
		return []llama.Recompute{llama.RecomputeNone}
	case RecomputeSelective:
		return []llama.Recompute{llama.RecomputeSelective}
	}
	return []llama.Recompute{llama.RecomputeNone, llama.RecomputeSelective, llama.RecomputeFull}
}

// Options are the planner's assumptions; the zero value is the default.
type Options struct {
	// Precision is the engine's: float32 (the zero value), or mixed
	// precision, which the engine computes on the grids that
	// llama.CheckActivations accepts (every one), so that Search tries
	// only those.
	Precision engine.Precision
	// Zero is the ZeRO stage (finetune's zero): 1 shards AdamW's moments
	// over the data ranks, which all-gather the updated weights once a
	// step (Collectives, EstimateMemory).
	Zero int
	// SplitMaster is finetune's master: split (mixed precision only):
	// each matrix's float32 master held as its bf16 copy and a 16-bit
	// residual.
	SplitMaster bool
	// Moments is the dtype of AdamW's moments: F32 (the zero value), BF16
	// or I8 (finetune's optimizer.moments bf16 and int8; I8 not with
	// Zero).
	Moments engine.DType
	// Fused is finetune's optimizer.fused: AdamW applied unit by unit in
	// the backward, so that only the units in flight hold gradients
	// (llama.Work.FusedOptimizer). It takes one micro-batch a step, so
	// Search tries that alone, and is planned with finetune's default
	// clip (1): a norm-only forward and backward before the one that
	// updates, whose kernels (llama.Kernels, Work.Clip) and collectives
	// count twice, and each unit's gradient sums waited for before its
	// update. Not with ZeRO or adapters.
	Fused bool
	// LoRA, if positive, plans a LoRA fine-tune of this rank on
	// finetune's default projections (q, k, v and o_proj) and a base
	// frozen in bf16: its memory is the frozen base, the adapters and
	// their state (llama.Itemize); its step time and communication are
	// the full fine-tune's, an upper bound (a LoRA step skips the base's
	// weight gradients and their reduction).
	LoRA int
	// Cheapest has Choose search the state options and the GPU counts
	// (Cheapest) rather than plan the job with these.
	Cheapest bool
	// Recompute restricts Search's recomputation choice.
	Recompute Recompute
	// NoOverlap serialises communication and compute; by default the
	// engine overlaps them as AxoNN does (OAG, OAR, ORS).
	NoOverlap bool
	// Efficiency, when positive, replaces the device's large-GEMM
	// efficiency (KernelRates.GEMM; the smaller GEMMs scale with it), or
	// on a device described by a measured step efficiency that one.
	Efficiency float64
	// Measured are steps measured on the device (ReadMeasurements, from
	// `memtrain bench step --device cuda`): on a device with kernel
	// rates, a step whose rank's work one of them measured (see
	// measured) takes its time instead of the kernel list's modelled one.
	Measured []Measurement
	// MemoryFraction overrides DefaultMemoryFraction when positive.
	MemoryFraction float64
	// TopK keeps only the K fastest grids in Search; 0 keeps all.
	TopK int
	// FSBandwidth is the shared filesystem's aggregate write bandwidth
	// in bytes/s for the checkpoint's save time (0: DefaultFSBandwidth).
	FSBandwidth float64
	// MicroBatch fixes Search's micro-batch to this many sequences over
	// the whole grid (each (data, z) coordinate takes MicroBatch/(Data·Z),
	// as finetune's micro_batch); grids it does not split over are left
	// out. 0 tries every micro-batch.
	MicroBatch int
}

// UsableMemory is the memory one rank of a grid of ranks ranks may use on
// d: the memory fraction (o.MemoryFraction, else DefaultMemoryFraction)
// of the device's, or of its share of the node's on a SharedNode device.
func (o Options) UsableMemory(d Device, ranks int) int64 {
	f := o.MemoryFraction
	if f <= 0 {
		f = DefaultMemoryFraction
	}
	return int64(f * float64(d.MemoryBytes) / d.shareOf(ranks))
}

// usable is the memory one rank of grid g may use.
func (o Options) usable(d Device, g Grid) int64 { return o.UsableMemory(d, g.Size()) }

// Overlaps reports whether communication hides behind compute on d: unless
// o.NoOverlap, or d is a SharedNode device, whose cores that compute also
// communicate.
func (o Options) Overlaps(d Device) bool { return !o.NoOverlap && !d.SharedNode }

// A Plan is a step's predicted cost on a device.
type Plan struct {
	Step
	Memory Memory `json:"memory"`
	// ComputeSeconds is the rank's kernels' time but the optimizer's:
	// the step's kernel list (llama.Kernels) each at its modelled time
	// (Device.Kernels), or on a device described by a measured step
	// efficiency the list's FLOPs at that share of the peak.
	ComputeSeconds float64 `json:"compute_seconds"`
	// OptimizerSeconds is the fused AdamW update's (AdamWStep), the
	// list's memory-bound last kernels.
	OptimizerSeconds float64 `json:"optimizer_seconds"`
	// Kernels is the list's time by kernel class, the optimizer's
	// included: ComputeSeconds + OptimizerSeconds in all.
	Kernels KernelSeconds `json:"kernel_seconds"`
	// Source says how the step time was found: "modelled: …" from the
	// kernel list, or "measured: …" (Measured).
	Source string `json:"step_source"`
	// Comm is each axis's total communication time, before any overlap.
	Comm GroupSeconds `json:"comm_seconds"`
	// ExposedCommSeconds is the communication time that compute does not
	// hide.
	ExposedCommSeconds float64 `json:"exposed_comm_seconds"`
	// StepSeconds = ComputeSeconds + OptimizerSeconds + ExposedCommSeconds.
	StepSeconds           float64 `json:"step_seconds"`
	TokensPerSecondPerGPU float64 `json:"tokens_per_second_per_gpu"`
	// MFU is TokensPerSecondPerGPU × engine.ModelFLOPsPerToken ÷ peak.
	MFU float64 `json:"mfu"`
	// Checkpoint is a training checkpoint's save on the grid.
	Checkpoint  CheckpointCost `json:"checkpoint"`
	Collectives []Collective   `json:"-"`
}

// Estimate predicts step s of model cfg on device dev. Every rank does
// the same work (rank 0's kernel list stands for all), so one rank's time
// is the step's:
//
//	compute + optimizer = Σ over the step's kernel list (llama.Kernels)
//	                      of each kernel's modelled time (kernels.go)
//	comm(c)             = c.SentBytes() ÷ bandwidth of the link c's group spans
//
// Without overlap the step is compute + optimizer + Σ comm. With overlap,
// Blocking calls add their time, HiddenByCompute calls add only what
// exceeds the compute time (the hidden calls of all groups queue on one
// communication stream), and HiddenByLastBackward calls only what exceeds
// the last micro-batch's backward. The two budgets are applied separately,
// which is optimistic when both are nearly spent.
func Estimate(cfg *checkpoints.Config, dev Device, s Step, o Options) (Plan, error) {
	if err := dev.Validate(); err != nil {
		return Plan{}, err
	}
	if err := s.validate(cfg); err != nil {
		return Plan{}, err
	}
	if err := s.computes(o); err != nil {
		return Plan{}, err
	}
	return estimate(newShape(cfg, s.SeqLen), dev, s, o, estimateMemory(cfg, s, o))
}

// shape caches what estimate needs from a configuration that is costly
// to recompute for every candidate.
type shape struct {
	cfg *checkpoints.Config
	// modelFLOPs is engine.ModelFLOPsPerToken at the step's length.
	modelFLOPs float64
}

func newShape(cfg *checkpoints.Config, seqLen int) *shape {
	return &shape{cfg: cfg, modelFLOPs: engine.ModelFLOPsPerToken(cfg, seqLen)}
}

func estimate(sh *shape, dev Device, s Step, o Options, mem Memory) (Plan, error) {
	cfg, g := sh.cfg, s.Grid
	p := Plan{Step: s, Memory: mem, Collectives: collectives(cfg, s, o)}
	share := dev.share(g)
	st, err := stepTime(cfg, dev, s, o, share)
	if err != nil {
		return Plan{}, err
	}
	if m, ok := o.measured(cfg, s); ok && dev.Kernels != nil {
		st = st.applyMeasured(m, s.MicroBatches)
	}
	p.Kernels, p.Source = st.byClass, st.source
	p.OptimizerSeconds = st.optimizer
	p.ComputeSeconds = st.byClass.Total() - st.optimizer
	lastBackward := st.lastBackward
	if dev.Kernels == nil {
		// The measured efficiency's FLOPs leave out the loss's passes a
		// grid adds (lossSeconds), as they left out the optimizer's.
		loss := lossSeconds(cfg, dev, g, float64(s.MicroBatch)*float64(s.SeqLen)*float64(s.MicroBatches))
		p.ComputeSeconds += loss
		p.Kernels.Memory += loss
		p.OptimizerSeconds = float64(ShardParams(cfg, g)) * o.adamBytes() / (dev.HBMBandwidth / share)
		p.Kernels.Memory += p.OptimizerSeconds
	}
	shard := ShardParams(cfg, g)
	p.Checkpoint = checkpointCost(cfg, g, shard, dev, o)

	var byClass [3]float64
	inter := map[string]bool{}
	for _, grp := range Groups() {
		inter[grp] = g.InterNode(grp, dev.NodeSize)
	}
	for _, c := range p.Collectives {
		t := dev.commSeconds(c, g, inter[c.Group])
		p.Comm.add(c.Group, t)
		byClass[c.Overlap] += t
	}
	if !o.Overlaps(dev) {
		p.ExposedCommSeconds = byClass[Blocking] + byClass[HiddenByCompute] + byClass[HiddenByLastBackward]
	} else {
		p.ExposedCommSeconds = byClass[Blocking] +
			math.Max(0, byClass[HiddenByCompute]-p.ComputeSeconds) +
			math.Max(0, byClass[HiddenByLastBackward]-lastBackward)
	}
	p.Kernels.Collective = p.ExposedCommSeconds
	p.StepSeconds = p.ComputeSeconds + p.OptimizerSeconds + p.ExposedCommSeconds
	p.TokensPerSecondPerGPU = float64(s.GlobalBatchTokens()) / p.StepSeconds / float64(g.Size())
	p.MFU = p.TokensPerSecondPerGPU * sh.modelFLOPs / dev.PeakFLOPs
	return p, nil
}

// adamBytes is the memory traffic of the fused AdamW update per
// parameter on a device described by a measured step efficiency, whose
// FLOPs leave it out: engine.Kernel.Cost's AdamWStep rule — read the
// fp32 weight (a split master's two halves alike), gradient and two
// moments (16 bytes in float32), write the weight and the moments (12),
// and in mixed precision an unsplit weight's bf16 copy (2).
func (o Options) adamBytes() float64 {
	moment := float64(o.Moments.Size())
	b := 4 + 4 + 2*moment + 4 + 2*moment
	if o.Precision == engine.PrecisionBF16 && !o.SplitMaster {
		b += 2
	}
	return b
}

// checkState refuses memory options the engine does not combine.
func (o Options) checkState() error {
	switch {
	case o.SplitMaster && o.Precision != engine.PrecisionBF16:
		return errors.New("perfmodel: a split master is mixed precision's (precision bf16)")
	case o.LoRA < 0:
		return fmt.Errorf("perfmodel: LoRA rank %d (want 0, full fine-tuning, or more)", o.LoRA)
	case o.SplitMaster && o.LoRA > 0:
		return errors.New("perfmodel: a split master is a full fine-tune's, not with adapters")
	case o.Moments != engine.F32 && o.Moments != engine.BF16 && o.Moments != engine.I8:
		return fmt.Errorf("perfmodel: moments in %v (want f32, bf16 or i8)", o.Moments)
	case o.Moments == engine.I8 && o.Zero != 0:
		return errors.New("perfmodel: ZeRO does not shard 8-bit moments")
	case o.Fused && o.Zero != 0:
		return errors.New("perfmodel: a fused optimizer does not shard the moments over the data ranks (ZeRO)")
	case o.Fused && o.LoRA > 0:
		return errors.New("perfmodel: a fused optimizer is a full fine-tune's, not with adapters")
	}
	return nil
}

// State says in words the optimizer-state options o plans with.
func (o Options) State() string {
	master := "fp32"
	if o.SplitMaster {
		master = "split"
	}
	moments := map[engine.DType]string{engine.F32: "fp32", engine.BF16: "bf16", engine.I8: "int8"}[o.Moments]
	s := fmt.Sprintf("zero %d, master %s, moments %s", o.Zero, master, moments)
	if o.LoRA > 0 {
		s = fmt.Sprintf("LoRA rank %d on a bf16 base, zero %d, moments %s", o.LoRA, o.Zero, moments)
	}
	if o.Fused {
		s += ", optimizer fused into the backward"
	}
	return s
}

// vocabParallelLossPasses is what the engine's cross-entropy costs, in
// passes of the one-rank kernel over a rank's logits, when Y ranks split
// the vocabulary (engine/llama's vocabCrossEntropy): an Argmax (the
// slice's maximum; about two passes' time on the CPU backend), a
// forward-only CrossEntropy for the slice's sum of exponentials, then the
// CrossEntropy with its gradient. Measured on the CPU backend for 2048 ×
// 32000 logits: 95 + 40 + 47 ms against 47 ms for the one-rank kernel.
const vocabParallelLossPasses = 4

// lossSeconds is the loss work that grid g adds to a one-rank step's, on
// devices that model it (Device.LogitBytes): each rank passes over its
// logits, tokens × vocab/Y, once with Y = 1 and vocabParallelLossPasses
// times with Y > 1, and the X ranks of a coordinate each repeat it (the
// logits are all-reduced over X, so every one holds them whole). One
// rank's single pass, a share 1/(X·Y) of it per rank here, is already in
// the efficiency measured at one rank, and is not counted twice.
func lossSeconds(cfg *checkpoints.Config, dev Device, g Grid, tokens float64) float64 {
	if dev.LogitBytes == 0 {
		return 0
	}
	passes := 1.0
	if g.Y > 1 {
		passes = vocabParallelLossPasses
	}
	xy := float64(g.X * g.Y)
	elements := tokens * float64(cfg.VocabSize) / float64(g.Y)
	extra := elements * (passes - float64(g.Y)/xy)
	return extra * dev.LogitBytes / (dev.HBMBandwidth / dev.share(g))
}

// A Job is what Search plans: a model on GPUs devices of one kind, with a
// global batch of GlobalBatchTokens tokens in sequences of SeqLen.
type Job struct {
	Config            *checkpoints.Config
	Device            Device
	GPUs              int
	SeqLen            int
	GlobalBatchTokens int64
}

// NoFitError says that no grid fits in device memory, and by how much the
// most frugal candidate misses.
type NoFitError struct {
	GPUs     int
	Device   string
	Smallest Plan  // the candidate needing the least memory (its Memory is set)
	Usable   int64 // bytes a rank may use
	Capacity int64 // the device's memory
	// State is the optimizer-state options searched (Options.State),
	// when they are not the default's.
	State string
}

func (e *NoFitError) Error() string {
	s := e.Smallest
	rec := s.Recompute.String()
	state := ""
	if e.State != "" {
		state = ", " + e.State
	}
	return fmt.Sprintf("perfmodel: no grid of %d %s fits: the smallest needs %s per GPU (%v, micro-batch %d, recompute %s%s), %s usable of %s",
		e.GPUs, e.Device, units.FormatBytes(s.Memory.Total()), s.Grid, s.MicroBatch, rec, state, units.FormatBytes(e.Usable), units.FormatBytes(e.Capacity))
}

// Search enumerates every grid of j.GPUs ranks that divides the model
// (Grid.Validate) and the batch (its sequences split over Data·Z), every
// micro-batch size dividing each (data, z) coordinate's sequences and the
// allowed recomputation choices; drops what does not fit in device memory;
// keeps each grid's fastest choice and returns the grids fastest first
// (ties: fewer tensor-parallel ranks, then the grid's axes in order),
// trimmed to o.TopK. When nothing fits it returns a *NoFitError.
func Search(j Job, o Options) ([]Plan, error) {
	cfg, dev := j.Config, j.Device
	switch {
	case cfg == nil:
		return nil, errors.New("perfmodel: no model configuration")
	case j.GPUs < 1:
		return nil, fmt.Errorf("perfmodel: gpus must be positive, got %d", j.GPUs)
	case j.SeqLen < 1:
		return nil, fmt.Errorf("perfmodel: sequence length must be positive, got %d", j.SeqLen)
	case j.GlobalBatchTokens < 1 || j.GlobalBatchTokens%int64(j.SeqLen) != 0:
		return nil, fmt.Errorf("perfmodel: global batch of %d tokens is not a positive multiple of the sequence length %d", j.GlobalBatchTokens, j.SeqLen)
	case !(o.Efficiency >= 0 && o.Efficiency <= 1):
		return nil, fmt.Errorf("perfmodel: efficiency %v: want a fraction in (0, 1], or 0 for the device's", o.Efficiency)
	case !(o.MemoryFraction >= 0 && o.MemoryFraction <= 1):
		return nil, fmt.Errorf("perfmodel: memory fraction %v: want a fraction in (0, 1], or 0 for the default", o.MemoryFraction)
	case o.TopK < 0:
		return nil, fmt.Errorf("perfmodel: top %d: want 0 (all) or more", o.TopK)
	case o.MicroBatch < 0 || o.MicroBatch > 0 && j.GlobalBatchTokens/int64(j.SeqLen)%int64(o.MicroBatch) != 0:
		return nil, fmt.Errorf("perfmodel: micro-batch of %d sequences does not divide the global batch's %d", o.MicroBatch, j.GlobalBatchTokens/int64(j.SeqLen))
	}
	if err := dev.Validate(); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("perfmodel: %w", err)
	}
	if err := o.checkState(); err != nil {
		return nil, err
	}
	seqs := j.GlobalBatchTokens / int64(j.SeqLen)
	recomputes := o.Recompute.modes()

	sh := newShape(cfg, j.SeqLen)
	var plans []Plan
	var smallest *Plan
	candidates := 0
	refused := 0
	for _, g := range Grids(cfg, j.GPUs) {
		if (Step{Grid: g}).computes(o) != nil {
			refused++
			continue
		}
		dz := int64(g.Data) * int64(g.Z)
		if seqs%dz != 0 {
			continue
		}
		perCoord := int(seqs / dz)
		// Largest micro-batch first: fewer micro-batches mean fewer Z
		// gathers, so on equal time the larger one wins.
		ds := divisors(perCoord)
		if o.MicroBatch > 0 {
			b := int64(o.MicroBatch) / dz
			if int64(o.MicroBatch)%dz != 0 || int64(perCoord)%b != 0 {
				continue
			}
			ds = []int{int(b)}
		}
		if o.Fused { // one micro-batch a step
			if ds[len(ds)-1] != perCoord {
				continue
			}
			ds = []int{perCoord}
		}
		var best *Plan
		for _, rec := range recomputes {
			for k := len(ds) - 1; k >= 0; k-- {
				b := ds[k]
				s := Step{Grid: g, SeqLen: j.SeqLen, MicroBatch: b, MicroBatches: perCoord / b, Recompute: rec}
				mem := estimateMemory(cfg, s, o)
				candidates++
				if mem.Total() > o.usable(dev, g) {
					if smallest == nil || mem.Total() < smallest.Memory.Total() {
						smallest = &Plan{Step: s, Memory: mem}
					}
					continue
				}
				p, err := estimate(sh, dev, s, o, mem)
				if err != nil {
					return nil, err
				}
				if best == nil || p.StepSeconds < best.StepSeconds {
					best = &p
				}
			}
		}
		if best != nil {
			plans = append(plans, *best)
		}
	}
	if candidates == 0 {
		if refused > 0 && o.Precision == engine.PrecisionBF16 {
			return nil, fmt.Errorf("perfmodel: mixed precision runs on data-parallel grids alone, and none of %d ranks divides the global batch's %d sequences", j.GPUs, seqs)
		}
		if o.MicroBatch > 0 {
			return nil, fmt.Errorf("perfmodel: no grid of %d ranks divides the model's dimensions and a micro-batch of %d of the global batch's %d sequences over data×z", j.GPUs, o.MicroBatch, seqs)
		}
		return nil, fmt.Errorf("perfmodel: no grid of %d ranks divides the model's dimensions and the global batch's %d sequences over data×z", j.GPUs, seqs)
	}
	if len(plans) == 0 {
		nf := &NoFitError{GPUs: j.GPUs, Device: dev.Name, Smallest: *smallest, Usable: o.usable(dev, smallest.Grid), Capacity: int64(float64(dev.MemoryBytes) / dev.share(smallest.Grid))}
		if o.SplitMaster || o.Moments != engine.F32 || o.LoRA > 0 || o.Fused {
			nf.State = o.State()
		}
		return nil, nf
	}
	sort.SliceStable(plans, func(a, b int) bool {
		pa, pb := plans[a], plans[b]
		if pa.StepSeconds != pb.StepSeconds {
			return pa.StepSeconds < pb.StepSeconds
		}
		if ta, tb := pa.Grid.X*pa.Grid.Y, pb.Grid.X*pb.Grid.Y; ta != tb {
			return ta < tb
		}
		return false // Grids is already in axis order
	})
	if o.TopK > 0 && len(plans) > o.TopK {
		plans = plans[:o.TopK]
	}
	return plans, nil
}
