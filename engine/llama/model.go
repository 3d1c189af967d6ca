// Package llama is the Llama model with HuggingFace semantics on an
// engine.Backend: token embedding, RMSNorm, RoPE (rotate-half, llama3
// scaling), grouped-query causal attention, SwiGLU MLP, final norm and a
// tied or untied LM head; the loss is cross-entropy weighted per target.
//
// Every layer's backward is hand-written beside its forward (block.go),
// llm.c style; the kernels themselves belong to the backend. The model
// only speaks the Backend interface, so the same code runs on any backend.
//
// The same model runs on one rank or on a four-dimensional grid of ranks
// (Options.Parallel; AxoNN's Data × X × Y × Z, laid out as engine/perfmodel
// describes): each rank then holds a shard of every weight and computes its
// part of every layer, and the layers exchange partial results through the
// grid's communicators (grid.go). One rank is the grid of one rank: the
// same code, with nothing to exchange.
package llama

import (
	"errors"
	"fmt"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
)

// Options control how the model trains.
type Options struct {
	// Recompute is which activations a training pass drops in the
	// forward pass and recomputes in the backward (recompute.go): none
	// (the zero value), the cheap elementwise ones (selective), or all but
	// each layer's input (full). Every mode gives the same numbers, bit
	// for bit.
	Recompute Recompute
	// Parallel is this rank's place in a grid of ranks that run the model
	// together: every rank of the grid creates its model with its own Grid
	// and calls the same methods in the same order with the same arguments
	// (batches: see ForwardBackward). New takes nil for one rank holding
	// everything, and puts the grid of one rank there (parallel.One): the
	// model's Options.Parallel is never nil.
	Parallel *parallel.Grid
	// LoRA, if not nil, adds these adapters to the projections and
	// freezes every base weight (lora.go): Trainable lists the adapters
	// alone, and the base weights have no gradients.
	LoRA *checkpoints.AdapterConfig
	// BaseDType is the dtype the frozen base matrices are held in with
	// adapters: F32 (the zero value), or BF16 to keep a bf16 checkpoint
	// in half the memory (the backend's GEMM widens them as it packs).
	// Norm weights stay F32. Without adapters it must be F32; with BF16
	// activations it must be BF16 (the passes multiply the base in bf16).
	BaseDType engine.DType
	// Activations is the dtype of the activations and their gradients:
	// F32 (the zero value), or BF16 for mixed precision. With BF16 every
	// weight matrix gets a BF16 copy (engine.Param.Copy) that the passes
	// multiply by, refreshed by the optimizer step, while the float32
	// master weights, their float32 gradients (accumulated in float32 by
	// the GEMMs) and the optimizer's moments stay as they were; norm
	// weights, RMSNorm's and attention's statistics, the logits of each
	// head chunk, the loss and its gradient stay float32 (workspace.go's
	// plan says which buffer has which dtype; the logits' gradient enters
	// the head's products rounded to bf16, headLoss). Training passes and
	// forward-only ones (evaluation, scoring) run in BF16 alike; greedy
	// decoding keeps its float32 activations and KV cache and multiplies
	// them by the BF16 copies. With adapters the frozen base is held in
	// bf16 (BaseDType) and the adapters get BF16 copies as the full
	// model's weights do; their rank-r activations z are bf16 too, as
	// under PyTorch's autocast. BF16 runs on every grid: the Z
	// all-gathers move the BF16 copies, the weight gradients are
	// reduce-scattered in float32, and the X and Y sums of partial
	// products are formed in float32 and rounded to bf16 once (grid.go;
	// the adapters' too, their dz and dropped input staying float32 on X
	// and Y grids).
	Activations engine.DType
	// GradientBucketBytes is the size of the buckets in which
	// ReduceGradients sums the gradients over the data-parallel ranks: a
	// bucket of consecutive gradients of one group is issued as one
	// all-reduce group (comm.IAllReduceGroup; one NCCL group call). Zero
	// is DefaultGradientBucketBytes; a negative size puts every gradient
	// in a bucket of its own.
	GradientBucketBytes int
	// ReduceAfterBackward issues the gradient buckets after the backward
	// pass, in ReduceGradients, instead of during the last micro-batch's
	// backward as each bucket's gradients become final (buckets.go): the
	// same sums, the collectives later. For tests and measurements.
	ReduceAfterBackward bool
	// SplitMaster holds each weight matrix's float32 master split
	// (engine.Param.Low): its BF16 copy is the master's high half and a
	// 16-bit residual the rest, exactly, so master and copy take 4 bytes
	// a parameter instead of 6. It needs BF16 activations, no adapters
	// and a backend that is an engine.MasterSplitter; norm weights keep
	// their float32 masters. The copy is the master rounded to nearest
	// with ties away from zero (engine.SplitF32 says why), where an
	// unsplit master's is rounded to nearest even: the two differ on
	// exact ties only.
	SplitMaster bool
	// FusedOptimizer fuses the optimizer step into the backward pass
	// (fused.go, FusedStep): no gradient is allocated by New; each unit's
	// gradients (the LM head, the final norm, a decoder layer, the
	// embedding) are allocated when the backward reaches the unit, summed
	// over the data and Z ranks when final, handed to the step's Updater
	// and freed, so that only the units in flight hold gradients
	// (Work.FusedOptimizer counts them). With one micro-batch the
	// weights are bit for bit those of ForwardBackwardSum, FinishStep and
	// one AdamWStep; clipping (a positive maxNorm) costs a second forward
	// and backward, a norm-only pass first. It needs full fine-tuning (no
	// adapters) and the reduction in the backward (not
	// ReduceAfterBackward); the other training passes (ForwardBackward,
	// ForwardBackwardSum) are refused.
	FusedOptimizer bool
}

