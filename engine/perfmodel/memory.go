package perfmodel

import (
	"github.com/memtrain/memtrain/checkpoints"
)

// Memory is what one rank holds during a training step, in bytes.
type Memory struct {
	// Weights is the rank's shard as a bf16 compute copy plus the fp32
	// master copy: 6 bytes a parameter (engine.PrecisionBF16).
	Weights int64 `json:"weights"`
	// Gradients is the shard's fp32 gradient: 4 bytes a parameter.
	Gradients int64 `json:"gradients"`
	// Optimizer is AdamW's two fp32 moments: 8 bytes a parameter.
	Optimizer int64 `json:"optimizer"`
	// Activations is the micro-batch's saved activations, activation
	// gradients and logits (activationMemory).
	Activations int64 `json:"activations"`
	// Workspace is what Z-sharding adds (zero when Z = 1): the all-gathered
	// bf16 weights of the largest layer — a decoder layer's seven linears
	// or the embedding/head block — twice when the next layer's gather is
	// prefetched (OAG), plus the largest single weight block's fp32
	// gradient before its reduce-scatter.
	Workspace int64 `json:"workspace"`
}

// Total is the sum of the parts.
func (m Memory) Total() int64 {
	return m.Weights + m.Gradients + m.Optimizer + m.Activations + m.Workspace
}

// ShardParams is the number of parameters one rank of grid g stores: each
// weight's out·in/(X·Y·Z) and each norm's hidden/X (norms are split over X
// with the residual stream, replicated over Y and Z).
func ShardParams(cfg *checkpoints.Config, g Grid) int64 {
	var n int64
	for _, w := range weights(cfg) {
		k := int64(1)
		if w.perLayer {
			k = int64(cfg.NumHiddenLayers)
		}
		n += k * w.blockElements(g) / int64(g.Z)
	}
	norms := int64(2*cfg.NumHiddenLayers + 1)
	return n + norms*int64(cfg.HiddenSize/g.X)
}

// EstimateMemory sizes one rank's memory for step s in bf16 mixed
// precision with AdamW.
func EstimateMemory(cfg *checkpoints.Config, s Step, o Options) (Memory, error) {
	if err := s.validate(cfg); err != nil {
		return Memory{}, err
	}
	return estimateMemory(cfg, s, o), nil
}

func estimateMemory(cfg *checkpoints.Config, s Step, o Options) Memory {
	p := ShardParams(cfg, s.Grid)
	m := Memory{
		Weights:     6 * p,
		Gradients:   4 * p,
		Optimizer:   8 * p,
		Activations: activationMemory(cfg, s.Grid, s.MicroBatch, s.SeqLen, s.Recompute, o.Attention, activationBytes, statBytes),
	}
	if g := s.Grid; g.Z > 1 {
		// The largest gathered unit: one decoder layer's seven linears, or
		// the embedding/head block.
		var decoder, unit, largest int64
		for _, w := range weights(cfg) {
			b := w.blockElements(g)
			largest = max(largest, b)
			if w.perLayer {
				decoder += b
			} else {
				unit = max(unit, b)
			}
		}
		unit = max(unit, decoder)
		buffers := int64(1)
		if !o.NoOverlap {
			buffers = 2
		}
		m.Workspace = buffers*unit*weightBytes + largest*gradBytes
	}
	return m
}

// activationMemory is the per-rank workspace of a training micro-batch of
// b sequences of T tokens (N = b·T), laid out as engine/llama's workspace
// plan (workspace.go) lays it out for one device, with every dimension
// replaced by its per-rank share: the residual stream and norm outputs are
// [N, H/X], queries [N, Q/Y], keys and values [N, KV/Y], the MLP's
// [N, I/Y], logits [N, V/Y]. act is the bytes of a float activation, stat
// of a per-token statistic. It holds:
//
//   - token ids, targets, positions, loss weights and losses: 4 bytes each
//     per token;
//   - the L+1 layer inputs (each layer's input, then the last output);
//   - per layer (one shared set with recomputation): ln1, rstd1, q, k, v,
//     the attention's saved state, att, h, ln2, rstd2, gate, up, act;
//   - the final norm's output and rstd, the fp32 logits of one chunk of
//     at most 256 MiB of token rows (their gradient replaces them in
//     place; the whole batch's on X or Y grids);
//   - one set of activation gradients shared by all layers: dx, dh, dln,
//     dnorm, dq, datt, dk, dv, dgate, dup, dact, dlnf.
//
// With AttentionFlash the attention saves a log-sum-exp per token and head
// (stat bytes), as fused flash-attention kernels (and both of memtrain's
// backends) do; with AttentionProbs the softmax [b, heads/Y, T, T], as
// unfused attention does.
// headChunkElements is engine/llama's bound on a training pass's logits:
// 256 MiB of float32 at a time (a test ties the two accountings).
const headChunkElements = 64 << 20

func activationMemory(cfg *checkpoints.Config, g Grid, b, T int, recompute bool, attn Attention, act, stat int64) int64 {
	N := int64(b) * int64(T)
	L := int64(cfg.NumHiddenLayers)
	h := int64(cfg.HiddenSize / g.X)
	q := int64(cfg.QDim() / g.Y)
	kv := int64(cfg.KVDim() / g.Y)
	i := int64(cfg.IntermediateSize / g.Y)
	v := int64(cfg.VocabSize / g.Y)
	heads := int64(cfg.NumAttentionHeads / g.Y)

	total := 7 * N * 4             // ids, targets, pos, weights, losses, report weights and losses
	total += (L + 1) * N * h * act // layer inputs
	attention := N * heads * stat
	if attn == AttentionProbs {
		attention = int64(b) * heads * int64(T) * int64(T) * act
	}
	set := N*h*act + N*stat + // ln1, rstd1
		N*q*act + 2*N*kv*act + attention + N*q*act + // q, k, v, attention, att
		N*h*act + N*h*act + N*stat + // h, ln2, rstd2
		3*N*i*act // gate, up, act
	sets := L
	if recompute {
		sets = 1
	}
	total += sets * set
	// The head's logits, a chunk of rows at a time (engine/llama's
	// headRows): the whole batch's when X or Y splits them.
	rows := N
	if g.X == 1 && g.Y == 1 {
		rows = min(N, max(1, headChunkElements/max(1, v)))
	}
	total += N*h*act + N*stat + rows*v*4 // lnf, rstdf, logits
	total += 4*N*h*act + 2*N*q*act + 2*N*kv*act + 3*N*i*act + N*h*act
	return total
}
