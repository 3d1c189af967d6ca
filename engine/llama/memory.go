package llama

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/parallel"
	mtunits "github.com/memtrain/memtrain/internal/units"
)

// Work is what a model is built for, as its memory accounting (Memory,
// Preflight) sizes it: the grid it runs on and the passes it makes.
type Work struct {
	// Grid is the grid's shape; the zero Grid is one rank alone.
	Grid comm.Grid
	// Overlap matters with Z > 1: OAG gathers into two buffers.
	Overlap parallel.Overlap
	// Train is a training step: every layer's activations are kept for
	// the backward pass, beside one set of activation gradients.
	Train     bool
	Recompute Recompute // Options.Recompute
	// Micro, with Train, is the optimizer step's micro-batches: its
	// device scalars (StepSums) count then; 0 counts none.
	Micro int
	// Moments are the optimizer's state tensors a parameter (AdamW 2,
	// SGD 0), shaped like this rank's shards.
	Moments int
	// Zero is the ZeRO stage (finetune's NewShardedOptimizer): with 1
	// and Grid.Data > 1 each data rank holds the moments of its
	// comm.Chunk of every tensor's elements, the first data rank the
	// largest (⌈n/Data⌉), which Optimizer counts.
	Zero int
	// MomentDType is the dtype the moments are held in: F32 (the zero
	// value), BF16 (finetune's bf16 moments) or I8 (8-bit moments, with
	// a float32 scale a piece of a block: engine.Int8Pieces; not with
	// Zero).
	MomentDType engine.DType
	// SplitMaster is Options.SplitMaster: a mixed-precision matrix's
	// float32 master is its BF16 copy and a 16-bit residual, so Weights
	// count 4 bytes for master and copy instead of 6.
	SplitMaster bool
	// FusedOptimizer is Options.FusedOptimizer: the gradients are those
	// of the units in flight in the backward (fusedGradElements), not
	// every shard's.
	FusedOptimizer bool
	// Clip, with FusedOptimizer, is a step that clips its gradients: a
	// norm-only forward and backward first (fused.go). It changes the
	// step's kernels (Kernels), not its memory.
	Clip bool
	// Batch and SeqLen are one pass on a rank: its sequences and their
	// tokens. SeqLen 0 sizes the parameters alone.
	Batch, SeqLen int
	// EvalBatch, if positive, is a forward-only pass of that many
	// sequences of SeqLen tokens that a training run also makes
	// (held-out evaluation): its workspace replaces the training one, so
	// the larger of the two counts.
	EvalBatch int
	// NewTokens, if positive, sizes greedy decoding instead of a pass:
	// Batch prompts of SeqLen tokens, NewTokens more each (the decoder's
	// KV cache, and a prefill of every prompt token at once).
	NewTokens int
	// Snapshot is an asynchronous checkpoint save's host copy of this
	// rank's weight shards and moments (RankMemory.Snapshot).
	Snapshot bool
	// LoRA and BaseDType are Options.LoRA and Options.BaseDType: with
	// adapters the base weights have no gradients or moments, and are
	// held in BaseDType (BF16 with BF16 activations).
	LoRA      *checkpoints.AdapterConfig
	BaseDType engine.DType
	// Activations is Options.Activations: with BF16 the workspace's
	// activations take 2 bytes an element (the plan's dtypes), and every
	// weight matrix adds its BF16 copy to Params.
	Activations engine.DType
	// Beside is memory a rank holds beside this model's, in bytes, which
	// Preflight adds, in its suggestions too (another model loaded at
	// once, such as the reference of a membership-inference attack: its
	// Memory's Params on the grid of the Work).
	Beside int64
}