// DefaultGradientBucketBytes is the default gradient bucket, 25 MiB:
// PyTorch DDP's default (bucket_cap_mb = 25), measured there as the
// compromise between the two costs of a bucket. Much smaller, and every
// group pays NCCL's launch and latency (some 10–50 µs) on too little data
// to reach bus bandwidth (a few MB per call on NVLink or InfiniBand);
// much larger, and the first bucket waits longer for its gradients and
// the last one's transfer, after the final gradient, is exposed longer.
// 25 MiB takes about 0.1–0.3 ms at 100–200 GB/s, far above the latency.
const DefaultGradientBucketBytes = 25 << 20

// Layer holds one decoder block's parameters.
type Layer struct {
	AttnNorm, Q, K, V, O *engine.Param
	MLPNorm, Gate, Up    *engine.Param
	Down                 *engine.Param
	// A family's variations (checkpoints.Family), nil where it has none:
	// Qwen2's q/k/v biases, Qwen3's per-head norms of q and k.
	QBias, KBias, VBias *engine.Param
	QNorm, KNorm        *engine.Param
	// LoRA holds each projection's adapter (q, k, v, o, gate, up, down),
	// nil where it has none.
	LoRA [numProj]*Adapter
	// params are the layer's parameters in the declaration's order.
	params []*engine.Param
}

// Params lists the layer's parameters in the order its family declares
// them (HF's state dict order).
func (l *Layer) Params() []*engine.Param { return l.params }

// slot is the Layer field a declared role fills.
func (l *Layer) slot(r checkpoints.Role) **engine.Param {
	switch r {
	case checkpoints.RoleAttnQ:
		return &l.Q
	case checkpoints.RoleAttnK:
		return &l.K
	case checkpoints.RoleAttnV:
		return &l.V
	case checkpoints.RoleAttnO:
		return &l.O
	case checkpoints.RoleMLPGate:
		return &l.Gate
	case checkpoints.RoleMLPUp:
		return &l.Up
	case checkpoints.RoleMLPDown:
		return &l.Down
	case checkpoints.RoleAttnNorm:
		return &l.AttnNorm
	case checkpoints.RoleMLPNorm:
		return &l.MLPNorm
	case checkpoints.RoleAttnQBias:
		return &l.QBias
	case checkpoints.RoleAttnKBias:
		return &l.KBias
	case checkpoints.RoleAttnVBias:
		return &l.VBias
	case checkpoints.RoleAttnQNorm:
		return &l.QNorm
	case checkpoints.RoleAttnKNorm:
		return &l.KNorm
	}
	return nil
}

