package perfmodel

import (
	"fmt"

	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/llama"
)

// The collective operations, as Collective.Op names them.
const (
	OpAllReduce     = "all-reduce"
	OpAllGather     = "all-gather"
	OpReduceScatter = "reduce-scatter"
)

// wire is what a collective moves, which sets its element's size.
type wire int

const (
	wireActivation wire = iota // activations and activation gradients
	wireWeight                 // Z-gathered weights
	wireStat                   // per-token statistics: RMSNorm's sums, cross-entropy's max, sum of exponentials and target logit
	wireGrad                   // weight gradients
	wireNorm                   // norm weights (float32: no bf16 copy), gathered by ZeRO
)

// bytes is an element's size as the engine sends it at precision p:
// float32 for activations (their partial sums are added in float32 and
// rounded once, in mixed precision too), statistics and gradients (as
// they are accumulated); weights as the passes hold them, bf16 copies in
// mixed precision (the Z all-gathers' and ZeRO's). A Device's WireBytes
// may replace it for activations and weights, to model an engine that
// sends them otherwise.
func (w wire) bytes(p engine.Precision) int {
	if w == wireWeight && p == engine.PrecisionBF16 {
		return 2
	}
	return 4
}

// payload says whether WireBytes applies.
func (w wire) payload() bool { return w == wireActivation || w == wireWeight }

// Overlap says whether a collective can be hidden behind compute when the
// engine overlaps communication (Options.NoOverlap false).
type Overlap int

const (
	// Blocking collectives are on the critical path: the next kernel needs
	// their result (forward activation all-reduces, norm and cross-entropy
	// statistics).
	Blocking Overlap = iota
	// HiddenByCompute collectives run beside the micro-batches' compute:
	// AxoNN's OAG (Z all-gathers prefetched a layer ahead), OAR (backward
	// activation all-reduces while the weight gradient's GEMM runs) and ORS
	// (Z reduce-scatters of weight gradients).
	HiddenByCompute
	// HiddenByLastBackward collectives reduce the accumulated gradients once
	// per optimizer step (data-parallel all-reduces, norm-weight gradient
	// all-reduces); bucketed, they can hide only behind the last
	// micro-batch's backward pass.
	HiddenByLastBackward
)

func (o Overlap) String() string {
	switch o {
	case HiddenByCompute:
		return "hidden-by-compute"
	case HiddenByLastBackward:
		return "hidden-by-last-backward"
	}
	return "blocking"
}

// MarshalText writes the overlap class by name, for JSON.
func (o Overlap) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// A Collective is one kind of collective call that a rank makes during an
// optimizer step, with how many times it makes it.
type Collective struct {
	// Name says what moves, e.g. "q_proj forward output".
	Name string `json:"name"`
	// Group is the group the call runs over: "x", "y", "z", "data" or
	// "data-z".
	Group string `json:"group"`
	// Op is "all-reduce", "all-gather" or "reduce-scatter".
	Op string `json:"op"`
	// GroupSize is p, the number of ranks in the group (always ≥ 2: calls
	// over a group of one rank move nothing and are not listed).
	GroupSize int `json:"group_size"`
	// Elements is the logical payload of one call on one rank: for an
	// all-reduce the buffer reduced, for an all-gather the gathered output
	// (p shards), for a reduce-scatter the full input (p shards).
	Elements int64 `json:"elements"`
	// Bytes is the size of one element on the wire.
	Bytes int `json:"bytes"`
	// payload marks activations and weights, whose element size a
	// Device's WireBytes replaces.
	payload bool
	// Calls is the number of calls per optimizer step: per-micro-batch
	// calls are multiplied by the number of micro-batches, and forward
	// calls inside decoder layers by 2 with activation recomputation.
	Calls int `json:"calls"`
	// RingFactor is the share of Elements one rank sends per call in a
	// ring: 2(p−1)/p for an all-reduce, (p−1)/p for the others.
	RingFactor float64 `json:"ring_factor"`
	// Overlap says whether the call can be hidden behind compute.
	Overlap Overlap `json:"overlap"`
}