// RankMemory is what one rank allocates for a Work, in bytes: the
// model's own allocation lists, so that it is what New and the passes
// allocate (tests check it against the backend's counter). Kernels'
// transient workspace and the buffers of checkpoint gathers are not in it.
type RankMemory struct {
	// Params are this rank's weight shards and their gradients (a model
	// always allocates both), in mixed precision the matrices' BF16
	// copies, and the RoPE table.
	Params int64
	// Optimizer is the optimizer's moments of those shards.
	Optimizer int64
	// Workspace is the largest pass's (the workspace plan, or the
	// decoder's) and, with Z > 1, the Z-gathered weight and gradient
	// buffers.
	Workspace int64
	// Snapshot is host memory beside the rest: a copy of the weight
	// shards and moments (Work.Snapshot), not a backend allocation, so
	// not in Total; Preflight counts it on the host, where a CPU rank's
	// other memory is too.
	Snapshot int64
}

// Total is the sum, saturating at math.MaxInt64 (engine.SumBytes).
func (m RankMemory) Total() int64 { return engine.SumBytes(m.Params, m.Optimizer, m.Workspace) }

// maxPassTokens bounds the batch shapes Memory sizes exactly: beyond 2^48
// token positions a pass (no device holds a tenth of that), the count
// saturates, so that no product of a shape can overflow on the way.
const maxPassTokens = 1 << 48

// Memory is what one rank allocates for a model of cfg doing w.
func Memory(cfg *checkpoints.Config, w Work) RankMemory { return Itemize(cfg, w).Rank() }

// Items are Memory's bytes by what they hold, as a planner reports them:
// the same allocation lists, itemized.
type Items struct {
	// Weights are the rank's weight shards (a LoRA run's frozen base in
	// its dtype, and its adapters), in mixed precision (Work.Activations
	// BF16) the matrices' BF16 copies too, and the RoPE table.
	Weights int64
	// Gradients are the gradients a model allocates beside them: every
	// shard's, or with adapters the adapters' and the frozen norms'
	// discarded one; with a fused optimizer, the most that the units in
	// flight hold at once.
	Gradients int64
	// Optimizer is the optimizer's moments.
	Optimizer int64
	// Activations is the largest pass's workspace (the workspace plan,
	// or the decoder's): activations, their gradients, logits, scratch;
	// and a training step's scalars (StepSums, Work.Micro).
	Activations int64
	// Gathered is what Z-sharding adds with Z > 1: the gathered weight
	// blocks (two units with OAG) and the gradient blocks before their
	// reduce-scatter.
	Gathered int64
	// Snapshot is RankMemory.Snapshot.
	Snapshot int64
}

// Rank sums the items as RankMemory does.
func (it Items) Rank() RankMemory {
	return RankMemory{Params: engine.SumBytes(it.Weights, it.Gradients), Optimizer: it.Optimizer,
		Workspace: engine.SumBytes(it.Activations, it.Gathered), Snapshot: it.Snapshot}
}

// Total is the sum of the backend's allocations (Snapshot is host memory
// beside them), saturating.
func (it Items) Total() int64 { return it.Rank().Total() }