// Model is a Llama model's parameters and gradients on a backend, with the
// workspace for its activations. On a grid, the parameters are this rank's
// shards (engine.Param.Shard).
type Model struct {
	Config  *checkpoints.Config
	Options Options
	backend engine.Backend

	Embed  *engine.Param
	Layers []*Layer
	Norm   *engine.Param
	Head   *engine.Param // the same Param as Embed when the embeddings are tied

	invFreq *engine.Tensor // [D/2]
	// window is the attention's sliding window (checkpoints.Config.Window),
	// 0 for plain causal attention.
	window int
	ws     *workspace // activations for the current batch shape

	d dims // this rank's share of the model's dimensions
	// gx and gy are the groups whose ranks hold partial sums of a layer's
	// output or input gradient (the hidden size is split over X; heads,
	// intermediate features and the vocabulary over Y); nil when the
	// group has one rank and there is nothing to sum.
	gx, gy comm.Comm
	zw     *zWeights  // Z-gathering of weight blocks; nil without Z-sharding
	zg     *zGrads    // Z reduce-scattering of weight gradients; nil without Z-sharding
	units  units      // the weights a pass gathers, unit by unit
	lora   *loraState // nil without adapters
	// stepSums are the optimizer step's device scalars (stepsums.go),
	// kept from step to step.
	stepSums *StepSums
	// reduce is the gradient reduction of the step in progress, begun in
	// its last micro-batch's backward (buckets.go).
	reduce gradReduce
	// fused is the fused step's pass in progress (fused.go), nil outside
	// one; slots are each trainable tensor's slot in the step's sums.
	fused *fusedPass
	slots map[*engine.Param]int
	// flatRowsLimit, when positive, replaces flatRows' int32 bound (the
	// tests make it small to run the chunked path on tiny shapes).
	flatRowsLimit int
	// loadChunkLimit, when positive, replaces loadChunk (the tests make
	// it small to load tiny matrices in blocks).
	loadChunkLimit int
}

// New allocates a model of the given configuration with zero weights and
// gradients (this rank's shards of them on a grid). A nil
// Options.Parallel is one rank: the grid of one rank, parallel.One.
func New(b engine.Backend, cfg *checkpoints.Config, opt Options) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opt.Parallel = parallel.OrOne(opt.Parallel, b)
	// The activations first: on a grid that cannot take bf16 at all, that
	// is the reason, not the base's dtype.
	if err := checkActivations(opt); err != nil {
		return nil, err
	}
	if err := checkLoRA(cfg, opt); err != nil {
		return nil, err
	}
	if err := opt.Recompute.check(); err != nil {
		return nil, err
	}
	if err := checkSplitMaster(b, opt); err != nil {
		return nil, err
	}
	if err := checkFused(opt); err != nil {
		return nil, err
	}
	g := opt.Parallel
	if err := parallel.Check(cfg, g.Shape()); err != nil {
		return nil, err
	}
	m := &Model{Config: cfg.Clone(), Options: opt, backend: b, d: gridDims(cfg, g.Shape())}
	m.d.act = opt.Activations
	m.d.v0 = g.At.Y * m.d.V
	// A group of one rank has nothing to exchange: its layers skip the
	// collectives and their scratch buffers outright (grid.go).
	if g.X.Size() > 1 {
		m.gx = g.X
	}
	if g.Y.Size() > 1 {
		m.gy = g.Y
	}
	m.Layers = make([]*Layer, cfg.NumHiddenLayers)
	for l := range m.Layers {
		m.Layers[l] = &Layer{}
	}
	for _, s := range cfg.TensorSpecs() {
		shard := g.Shard(s.Split, s.Shape)
		shape := parallel.LocalShape(s.Shape, shard)
		p := &engine.Param{
			Name:  s.Name,
			Full:  append([]int(nil), s.Shape...),
			Split: s.Split,
			Shard: shard,
			Decay: s.Role.Matrix(),
		}
		if opt.LoRA == nil {
			if !opt.FusedOptimizer { // fused: allocated unit by unit in the backward
				p.Grad = b.Alloc(engine.F32, shape...)
			}
			if opt.Activations == engine.BF16 && s.Role.Matrix() {
				p.Copy = b.Alloc(engine.BF16, shape...)
			}
			if p.Copy != nil && opt.SplitMaster {
				p.Low = b.Alloc(engine.BF16, shape...)
			} else {
				p.Value = b.Alloc(engine.F32, shape...)
			}
		} else if !s.Role.Matrix() {
			p.Value = b.Alloc(engine.F32, shape...) // frozen, and the norm kernels read F32
		} else {
			p.Value = b.Alloc(opt.BaseDType, shape...) // frozen: no gradient
		}
		// Each tensor goes where its declared role says.
		switch s.Role {
		case checkpoints.RoleEmbedding:
			m.Embed = p
		case checkpoints.RoleFinalNorm:
			m.Norm = p
		case checkpoints.RoleHead:
			m.Head = p
		default:
			layer := m.Layers[s.Layer]
			slot := layer.slot(s.Role)
			if slot == nil {
				return nil, fmt.Errorf("llama: tensor %q: no place in a layer for role %v", s.Name, s.Role)
			}
			*slot = p
			layer.params = append(layer.params, p)
		}
	}
	if m.Head == nil {
		m.Head = m.Embed // tied
	}
	m.units = newUnits(m)
	if opt.LoRA != nil {
		m.d.lora = opt.LoRA
		m.newAdapters()
	}
	if g.Z.Size() > 1 {
		m.zw = newZWeights(m, g.Z, g.Overlap.AllGather)
		if opt.LoRA == nil { // a frozen base has no gradients to reduce-scatter
			m.zg = newZGrads(m, g.Z, g.Overlap.ReduceScatter)
		}
	}
	m.window = cfg.Window()
	inv := InvFreq(cfg)
	m.invFreq = b.Alloc(engine.F32, len(inv))
	b.Upload(m.invFreq, inv)
	return m, nil
}

