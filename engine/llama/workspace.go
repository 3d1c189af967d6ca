package llama

import (
	"github.com/memtrain/memtrain/checkpoints"
	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// layerActs are the activations one decoder block saves for its backward
// pass (N = B·T token positions).
type layerActs struct {
	ln1, rstd1 *engine.Tensor // [N,H], [N]   attention norm output and 1/rms
	q, k, v    *engine.Tensor // [N,Q], [N,KV] after RoPE
	lse        *engine.Tensor // [B,heads,T] attention's per-row log-sum-exp
	att        *engine.Tensor // [N,Q] attention output, before o_proj (and the backward's out)
	h          *engine.Tensor // [N,H] residual stream after attention
	ln2, rstd2 *engine.Tensor // [N,H], [N]
	gate, up   *engine.Tensor // [N,I]
	act        *engine.Tensor // [N,I] silu(gate)·up
	// With head norms (Qwen3): the q and k projections' outputs, the
	// norms' inputs, and each head's 1/rms; q and k are then the norms'
	// outputs after RoPE. nil otherwise.
	qraw, kraw   *engine.Tensor // [N,Q], [N,KV]
	rstdq, rstdk *engine.Tensor // [N·heads], [N·kvHeads]
	// z holds each adapted projection's rank-r product drop(x)·Aᵀ [N,r]
	// (lora.go); nil where the projection has no adapter.
	z [numProj]*engine.Tensor
}

// grads are the activation gradients, one set shared by all layers.
type grads struct {
	dx, dh, dln, dnorm *engine.Tensor // [N,H]
	dq, datt           *engine.Tensor // [N,Q]
	dk, dv             *engine.Tensor // [N,KV]
	dgate, dup, dact   *engine.Tensor // [N,I]
	dlnf               *engine.Tensor // [N,H]
	// dqn and dkn are the gradients of the q and k projections' outputs
	// through the head norms (Qwen3); nil without them.
	dqn, dkn *engine.Tensor // [N,Q], [N,KV]
	// The logits' gradient replaces the logits in place.
}

// workspace holds everything a batch of B sequences of T tokens needs.
type workspace struct {
	B, T  int
	train bool

	ids, targets, pos *engine.Tensor // I32 [N]
	weights, losses   *engine.Tensor // F32 [N]
	// reportWeights and reportLosses are the reported loss's (training
	// only; Batch.ReportWeights).
	reportWeights, reportLosses *engine.Tensor // F32 [N]
	// inputs[l] is layer l's input; inputs[L] is the last layer's output.
	inputs []*engine.Tensor
	// layers has one set per layer, or a single shared set when the
	// activations are recomputed in full (or not needed: forward only).
	// With selective recomputation every layer's set points to one
	// shared ln1, rstd1, ln2, rstd2 and act.
	layers []*layerActs
	lnf    *engine.Tensor // [N,H]
	rstdf  *engine.Tensor // [N]
	// logits are [N,V] forward only; in training [headRows(N),V], the
	// rows of one chunk of the head and loss (headLoss), so that the
	// logits of the whole batch are never held at once.
	logits *engine.Tensor
	g      *grads // nil when forward only

	sc   *scratch     // the grid's per-token scratch; nil when X and Y are 1
	ce   *ceScratch   // the vocabulary-parallel cross-entropy's; nil unless Y > 1
	lora *loraScratch // the adapters' shared scratch; nil unless training adapters
	// head is the LM head's weight block the forward pass used, kept for
	// the backward pass (Z-gathered on a grid).
	head *engine.Tensor
	// dlogits is a training pass's bf16 gradient of a head chunk's logits
	// in mixed precision, written by CrossEntropy (headLoss); nil
	// otherwise.
	dlogits *engine.Tensor
}

// dims are one rank's share of the model's dimensions: everything on one
// rank; on a grid the hidden size over X, and the heads, intermediate
// features and vocabulary over Y.
type dims struct {
	L                 int
	H, Q, KV, I, V    int
	heads, kvHeads, D int
	x, y              int // the X and Y ranks; more than one adds the grid's scratch
	v0                int // this rank's first vocabulary id
	// lora is the model's adapter configuration, nil without adapters:
	// its activations join the workspace (loraPlan).
	lora *checkpoints.AdapterConfig
	// headRowsLimit, when positive, replaces headRows' rule (the tests
	// make it small to run the chunked head on tiny shapes).
	headRowsLimit int
	// act is the activations' dtype (Options.Activations): the dtype of
	// the residual stream, every layer's saved activations and the
	// activation gradients in the workspace plan.
	act engine.DType
	// qkNorm: the family normalises q and k per head (Qwen3), which
	// keeps the projections' outputs and the norms' statistics.
	qkNorm bool
}

// headChunkElements bounds the logits a training pass holds: one chunk of
// rows of [rows, V] at a time, 256 MiB of float32 — for Llama 3's
// 128,256-token vocabulary 523 rows, where the whole logits of 8,192
// tokens would take 4.2 GB, and their gradient as much again in other
// engines. A chunk's GEMMs stay large enough to run at full speed.
const headChunkElements = 64 << 20

// headRows is how many token positions of N one chunk of the training
// head takes: as many as fit headChunkElements of this rank's slice of
// the vocabulary, on any grid (each chunk then has its own X all-reduce
// of its logits, and on Y ranks its own vocabulary-parallel loss).
func (d dims) headRows(N int) int {
	if d.headRowsLimit > 0 {
		return min(N, d.headRowsLimit)
	}
	return max(1, min(N, headChunkElements/max(1, d.V)))
}

func fullDims(cfg *checkpoints.Config) dims {
	return dims{
		L: cfg.NumHiddenLayers, H: cfg.HiddenSize, Q: cfg.QDim(), KV: cfg.KVDim(), I: cfg.IntermediateSize, V: cfg.VocabSize,
		heads: cfg.NumAttentionHeads, kvHeads: cfg.NumKeyValueHeads, D: cfg.HeadDimension(), x: 1, y: 1,
		qkNorm: cfg.QKNorm(),
	}
}

func gridDims(cfg *checkpoints.Config, g comm.Grid) dims {
	d := fullDims(cfg)
	d.H /= g.X
	d.Q, d.KV, d.I, d.V = d.Q/g.Y, d.KV/g.Y, d.I/g.Y, d.V/g.Y
	d.heads, d.kvHeads = d.heads/g.Y, d.kvHeads/g.Y
	d.x, d.y = g.X, g.Y
	return d
}

// tensorPlan is one allocation of a workspace, for accounting.
type tensorPlan struct {
	name  string
	dtype engine.DType
	shape []int
}

// alloc allocates p on b: with Empty, without Alloc's zero-fill, when
// every element of it is written before it is read (writtenFirst).
func (p tensorPlan) alloc(b engine.Backend) *engine.Tensor {
	if p.writtenFirst() {
		return b.Empty(p.dtype, p.shape...)
	}
	return b.Alloc(p.dtype, p.shape...)
}

// writtenFirst reports whether a pass writes every element of the
// workspace's or the decoder's tensor p before reading it: the residual
// stream and the activations (each a kernel's output), the logits and
// the activation gradients (each written by a kernel, or by a GEMM with
// β = 0, before anything adds into it). The rest keep Alloc's zeros: the
// token ids, positions, weights and losses (uploaded), the key and value
// caches (read up to each sequence's length), and the scratch of the
// grid, the vocabulary-parallel loss and the adapters, which this list
// does not vouch for. The tests prove it with poisoning on
// (engine.Poison), which fills the Empty tensors with NaN.
func (p tensorPlan) writtenFirst() bool {
	switch p.name {
	case "input", "ln1", "rstd1", "q", "k", "v", "lse", "att", "h", "ln2", "rstd2", "gate", "up", "act",
		"qraw", "kraw", "rstdq", "rstdk",
		"lnf", "rstdf", "logits", "dlogits",
		"dx", "dh", "dln", "dnorm", "dq", "datt", "dk", "dv", "dgate", "dup", "dact", "dlnf", "dqn", "dkn",
		// The decoder's.
		"x", "y", "ln", "rstd", "last", "last_norm", "last_rms":
		return true
	}
	return false
}

// plan lists the workspace's tensors for one rank's dimensions. It is the
// single source of truth for both the allocation and the memory
// accounting (ActivationBytes), so the two cannot disagree, dtype by
// dtype: the activations and their gradients in d.act (F32, or BF16 in
// mixed precision), and in F32 whatever the loss and the statistics
// need — the token weights and losses, RMSNorm's rstd, attention's
// log-sum-exp, the logits (of a head chunk) and the final norm's output
// gradient, which their float32 gradient produces.
func plan(d dims, B, T int, train bool, recompute Recompute) []tensorPlan {
	N := B * T
	H, Q, KV, I, V := d.H, d.Q, d.KV, d.I, d.V
	heads, act := d.heads, d.act
	var p []tensorPlan
	add := func(name string, dt engine.DType, shape ...int) {
		p = append(p, tensorPlan{name, dt, shape})
	}
	add("ids", engine.I32, N)
	add("targets", engine.I32, N)
	add("pos", engine.I32, N)
	add("weights", engine.F32, N)
	add("losses", engine.F32, N)
	if train {
		add("report weights", engine.F32, N)
		add("report losses", engine.F32, N)
	}
	inputs := d.L + 1
	if !train {
		inputs = 2 // forward only: ping-pong between two residual buffers
	}
	for i := 0; i < inputs; i++ {
		add("input", act, N, H)
	}
	// A layer's activations, in layerActs' order: with cheap the
	// elementwise ones selective recomputation remakes (the norms' outputs
	// and statistics, SwiGLU's product), with rest the others.
	layer := func(cheap, rest bool) {
		if cheap {
			add("ln1", act, N, H)
			add("rstd1", engine.F32, N)
		}
		if rest {
			add("q", act, N, Q)
			add("k", act, N, KV)
			add("v", act, N, KV)
			// Attention keeps one log-sum-exp per row, not the T×T
			// probabilities: its backward recomputes them tile by tile.
			add("lse", engine.F32, B, heads, T)
			add("att", act, N, Q)
			add("h", act, N, H)
			if d.qkNorm {
				add("qraw", act, N, Q)
				add("kraw", act, N, KV)
				add("rstdq", engine.F32, N*heads)
				add("rstdk", engine.F32, N*d.kvHeads)
			}
		}
		if cheap {
			add("ln2", act, N, H)
			add("rstd2", engine.F32, N)
		}
		if rest {
			add("gate", act, N, I)
			add("up", act, N, I)
		}
		if cheap {
			add("act", act, N, I)
		}
	}
	sets := actSets(d.L, train, recompute)
	if train && recompute == RecomputeSelective {
		layer(true, false) // one set, shared by every layer
	}
	for i := 0; i < sets; i++ {
		layer(!train || recompute != RecomputeSelective, true)
	}
	add("lnf", act, N, H)
	add("rstdf", engine.F32, N)
	if train {
		add("logits", engine.F32, d.headRows(N), V)
	} else {
		add("logits", engine.F32, N, V)
	}
	if train {
		for _, n := range []string{"dx", "dh", "dln", "dnorm"} {
			add(n, act, N, H)
		}
		add("dq", act, N, Q)
		add("datt", act, N, Q)
		add("dk", act, N, KV)
		add("dv", act, N, KV)
		for _, n := range []string{"dgate", "dup", "dact"} {
			add(n, act, N, I)
		}
		add("dlnf", engine.F32, N, H)
		if d.qkNorm {
			add("dqn", act, N, Q)
			add("dkn", act, N, KV)
		}
	}
	p = append(p, scratchPlan(d, N)...)
	p = append(p, cePlan(d, N)...)
	// The adapters' z are GEMM outputs: every mode but full
	// recomputation keeps them a layer.
	p = append(p, loraPlan(d, N, sets, train)...)
	if train && act == engine.BF16 {
		// The head chunk's float32 logits gradient rounded to bf16 for
		// its two products (headLoss), which then multiply bf16 by bf16
		// on tensor cores rather than widen the whole head to float32.
		add("dlogits", engine.BF16, d.headRows(N), V)
	}
	return p
}

// actSets is how many sets of activations (layerActs) a workspace holds
// for L layers: one a layer in training, but for full recomputation's
// one shared set (as a forward-only pass holds).
func actSets(L int, train bool, recompute Recompute) int {
	if !train || recompute == RecomputeFull {
		return 1
	}
	return L
}

// ActivationBytes is the memory the model's workspace takes for batches of
// B sequences of T tokens: everything the engine allocates besides the
// parameters, their gradients and the optimizer state. train adds the
// saved activations and activation gradients of the backward pass.
// The count saturates at math.MaxInt64 (engine.SumBytes) for shapes no
// device could hold.
func ActivationBytes(cfg *checkpoints.Config, B, T int, train bool, recompute Recompute) int64 {
	return passBytes(fullDims(cfg), Work{Train: train, Recompute: recompute, Batch: B, SeqLen: T})
}

// prepare makes the workspace fit a batch shape and mode, reallocating
// only when either changed.
func (m *Model) prepare(B, T int, train bool) *workspace {
	if ws := m.ws; ws != nil && ws.B == B && ws.T == T && ws.train == train {
		return ws
	}
	m.freeWorkspace()
	b := m.backend
	tensors := []*engine.Tensor{}
	for _, p := range plan(m.d, B, T, train, m.Options.Recompute) {
		tensors = append(tensors, p.alloc(b))
	}
	next := func() *engine.Tensor {
		t := tensors[0]
		tensors = tensors[1:]
		return t
	}
	ws := &workspace{B: B, T: T, train: train}
	ws.ids, ws.targets, ws.pos, ws.weights, ws.losses = next(), next(), next(), next(), next()
	if train {
		ws.reportWeights, ws.reportLosses = next(), next()
	}
	inputs := m.Config.NumHiddenLayers + 1
	if !train {
		inputs = 2
	}
	for i := 0; i < inputs; i++ {
		ws.inputs = append(ws.inputs, next())
	}
	// The activations in plan's order: selective recomputation's shared
	// set first, then each layer's.
	take := func(a *layerActs, cheap, rest bool) {
		if cheap {
			a.ln1, a.rstd1 = next(), next()
		}
		if rest {
			a.q, a.k, a.v, a.lse, a.att, a.h = next(), next(), next(), next(), next(), next()
			if m.d.qkNorm {
				a.qraw, a.kraw, a.rstdq, a.rstdk = next(), next(), next(), next()
			}
		}
		if cheap {
			a.ln2, a.rstd2 = next(), next()
		}
		if rest {
			a.gate, a.up = next(), next()
		}
		if cheap {
			a.act = next()
		}
	}
	selective := train && m.Options.Recompute == RecomputeSelective
	var shared layerActs
	if selective {
		take(&shared, true, false)
	}
	for i := 0; i < actSets(m.Config.NumHiddenLayers, train, m.Options.Recompute); i++ {
		a := &layerActs{}
		if selective {
			a.ln1, a.rstd1, a.ln2, a.rstd2, a.act = shared.ln1, shared.rstd1, shared.ln2, shared.rstd2, shared.act
		}
		take(a, !selective, true)
		ws.layers = append(ws.layers, a)
	}
	ws.lnf, ws.rstdf, ws.logits = next(), next(), next()
	if train {
		g := &grads{}
		g.dx, g.dh, g.dln, g.dnorm = next(), next(), next(), next()
		g.dq, g.datt, g.dk, g.dv = next(), next(), next(), next()
		g.dgate, g.dup, g.dact = next(), next(), next()
		g.dlnf = next()
		if m.d.qkNorm {
			g.dqn, g.dkn = next(), next()
		}
		ws.g = g
	}
	ws.sc = newScratch(m.d, B*T, next)
	ws.ce = newCEScratch(m.d, B*T, next)
	if a := m.d.lora; a != nil {
		for _, l := range ws.layers {
			for p, module := range checkpoints.LoRAModules() {
				if a.Targets(module) {
					l.z[p] = next()
				}
			}
		}
		if train {
			ws.lora = &loraScratch{dz: next()}
			if a.LoRADropout > 0 {
				ws.lora.xd = next()
			}
		}
	}
	if train && m.d.act == engine.BF16 {
		ws.dlogits = next()
	}
	pos := make([]int32, B*T)
	for i := range pos {
		pos[i] = int32(i % T)
	}
	b.UploadInt32(ws.pos, pos)
	m.ws = ws
	return ws
}

// all lists every tensor of the workspace, for freeing.
func (ws *workspace) all() []*engine.Tensor {
	ts := []*engine.Tensor{ws.ids, ws.targets, ws.pos, ws.weights, ws.losses, ws.lnf, ws.rstdf, ws.logits}
	if ws.train {
		ts = append(ts, ws.reportWeights, ws.reportLosses)
	}
	ts = append(ts, ws.inputs...)
	for i, a := range ws.layers {
		if i == 0 || a.ln1 != ws.layers[0].ln1 { // selective recomputation's are shared
			ts = append(ts, a.ln1, a.rstd1, a.ln2, a.rstd2, a.act)
		}
		ts = append(ts, a.q, a.k, a.v, a.lse, a.att, a.h, a.gate, a.up)
		if a.qraw != nil {
			ts = append(ts, a.qraw, a.kraw, a.rstdq, a.rstdk)
		}
		for _, z := range a.z {
			if z != nil {
				ts = append(ts, z)
			}
		}
	}
	if s := ws.lora; s != nil {
		ts = append(ts, s.dz)
		if s.xd != nil {
			ts = append(ts, s.xd)
		}
	}
	if gw := ws.g; gw != nil { // the gradients' workspace
		ts = append(ts, gw.dx, gw.dh, gw.dln, gw.dnorm, gw.dq, gw.datt, gw.dk, gw.dv, gw.dgate, gw.dup, gw.dact, gw.dlnf)
		if gw.dqn != nil {
			ts = append(ts, gw.dqn, gw.dkn)
		}
	}
	if ws.dlogits != nil {
		ts = append(ts, ws.dlogits)
	}
	ts = append(ts, ws.sc.tensors()...)
	return append(ts, ws.ce.tensors()...)
}

func (m *Model) freeWorkspace() {
	if m.ws == nil {
		return
	}
	for _, t := range m.ws.all() {
		m.backend.Free(t)
	}
	m.ws = nil
}