// Itemize is Memory by item.
func Itemize(cfg *checkpoints.Config, w Work) Items {
	var m Items
	d := fullDims(cfg)
	if w.Grid != (comm.Grid{}) {
		d = gridDims(cfg, w.Grid)
	}
	d.act = w.Activations
	local, z := shardElements(cfg, w.Grid, w.Overlap)
	rope := int64(len(InvFreq(cfg))) * 4
	moments := int64(max(w.Moments, 0))
	momentSize := int64(w.MomentDType.Size())
	if a := w.LoRA; a != nil {
		// The frozen base: its matrices in BaseDType and its norms in
		// F32, no gradients; the adapters, replicated, with gradients
		// and moments; the frozen norms' discarded weight gradient.
		d.lora = a
		vectors := vectorElements(cfg, w.Grid)
		base := engine.SumBytes(engine.MulBytes(local-vectors, int64(w.BaseDType.Size())), engine.MulBytes(vectors, 4))
		ad := cfg.AdapterParams(a)
		m.Weights = engine.SumBytes(base, engine.MulBytes(ad, 4), rope)
		if w.Activations == engine.BF16 {
			m.Weights = engine.SumBytes(m.Weights, engine.MulBytes(ad, 2)) // the adapters' bf16 copies
		}
		m.Gradients = engine.SumBytes(engine.MulBytes(ad, 4), int64(max(d.H, d.D))*4)
		m.Optimizer = engine.MulBytes(moments, ad, momentSize)
		if w.MomentDType == engine.I8 {
			m.Optimizer = engine.SumBytes(m.Optimizer, engine.MulBytes(moments, adapterPieces(cfg, a), 4))
		}
		if zeroShards(w) {
			m.Optimizer = engine.MulBytes(moments, adapterChunks(cfg, a, w.Grid.Data), momentSize)
		}
		m.Activations = engine.SumBytes(passBytes(d, w), stepSumsBytes(cfg, w))
		m.Gathered = engine.MulBytes(z.gather, int64(w.BaseDType.Size())) // the base gathered as held
		if w.Snapshot {
			m.Snapshot = engine.MulBytes(1+moments, ad, 4)
		}
		return m
	}
	m.Weights = engine.SumBytes(engine.MulBytes(local, 4), rope)
	if w.Activations == engine.BF16 && !w.SplitMaster {
		// The matrices' bf16 copies (New): everything but the vectors
		// (norms, biases). A split master's copy is half of its 4 bytes.
		m.Weights = engine.SumBytes(m.Weights, engine.MulBytes(local-vectorElements(cfg, w.Grid), 2))
	}
	m.Gradients = engine.MulBytes(local, 4)
	if w.FusedOptimizer {
		m.Gradients = engine.MulBytes(fusedGradElements(cfg, w.Grid), 4)
	}
	m.Optimizer = engine.MulBytes(moments, local, momentSize)
	if w.MomentDType == engine.I8 {
		m.Optimizer = engine.SumBytes(m.Optimizer, engine.MulBytes(moments, shardPieces(cfg, w.Grid), 4))
	}
	if zeroShards(w) {
		m.Optimizer = engine.MulBytes(moments, shardChunks(cfg, w.Grid), momentSize)
	}
	m.Activations = engine.SumBytes(passBytes(d, w), stepSumsBytes(cfg, w))
	// The gathered blocks are what the passes multiply by (passWeight):
	// the bf16 copies in mixed precision; the gradient blocks float32.
	gathered := int64(4)
	if w.Activations == engine.BF16 {
		gathered = 2
	}
	m.Gathered = engine.SumBytes(engine.MulBytes(z.gather, gathered), engine.MulBytes(z.grad, 4))
	if w.Snapshot {
		m.Snapshot = engine.MulBytes(1+moments, local, 4)
	}
	return m
}

// passBytes is the largest workspace of w's passes on a rank of dims d.
func passBytes(d dims, w Work) int64 {
	B, T := int64(w.Batch), int64(w.SeqLen)
	if T <= 0 || B <= 0 {
		return 0
	}
	tooBig := func(b, t int64) bool { return b > maxPassTokens || t > maxPassTokens || b*t > maxPassTokens }
	if w.NewTokens > 0 {
		tmax := T + int64(w.NewTokens)
		if tooBig(B, tmax) {
			return math.MaxInt64
		}
		return layerBytes(d, func(d dims) []tensorPlan { return decoderPlan(d, w.Batch, int(tmax), w.Batch*w.SeqLen) })
	}
	if tooBig(B, T) || tooBig(int64(w.EvalBatch), T) {
		return math.MaxInt64
	}
	n := layerBytes(d, func(d dims) []tensorPlan { return plan(d, w.Batch, w.SeqLen, w.Train, w.Recompute) })
	if w.EvalBatch > 0 {
		n = max(n, layerBytes(d, func(d dims) []tensorPlan { return plan(d, w.EvalBatch, w.SeqLen, false, RecomputeNone) }))
	}
	return n
}