// Load creates a model from an opened checkpoint, converting its weights to
// float32 on the backend. On a grid each rank reads only its shards.
func Load(b engine.Backend, ck *checkpoints.Checkpoint, opt Options) (*Model, error) {
	m, err := New(b, ck.Config, opt)
	if err != nil {
		return nil, err
	}
	if err := m.LoadWeights(ck.Weights); err != nil {
		m.Free()
		return nil, err
	}
	return m, nil
}

// checkActivations refuses the activation dtypes and combinations the
// model cannot compute (see Options.Activations), before anything is
// allocated.
func checkActivations(opt Options) error {
	return CheckActivations(opt.Activations, opt.Parallel.Shape())
}

// CheckActivations says whether a model can compute with activations of
// dtype act (Options.Activations) on a grid of shape g (the zero Grid:
// one rank): nil, or the one-line reason why not. New checks it; a run's
// preflight checks it before anything loads. F32 and BF16 run on every
// grid, g whatever it is (grid.go says how bf16 sums over ranks are
// rounded once); g stays for the callers, which ask per grid.
func CheckActivations(act engine.DType, g comm.Grid) error {
	switch act {
	case engine.F32, engine.BF16:
		return nil
	}
	return fmt.Errorf("llama: activations in %v (want f32 or bf16)", act)
}

// checkSplitMaster refuses a split master (Options.SplitMaster) where
// the model cannot hold one.
func checkSplitMaster(b engine.Backend, opt Options) error {
	if !opt.SplitMaster {
		return nil
	}
	if opt.Activations != engine.BF16 || opt.LoRA != nil {
		return errors.New("llama: a split master needs bf16 activations and no adapters (it splits the float32 master of a weight that has a bf16 copy)")
	}
	if _, ok := b.(engine.MasterSplitter); !ok {
		return fmt.Errorf("llama: the %s backend holds float32 masters only, not split ones", b.Name())
	}
	return nil
}

// Master is p's float32 master weight: p.Value, or for a split master
// (engine.Param.Low) a float32 tensor joined from its halves, which done
// frees (done does nothing for p.Value).
func (m *Model) Master(p *engine.Param) (t *engine.Tensor, done func()) {
	if p.Low == nil {
		return p.Value, func() {}
	}
	t = m.backend.Empty(engine.F32, p.Low.Shape...)
	m.backend.(engine.MasterSplitter).JoinMaster(t, p.Copy, p.Low)
	return t, func() { m.backend.Free(t) }
}