// RingFactor is the share of a collective's logical payload that each of
// p ranks sends in a ring: 2(p−1)/p for an all-reduce (reduce-scatter then
// all-gather), (p−1)/p for an all-gather or a reduce-scatter.
func RingFactor(op string, p int) float64 {
	f := float64(p-1) / float64(p)
	if op == OpAllReduce {
		return 2 * f
	}
	return f
}

// SentElements is the number of elements one rank sends for all the calls
// of a step: Elements × RingFactor × Calls.
func (c Collective) SentElements() float64 {
	return float64(c.Elements) * c.RingFactor * float64(c.Calls)
}

// SentBytes is SentElements × Bytes.
func (c Collective) SentBytes() float64 { return c.SentElements() * float64(c.Bytes) }

// Collectives lists every collective call of one optimizer step on one
// rank, itemized by what it moves. See the package documentation for the
// layout; for W[out, in] with `in` split over axis A (X, or Y when
// transposed) and `out` over axis B, m = s.MicroBatch·s.SeqLen tokens per
// rank and micro-batch, n micro-batches and L decoder layers:
//
//   - forward output: all-reduce over A of m·out/B, L·n calls (2·L·n with
//     recomputation, except down_proj: the recomputed forward stops
//     before it, its output being the next layer's kept input);
//   - backward input gradient: all-reduce over B of m·in/A, L·n calls,
//     one for the linears that share an input (q, k and v; gate and up),
//     whose partial input gradients are added before it;
//   - Z: all-gather of the weight's (x,y) block out·in/(X·Y) before the
//     forward and again before the backward (with recomputation the
//     recomputed forward's gather is kept for the backward, so still two),
//     and a reduce-scatter of its gradient block, each L·n calls;
//   - data: all-reduce of the shard out·in/(X·Y·Z), L calls (once a step).
//
// RMSNorm (two per layer and the final one) all-reduces each token's sum of
// squares over X in the forward (recomputed too) and the sum of dy·y in
// the backward: m elements each. Its weight's gradient (H/X elements; Y
// replicas computed the same thing, so Y is not summed) is all-reduced over
// data-z (the Data·Z ranks, one group) once a step: the groups its declared
// split names (parallel.Grid.GradGroups), as for every tensor whose blocks
// are not split over Z.
//
// The embedding is vocabulary-parallel: W[vocab, hidden] with vocab over Y
// and hidden over X, Z-sharded like a linear. Its forward gathers the
// weight over Z and all-reduces the looked-up rows over Y (m·H/X; each Y
// rank holds one vocabulary slice); its backward needs no weight and no
// activation exchange, only the gradient's reduce-scatter over Z and the
// data all-reduce. The LM head is a linear W[vocab, hidden] (forward
// all-reduce of the logits over X, m·V/Y; backward over Y, m·H/X) whose
// backward reuses the block its forward gathered (nothing runs between
// them but the loss). The vocabulary-parallel cross-entropy all-gathers
// each token's maximum logit over Y (a sum cannot make a maximum: m·Y
// elements), then all-reduces the sums of exponentials and the target's
// logit (2m), in fp32. A tied head uses the embedding's shard: the
// embedding's and the head's forwards each gather it, and the summed
// gradient is reduce-scattered and all-reduced once.
//
// Neither the embedding nor the head is recomputed. Calls over a group of
// size 1 are omitted.
//
// Those are a float32 step's without ZeRO; CollectivesWith lists those of
// o's precision and ZeRO stage.
func Collectives(cfg *checkpoints.Config, s Step) ([]Collective, error) {
	return CollectivesWith(cfg, s, Options{})
}

// CollectivesWith is Collectives at o's precision, ZeRO stage and fused
// optimizer (Options.Fused: every pass's collectives twice). In
// mixed precision the Z all-gathers move the weights' bf16 copies (2
// bytes an element). With ZeRO (o.Zero 1) the gradients are all-reduced
// over data as without, and then each weight shard's updated elements —
// the pass weights: bf16 copies in mixed precision, float32 otherwise;
// the norm weights float32 — are all-gathered over data once a step
// (finetune's zero.go), before the next forward can start.
func CollectivesWith(cfg *checkpoints.Config, s Step, o Options) ([]Collective, error) {
	if err := s.validate(cfg); err != nil {
		return nil, err
	}
	return collectives(cfg, s, o), nil
}