// layerBytes sizes the plan that list makes for d. A plan is affine in
// the layer count (a layer adds its input, its saved activations, its KV
// cache, the same tensors for every layer), so it is sized from the plans
// of one and two layers: the planner sizes thousands of candidate grids
// of a 126-layer model, each of whose plans lists some 1,700 tensors
// (TestLayerBytesIsThePlans checks the two agree).
func layerBytes(d dims, list func(dims) []tensorPlan) int64 {
	if d.L <= 2 {
		return planBytes(list(d))
	}
	one, two := d, d
	one.L, two.L = 1, 2
	b1, b2 := planBytes(list(one)), planBytes(list(two))
	if b1 == math.MaxInt64 || b2 == math.MaxInt64 {
		return math.MaxInt64
	}
	return engine.SumBytes(b1, engine.MulBytes(int64(d.L-1), b2-b1))
}

// planBytes sizes a list of allocations, saturating.
func planBytes(p []tensorPlan) int64 {
	var n int64
	for _, t := range p {
		b := int64(t.dtype.Size())
		for _, s := range t.shape {
			b = engine.MulBytes(b, int64(s))
		}
		n = engine.SumBytes(n, b)
	}
	return n
}

// shardElements counts the elements of one rank's weight shards (as New
// allocates them: parallel.ShardAt, parallel.LocalShape) and, with Z > 1,
// of the Z-sharding buffers newZWeights and newZGrads allocate: the
// largest unit's (x, y) blocks, twice with OAG, the largest matrix block
// for a gradient, and the tied embedding's block.
// vectorElements is the elements of a rank's shards of the tensors that
// are not matrices (checkpoints.Role.Matrix: norm weights, biases): those
// that keep a float32 value beside a matrix's bf16 copy or frozen base.
func vectorElements(cfg *checkpoints.Config, g comm.Grid) int64 {
	if g == (comm.Grid{}) {
		g = comm.Grid{Data: 1, X: 1, Y: 1, Z: 1}
	}
	var n int64
	for _, s := range oneLayer(cfg).TensorSpecs() {
		if s.Role.Matrix() {
			continue
		}
		e := int64(engine.Elements(parallel.LocalShape(s.Shape, parallel.ShardAt(g, 0, 0, 0, s.Split, s.Shape))))
		if s.Layer >= 0 {
			e *= int64(cfg.NumHiddenLayers)
		}
		n += e
	}
	return n
}

func shardElements(cfg *checkpoints.Config, g comm.Grid, ov parallel.Overlap) (local int64, zbuf zBuffers) {
	if g == (comm.Grid{}) {
		return cfg.Params().Total, zBuffers{}
	}
	// The layers are alike: layer 0's tensors stand for all of them, so
	// that sizing a grid (which suggestGrid does for hundreds) lists a
	// handful of tensors, not the whole model's.
	layers := int64(cfg.NumHiddenLayers)
	var layer, unit, block, embed int64
	for _, s := range oneLayer(cfg).TensorSpecs() {
		sh := parallel.ShardAt(g, 0, 0, 0, s.Split, s.Shape)
		n := int64(engine.Elements(parallel.LocalShape(s.Shape, sh)))
		if s.Layer >= 0 {
			n *= layers
		}
		local += n
		if !s.Split.ChunksZ() {
			continue // whole on every Z rank: no Z buffer
		}
		b := int64(sh.Row1-sh.Row0) * int64(sh.Col1-sh.Col0)
		block = max(block, b)
		switch s.Role {
		case checkpoints.RoleEmbedding:
			embed = b
			unit = max(unit, b)
		case checkpoints.RoleHead:
			unit = max(unit, b)
		default:
			// A decoder layer's seven linears are one unit (layer 0's,
			// the only one listed, stand for all).
			layer += b
		}
	}
	if g.Z == 1 {
		return local, zBuffers{}
	}
	unit = max(unit, layer)
	bufs := int64(1)
	if ov.AllGather {
		bufs = 2
	}
	zbuf = zBuffers{gather: bufs * unit, grad: block}
	if cfg.TieWordEmbeddings {
		zbuf.grad += embed
	}
	return local, zbuf
}