// setMaster sets p's master weight by fill, which writes a float32 tensor
// of p's shape: p.Value itself (ReadInto and Scatter refresh its copy), or
// for a split master a temporary then split into its halves.
func (m *Model) setMaster(p *engine.Param, fill func(t *engine.Tensor) error) error {
	if p.Low == nil {
		return fill(p.Value)
	}
	t := m.backend.Empty(engine.F32, p.Low.Shape...)
	defer m.backend.Free(t)
	if err := fill(t); err != nil {
		return err
	}
	m.backend.(engine.MasterSplitter).SplitMaster(p.Copy, p.Low, t)
	return nil
}

// passWeight is the tensor the passes multiply by for p: its BF16 copy in
// mixed precision, else its value.
func passWeight(p *engine.Param) *engine.Tensor {
	if p.Copy != nil {
		return p.Copy
	}
	return p.Value
}

// refreshCopy sets p's BF16 copy from t after t was written, when t is
// p's master weight and p has a copy.
func (m *Model) refreshCopy(p *engine.Param, t *engine.Tensor) {
	if p.Copy != nil && t == p.Value {
		m.backend.Copy(p.Copy, p.Value)
	}
}

// LoadWeights reads every parameter by HF name from r (a checkpoint's
// weights), this rank's shard of it.
func (m *Model) LoadWeights(r parallel.SliceReader) error {
	for _, p := range m.Params() {
		if err := m.setMaster(p, func(t *engine.Tensor) error { return m.ReadInto(r, p.Name, p, t) }); err != nil {
			return err
		}
	}
	return nil
}

// ReadInto reads this rank's part of the full-shape tensor name from r
// into t, a tensor laid out like p (its value, or an optimizer moment).
// Into p's value, it refreshes p's BF16 copy too.
func (m *Model) ReadInto(r parallel.SliceReader, name string, p *engine.Param, t *engine.Tensor) error {
	if err := m.readInto(r, name, p, t); err != nil {
		return err
	}
	m.refreshCopy(p, t)
	return nil
}

func (m *Model) readInto(r parallel.SliceReader, name string, p *engine.Param, t *engine.Tensor) error {
	var data []float32
	var err error
	chunk := loadChunk
	if m.loadChunkLimit > 0 {
		chunk = m.loadChunkLimit
	}
	whole := wholeShard(p)
	if rows, cols := engine.RowsCols(p.Full); whole && rows > 1 && t.Len() > chunk {
		// A large matrix goes up a block of rows at a time, so that
		// loading holds no float32 copy of it (a bf16 base's embedding
		// would take twice its own size); a vector, one row, is read
		// whole.
		if t.Len() != rows*cols {
			return fmt.Errorf("llama: tensor %q has %d elements, want %d", name, t.Len(), rows*cols)
		}
		step := max(1, chunk/cols)
		for r0 := 0; r0 < rows; r0 += step {
			r1 := min(rows, r0+step)
			v, err := r.ReadSlice(name, r0, r1, 0, cols)
			if err != nil {
				return err
			}
			if len(v) != (r1-r0)*cols {
				return fmt.Errorf("llama: tensor %q: rows %d–%d have %d elements, want %d", name, r0, r1, len(v), (r1-r0)*cols)
			}
			m.backend.Upload(t.View(r0*cols, len(v)), v)
		}
		return nil
	}
	if whole {
		data = make([]float32, t.Len())
		err = readWhole(r, name, data)
	} else {
		data, err = parallel.ReadShard(r, name, p.Full, p.Shard)
	}
	if err != nil {
		return err
	}
	if len(data) != t.Len() {
		return fmt.Errorf("llama: tensor %q has %d elements, want %d", name, len(data), t.Len())
	}
	m.backend.Upload(t, data)
	return nil
}

// loadChunk bounds the values ReadInto holds at a time for a large matrix.
const loadChunk = 1 << 22

// wholeShard reports whether this rank holds the whole of p (on one rank,
// and for the tensors no axis of a grid splits): its values are read and
// written as they are, without extracting or placing a block.
func wholeShard(p *engine.Param) bool {
	return p.Shard == engine.WholeShard(engine.RowsCols(p.Full))
}