func collectives(cfg *checkpoints.Config, s Step, o Options) []Collective {
	g := s.Grid
	m := int64(s.MicroBatch) * int64(s.SeqLen)
	n, L := s.MicroBatches, cfg.NumHiddenLayers
	// The gradients' data sums: once a step, in the last backward; with a
	// fused optimizer (two passes, Options.Fused) in each pass, each
	// unit's waited for before its update.
	gradCalls, gradOv := 1, HiddenByLastBackward
	if o.Fused {
		n, gradCalls, gradOv = 2*n, 2, Blocking
	}
	// fwd is the forwards of a layer's linears a micro-batch; sums those
	// of its norms, whose sums of squares selective recomputation also
	// makes again, for every layer but the last.
	fwd, sums := 1, L
	switch s.Recompute {
	case llama.RecomputeFull:
		fwd, sums = 2, 2*L
	case llama.RecomputeSelective:
		sums = 2*L - 1
	}
	h, v := int64(cfg.HiddenSize), int64(cfg.VocabSize)
	hx := h / int64(g.X)

	var cs []Collective
	add := func(name, group, op string, elements int64, w wire, calls int, ov Overlap) {
		p := g.GroupSize(group)
		if p == 1 || calls == 0 || elements == 0 {
			return
		}
		cs = append(cs, Collective{Name: name, Group: group, Op: op, GroupSize: p, Elements: elements,
			Bytes: w.bytes(o.Precision), payload: w.payload(), Calls: calls, RingFactor: RingFactor(op, p), Overlap: ov})
	}
	// zSharded adds the Z and data traffic of one weight (or of every
	// layer's copy of it: k = L).
	zSharded := func(name string, block int64, fwdGathers, bwdGathers, k int) {
		add(name+" weight (forward)", GroupZ, OpAllGather, block, wireWeight, fwdGathers*k*n, HiddenByCompute)
		add(name+" weight (backward)", GroupZ, OpAllGather, block, wireWeight, bwdGathers*k*n, HiddenByCompute)
		add(name+" gradient", GroupZ, OpReduceScatter, block, wireGrad, k*n, HiddenByCompute)
		add(name+" gradient", GroupData, OpAllReduce, block/int64(g.Z), wireGrad, gradCalls*k, gradOv)
		if o.Zero >= 1 {
			add(name+" updated weight (ZeRO)", GroupData, OpAllGather, block/int64(g.Z), wireWeight, k, Blocking)
		}
	}
	// norm adds an RMSNorm's statistics: the sums over X of each token's
	// squares (forward, sums calls a micro-batch with recomputation's) and
	// of dy·y (backward).
	norm := func(name string, k, sums int) {
		add(name+" sum of squares", GroupX, OpAllReduce, m, wireStat, sums*n, Blocking)
		add(name+" backward sum", GroupX, OpAllReduce, m, wireStat, k*n, Blocking)
	}
	// vector adds the once-a-step traffic of a tensor its split does not
	// cut over Z (a norm weight: a vector over X, replicated over Y and
	// Z): its gradient summed over the groups of its split
	// (parallel.Grid.GradGroups: data-z, after Y for a replicated
	// tensor), and with ZeRO its updated slice gathered over data.
	vector := func(s checkpoints.TensorSpec, k int) {
		rows, cols := s.Split.Axes()
		elements := s.Elements() / int64(g.axisSize(rows)*g.axisSize(cols))
		name := s.Role.String()
		if s.Split == checkpoints.SplitReplicated {
			add(name+" weight gradient", GroupY, OpAllReduce, elements, wireGrad, gradCalls*k, gradOv)
		}
		add(name+" weight gradient", GroupDataZ, OpAllReduce, elements, wireGrad, gradCalls*k, gradOv)
		if o.Zero >= 1 {
			add(name+" updated weight (ZeRO)", GroupData, OpAllGather, elements, wireNorm, k, Blocking)
		}
	}
	// vectors adds vector's traffic for a layer's tensors (each L times)
	// or the model's own.
	vectors := func(layer bool) {
		k := 1
		if layer {
			k = L
		}
		for _, s := range declared(cfg) {
			if !s.Split.ChunksZ() && (s.Layer >= 0) == layer {
				vector(s, k)
			}
		}
	}

	add("embed_tokens forward output", GroupY, OpAllReduce, m*hx, wireActivation, n, Blocking)
	norm("input_layernorm", L, sums)
	norm("post_attention_layernorm", L, sums)
	vectors(true)
	var embed, head weight
	for _, w := range weights(cfg) {
		switch w.role {
		case checkpoints.RoleEmbedding:
			embed = w
			continue
		case checkpoints.RoleHead:
			head = w
			continue
		}
		in, out := w.groups()
		calls := fwd * L * n
		if w.role == checkpoints.RoleMLPDown {
			calls = L * n
		}
		add(w.role.String()+" forward output", in, OpAllReduce, m*int64(w.out)/int64(g.GroupSize(out)), wireActivation, calls, Blocking)
		zSharded(w.role.String(), w.blockElements(g), 1, 1, L)
	}
	// Backward input gradients, one all-reduce per input: over the axis
	// that splits the linears' outputs (their rows), of the input's share
	// m·in/A (A the axis of their columns). The linears that share an
	// input (q, k and v; gate and up) add their partial input gradients
	// before one all-reduce.
	byRole := map[checkpoints.Role]weight{}
	for _, w := range weights(cfg) {
		byRole[w.role] = w
	}
	for _, b := range []struct {
		name  string
		first checkpoints.Role // the first linear of those sharing the input
	}{
		{"q_proj, k_proj, v_proj", checkpoints.RoleAttnQ},
		{"o_proj", checkpoints.RoleAttnO},
		{"gate_proj, up_proj", checkpoints.RoleMLPGate},
		{"down_proj", checkpoints.RoleMLPDown},
	} {
		w := byRole[b.first]
		in, out := w.groups()
		shared := int64(w.in / g.GroupSize(in))
		add(b.name+" backward input gradient", out, OpAllReduce, m*shared, wireActivation, L*n, HiddenByCompute)
	}
	norm("norm", 1, 1)
	vectors(false)
	add("lm_head forward output", GroupX, OpAllReduce, m*v/int64(g.Y), wireActivation, n, Blocking)
	add("cross-entropy max logit", GroupY, OpAllGather, m*int64(g.Y), wireStat, n, Blocking)
	add("cross-entropy sum of exponentials and target logit", GroupY, OpAllReduce, 2*m, wireStat, n, Blocking)
	add("lm_head backward input gradient", GroupY, OpAllReduce, m*hx, wireActivation, n, HiddenByCompute)
	if cfg.TieWordEmbeddings {
		// One shard: gathered for the embedding's forward and the head's
		// forward (whose backward reuses it); one summed gradient.
		zSharded("embed_tokens (tied lm_head)", embed.blockElements(g), 2, 0, 1)
	} else {
		zSharded("embed_tokens", embed.blockElements(g), 1, 0, 1)
		zSharded("lm_head", head.blockElements(g), 1, 0, 1)
	}
	return cs
}

// GroupSeconds holds one number per group.
type GroupSeconds struct {
	X     float64 `json:"x"`
	Y     float64 `json:"y"`
	Z     float64 `json:"z"`
	Data  float64 `json:"data"`
	DataZ float64 `json:"data_z"`
}

// Of returns the named axis's value.
func (s GroupSeconds) Of(group string) float64 {
	switch group {
	case GroupX:
		return s.X
	case GroupY:
		return s.Y
	case GroupZ:
		return s.Z
	case GroupData:
		return s.Data
	case GroupDataZ:
		return s.DataZ
	}
	panic(fmt.Sprintf("perfmodel: unknown group %q", group))
}

func (s *GroupSeconds) add(group string, v float64) {
	switch group {
	case GroupX:
		s.X += v
	case GroupY:
		s.Y += v
	case GroupZ:
		s.Z += v
	case GroupData:
		s.Data += v
	case GroupDataZ:
		s.DataZ += v
	default:
		panic(fmt.Sprintf("perfmodel: unknown group %q", group))
	}
}