// zeroShards reports whether w's moments are sharded over its data ranks.
func zeroShards(w Work) bool { return w.Zero >= 1 && w.Grid.Data > 1 }

// shardChunks counts the elements of the first data rank's ZeRO chunks
// (⌈n/Data⌉ of each shard of n elements) of the shards of the rank at
// x = y = z = 0, as shardElements counts the shards.
func shardChunks(cfg *checkpoints.Config, g comm.Grid) int64 {
	layers := int64(cfg.NumHiddenLayers)
	var n int64
	for _, s := range oneLayer(cfg).TensorSpecs() {
		sh := parallel.ShardAt(g, 0, 0, 0, s.Split, s.Shape)
		_, c := comm.Chunk(engine.Elements(parallel.LocalShape(s.Shape, sh)), g.Data, 0)
		if s.Layer >= 0 {
			n += int64(c) * layers
		} else {
			n += int64(c)
		}
	}
	return n
}

// shardPieces counts the 8-bit moments' pieces (engine.Int8Pieces, one
// float32 scale a moment each) of the shards of the rank at x = y = z =
// 0, as shardElements counts the shards.
func shardPieces(cfg *checkpoints.Config, g comm.Grid) int64 {
	if g == (comm.Grid{}) {
		g = comm.Grid{Data: 1, X: 1, Y: 1, Z: 1}
	}
	layers := int64(cfg.NumHiddenLayers)
	var n int64
	for _, s := range oneLayer(cfg).TensorSpecs() {
		sh := parallel.ShardAt(g, 0, 0, 0, s.Split, s.Shape)
		c := engine.Int8PieceCount(engine.ElementIndex{Shard: sh, Cols: s.Shape[len(s.Shape)-1]}, sh.Elements())
		if s.Layer >= 0 {
			c *= layers
		}
		n += c
	}
	return n
}

// adapterPieces is shardPieces for a's adapters, whole on every rank.
func adapterPieces(cfg *checkpoints.Config, a *checkpoints.AdapterConfig) int64 {
	var n int64
	for _, s := range cfg.AdapterTensorSpecs(a) {
		ix := engine.ElementIndex{Shard: engine.WholeShard(s.Shape[0], s.Shape[1]), Cols: s.Shape[1]}
		n += engine.Int8PieceCount(ix, engine.Elements(s.Shape))
	}
	return n
}

// adapterChunks is shardChunks for a's adapters, whole on every rank.
func adapterChunks(cfg *checkpoints.Config, a *checkpoints.AdapterConfig, data int) int64 {
	var n int64
	for _, s := range cfg.AdapterTensorSpecs(a) {
		_, c := comm.Chunk(engine.Elements(s.Shape), data, 0)
		n += int64(c)
	}
	return n
}

// zBuffers are the elements of the Z-sharding buffers: newZWeights'
// gathered blocks and newZGrads' gradient blocks (which a frozen base
// does without).
type zBuffers struct{ gather, grad int64 }

// oneLayer is cfg cut to its first decoder layer.
func oneLayer(cfg *checkpoints.Config) *checkpoints.Config {
	c := cfg.Clone()
	c.NumHiddenLayers = min(c.NumHiddenLayers, 1)
	return c
}