// readWhole reads a whole tensor into dst, without a second copy when r
// can (checkpoints.Set and File can).
func readWhole(r parallel.SliceReader, name string, dst []float32) error {
	if into, ok := r.(interface {
		ReadFloat32Into(name string, dst []float32) error
	}); ok {
		return into.ReadFloat32Into(name, dst)
	}
	v, err := r.ReadFloat32(name)
	if err != nil {
		return err
	}
	if len(v) != len(dst) {
		return fmt.Errorf("llama: tensor %q has %d elements, want %d", name, len(v), len(dst))
	}
	copy(dst, v)
	return nil
}

// Params lists the model's parameters in checkpoint order, each once (a
// tied head is the embedding).
func (m *Model) Params() []*engine.Param {
	ps := []*engine.Param{m.Embed}
	for _, l := range m.Layers {
		ps = append(ps, l.params...)
	}
	ps = append(ps, m.Norm)
	if m.Head != m.Embed {
		ps = append(ps, m.Head)
	}
	return ps
}

// Backend is the backend the model lives on.
func (m *Model) Backend() engine.Backend { return m.backend }

// Grid is the model's place in a grid of ranks: on one rank, the grid of
// one rank (parallel.One); never nil.
func (m *Model) Grid() *parallel.Grid { return m.Options.Parallel }

// SetWeights uploads weights by HF name, full-shape; every parameter must
// be given. On a grid each rank keeps its shard.
func (m *Model) SetWeights(tensors []checkpoints.Tensor) error {
	byName := map[string]checkpoints.Tensor{}
	for _, t := range tensors {
		byName[t.Name] = t
	}
	for _, p := range m.Params() {
		t, ok := byName[p.Name]
		if !ok {
			return fmt.Errorf("llama: weight %q missing", p.Name)
		}
		if err := m.setMaster(p, func(v *engine.Tensor) error { return m.Scatter(p, v, t.Data) }); err != nil {
			return err
		}
	}
	return nil
}

// Scatter uploads this rank's part of full, the full-shape values of a
// tensor laid out like p (its value, or an optimizer moment), into t
// (into p's value: its BF16 copy too).
func (m *Model) Scatter(p *engine.Param, t *engine.Tensor, full []float32) error {
	if n := engine.Elements(p.Full); len(full) != n {
		return fmt.Errorf("llama: weight %q has %d elements, want %d", p.Name, len(full), n)
	}
	if !wholeShard(p) {
		full = parallel.Extract(p.Shard, p.Full[len(p.Full)-1], full)
	}
	m.backend.Upload(t, full)
	m.refreshCopy(p, t)
	return nil
}

// Gather returns the full-shape values of t, a tensor laid out like p (its
// value, gradient or an optimizer moment), assembled from every rank's
// shard. On a grid it is collective: every rank calls it and gets the
// whole tensor (over the world group, which the performance model does
// not count).
func (m *Model) Gather(p *engine.Param, t *engine.Tensor) ([]float32, error) {
	g := m.Options.Parallel
	if g.World.Size() == 1 {
		// The one rank holds the whole tensor: no gather, no copy.
		out := make([]float32, t.Len())
		m.backend.Download(out, t)
		return out, nil
	}
	b, n := m.backend, t.Len()
	all := b.Alloc(engine.F32, n*g.World.Size())
	defer b.Free(all)
	if err := g.World.AllGather(all, t); err != nil {
		return nil, fmt.Errorf("llama: gathering %s: %w", p.Name, err)
	}
	host := make([]float32, all.Len())
	b.Download(host, all)
	full := make([]float32, engine.Elements(p.Full))
	shape := g.Shape()
	for r := 0; r < shape.Size(); r++ {
		d, x, y, z := shape.Coords(r)
		if d != 0 {
			continue // a data-parallel replica of rank (0, x, y, z)'s shard
		}
		if !parallel.CountsAt(parallel.Coord{X: x, Y: y, Z: z}, p.Split) {
			continue // a copy of a shard placed already
		}
		s := parallel.ShardAt(shape, x, y, z, p.Split, p.Full)
		parallel.Place(s, p.Full[len(p.Full)-1], full, host[r*n:(r+1)*n])
	}
	return full, nil
}

// GatherWeights returns every parameter as full-shape checkpoint tensors
// (HF names and shapes), ready for checkpoints.Save. On a grid it is
// collective, and every rank gets them.
func (m *Model) GatherWeights() ([]checkpoints.Tensor, error) {
	var out []checkpoints.Tensor
	for _, p := range m.Params() {
		t, done := m.Master(p)
		data, err := m.Gather(p, t)
		done()
		if err != nil {
			return nil, err
		}
		out = append(out, checkpoints.Tensor{Name: p.Name, Shape: append([]int(nil), p.Full...), Data: data})
	}
	return out, nil
}

// Weights is GatherWeights for one rank, where it cannot fail. On a grid
// it panics if a collective fails; use GatherWeights there.
func (m *Model) Weights() []checkpoints.Tensor {
	w, err := m.GatherWeights()
	if err != nil {
		panic(err)
	}
	return w
}

// ZeroGrads clears every gradient, after waiting for any sum a failed
// step left in flight.
func (m *Model) ZeroGrads() {
	m.reduce.abandon()
	for _, p := range m.Trainable() {
		if p.Grad != nil { // a fused optimizer's are allocated in the pass
			m.backend.Fill(p.Grad, 0)
		}
	}
}

// GradNorm is the global L2 norm of the gradients, summed in float64 in
// parameter order. On a grid it is collective: each distinct element
// counts once, whichever ranks hold copies of it (countsGrad).
func (m *Model) GradNorm() (float64, error) {
	if m.Options.FusedOptimizer {
		return 0, errFusedPass // no gradients outside FusedStep
	}
	if m.reduce.inFlight() {
		return 0, errors.New("llama: GradNorm before ReduceGradients: the gradients' sums are still in flight")
	}
	params := m.Trainable()
	gs := make([]*engine.Tensor, len(params))
	for i, p := range params {
		gs[i] = p.Grad
	}
	sums := engine.SumSquaresEach(m.backend, gs)
	counted, local := 0.0, 0.0
	whole := true // every gradient whole on every rank
	for i, s := range sums {
		local += float64(s)
		whole = whole && params[i].Split == checkpoints.SplitReplicated
		if m.countsGrad(params[i]) {
			counted += float64(s)
		}
	}
	if whole {
		// Every rank holds the same whole gradients once they are
		// reduced (adapters): the norm is the same on every rank, with
		// nothing to exchange.
		return math.Sqrt(local), nil
	}
	total, err := m.Options.Parallel.SumUnique(m.backend, counted)
	if err != nil {
		return 0, err
	}
	return math.Sqrt(total), nil
}

// countsGrad reports whether this rank counts p's gradient's squares in
// the global gradient norm: on a grid, the one copy of each distinct
// element that parallel.CountsAt picks by p's split (adapters, whole on
// every rank, by world rank 0 alone); on one rank, every tensor.
func (m *Model) countsGrad(p *engine.Param) bool {
	return m.Options.Parallel.CountsUnique(p.Split)
}

// SumBatch replaces vals by their sums over the ranks that split the
// batch (see parallel.Grid.SumBatch): loss sums and target counts of
// each rank's share of a global batch. On one rank it does nothing.
func (m *Model) SumBatch(vals []float64) error {
	return m.Options.Parallel.SumBatch(m.backend, vals)
}

// Free releases the model's tensors, once no sum a failed step left in
// flight still reads or writes them.
func (m *Model) Free() {
	m.reduce.abandon()
	m.freeWorkspace()
	if m.stepSums != nil {
		m.backend.Free(m.stepSums.t)
		m.stepSums = nil
	}
	for _, p := range m.Params() {
		for _, t := range []*engine.Tensor{p.Value, p.Low} {
			if t != nil {
				m.backend.Free(t)
			}
		}
		if p.Grad != nil {
			m.backend.Free(p.Grad)
		}
		if p.Copy != nil {
			m.backend.Free(p.Copy)
		}
	}
	if m.lora != nil {
		for _, p := range m.lora.params {
			m.backend.Free(p.Value)
			m.backend.Free(p.Grad)
			if p.Copy != nil {
				m.backend.Free(p.Copy)
			}
		}
		m.backend.Free(m.lora.frozenDW)
	}
	m.zw.free(m.backend)
	m.zg.free(m.backend)
	m.backend.Free(m.invFreq)
}