// Preflight checks, before anything is allocated, that what w needs on a
// rank (Memory) fits each device the ranks of this process compute on
// (have, as engine/launch reads it: Launcher.Memory): a device's ranks
// together must fit its free memory. A device whose free memory is
// unknown is not checked. Otherwise it returns an *engine.MemoryError
// naming need and have and the changes that would fit: activation
// recomputation, a smaller batch, a grid of more ranks.
func Preflight(cfg *checkpoints.Config, w Work, have []engine.DeviceMemory) error {
	mem := Memory(cfg, w)
	for _, dev := range have {
		if dev.Free < 0 {
			continue
		}
		need := engine.SumBytes(mem.Total(), max(w.Beside, 0))
		if dev.Device == "host" {
			need = engine.SumBytes(need, mem.Snapshot)
		}
		ranks := max(dev.Ranks, 1)
		total := engine.MulBytes(need, int64(ranks))
		if total <= dev.Free {
			continue
		}
		return &engine.MemoryError{Device: dev.Device, Ranks: ranks, What: describe(cfg, w), Need: total,
			Have: dev.Free, Source: dev.Source, Suggestions: suggest(cfg, w, ranks, dev.Free)}
	}
	return nil
}

// describe says in words what w is, for MemoryError.What.
func describe(cfg *checkpoints.Config, w Work) string {
	params := mtunits.FormatCount(cfg.Params().Total) + " parameters"
	where := ""
	if w.Grid != (comm.Grid{}) {
		where = fmt.Sprintf(" on a rank of grid %s", gridFlag(w.Grid))
	}
	switch {
	case w.SeqLen <= 0:
		return "holding " + params + where
	case w.NewTokens > 0:
		return fmt.Sprintf("decoding %s after %s of %s with %s%s", plural(w.NewTokens, "new token"), plural(w.Batch, "prompt"), plural(w.SeqLen, "token"), params, where)
	case w.Train:
		how := ""
		if w.Recompute != RecomputeNone {
			how = " with " + w.Recompute.words()
		}
		return fmt.Sprintf("training %s%s on %s of %s a pass%s", params, where, plural(w.Batch, "sequence"), plural(w.SeqLen, "token"), how)
	}
	return fmt.Sprintf("scoring %s of %s a pass with %s%s", plural(w.Batch, "sequence"), plural(w.SeqLen, "token"), params, where)
}

// gridFlag writes a grid as grids are given to a launch ("dp=1,x=2,y=1,z=4").
func gridFlag(g comm.Grid) string {
	return fmt.Sprintf("dp=%d,x=%d,y=%d,z=%d", g.Data, g.X, g.Y, g.Z)
}

// maxSuggestedRanks bounds the grids suggest tries.
const maxSuggestedRanks = 1024

// suggest lists changes of w that would fit free bytes for ranks ranks
// sharing a device: activation recomputation (selective when that fits,
// else full), then the largest batch that fits (with recomputation if
// that alone does not: each mode that admits a larger one), and, when
// neither does, the smallest grid of ranks on devices of their own.
func suggest(cfg *checkpoints.Config, w Work, ranks int, free int64) []string {
	need := func(v Work) (int64, bool) {
		n := engine.MulBytes(engine.SumBytes(Memory(cfg, v).Total(), max(v.Beside, 0)), int64(ranks))
		return n, n <= free
	}
	var out []string
	// The recomputation that costs least time and fits: selective before
	// full.
	recomputeFits := false
	for r := w.Recompute + 1; w.Train && r <= RecomputeFull; r++ {
		v := w
		v.Recompute = r
		if n, ok := need(v); ok {
			recomputeFits = true
			out = append(out, fmt.Sprintf("%s (%s)", r.words(), mtunits.FormatBytes(n)))
			break
		}
	}
	smaller := func(v Work) (Work, bool) {
		// The need grows with the batch: the largest that fits, by
		// bisection over 1…Batch-1.
		lo, hi := 0, v.Batch-1
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if _, ok := need(withBatch(v, mid)); ok {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		return withBatch(v, lo), lo > 0
	}
	if w.SeqLen > 0 && w.Batch > 1 {
		batches := func(b int) string {
			if w.NewTokens > 0 {
				return plural(b, "prompt") + " at a time"
			}
			return "batches of " + plural(b, "sequence")
		}
		plain := 0
		if v, ok := smaller(w); ok {
			n, _ := need(v)
			plain = v.Batch
			out = append(out, fmt.Sprintf("%s (%s)", batches(v.Batch), mtunits.FormatBytes(n)))
		}
		// Recomputation admits a larger batch than none, and full more
		// than selective: worth saying, each that does, when
		// recomputation alone does not fit.
		for r := w.Recompute + 1; w.Train && !recomputeFits && r <= RecomputeFull; r++ {
			v := w
			v.Recompute = r
			if v, ok := smaller(v); ok && v.Batch > plain {
				n, _ := need(v)
				plain = v.Batch
				out = append(out, fmt.Sprintf("%s with %s (%s)", r.words(), batches(v.Batch), mtunits.FormatBytes(n)))
			}
		}
	}
	if len(out) == 0 {
		if s := suggestGrid(cfg, w, free); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// words name a recomputation mode in a suggestion.
func (r Recompute) words() string {
	if r == RecomputeFull {
		return "activation recomputation"
	}
	return r.String() + " activation recomputation"
}

// plural writes n things: "1 sequence", "2 sequences".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// withBatch is v with b sequences a pass (and no larger an evaluation).
func withBatch(v Work, b int) Work {
	v.Batch = b
	if v.EvalBatch > b {
		v.EvalBatch = b
	}
	return v
}

// suggestGrid finds the smallest grid (a power of two of ranks, data
// axis 1, each rank on a device of its own with free bytes) on which a
// rank of w fits: as w is, else with recomputation and one sequence a
// pass. A rank keeps w's batch: a conservative need where Z would split
// it.
func suggestGrid(cfg *checkpoints.Config, w Work, free int64) string {
	tries := []Work{w}
	if w.SeqLen > 0 && (w.Batch > 1 || (w.Train && w.Recompute != RecomputeFull)) {
		v := withBatch(w, 1)
		if v.Train {
			v.Recompute = RecomputeFull
		}
		tries = append(tries, v)
	}
	one := oneLayer(cfg)
	for _, v := range tries {
		for n := 2; n <= maxSuggestedRanks; n *= 2 {
			if n <= w.Grid.Size() {
				continue
			}
			var grids []comm.Grid
			for x := 1; x <= n; x *= 2 {
				for y := 1; x*y <= n; y *= 2 {
					g := comm.Grid{Data: 1, X: x, Y: y, Z: n / (x * y)}
					// The layers are alike, so one layer divides as all do.
					if parallel.Check(one, g) == nil {
						grids = append(grids, g)
					}
				}
			}
			type fit struct {
				g    comm.Grid
				need int64
			}
			var fits []fit
			for _, g := range grids {
				u := v
				u.Grid, u.Overlap = g, parallel.AllOverlap()
				// Beside was sized on the grid asked for: on a larger one it
				// is less, so a grid suggested is one that fits.
				if m := engine.SumBytes(Memory(cfg, u).Total(), max(u.Beside, 0)); m <= free {
					fits = append(fits, fit{g, m})
				}
			}
			if len(fits) == 0 {
				continue
			}
			sort.SliceStable(fits, func(i, j int) bool { return fits[i].need < fits[j].need })
			var with []string
			if v.Recompute != w.Recompute {
				with = append(with, v.Recompute.words())
			}
			if v.Batch != w.Batch {
				with = append(with, "1 sequence a pass")
			}
			how := ""
			if len(with) > 0 {
				how = " with " + strings.Join(with, " and ")
			}
			return fmt.Sprintf("a grid of %d ranks, each on a GPU or machine of its own, e.g. %s%s (%s a rank)", n, gridFlag(fits[0].g), how, mtunits.FormatBytes(fits[0].need))
		}
	}
	return ""
}
