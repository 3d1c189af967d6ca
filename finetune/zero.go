package finetune

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// ZeRO stage 1: AdamW's moments sharded over the data-parallel ranks.
//
// The D data replicas of a grid position hold the same parameter shards
// and, once the gradients are reduced, the same gradients; without ZeRO
// each runs the same AdamW update on all of them and holds both moments
// of every element. With ZeRO each parameter's elements are cut into D
// chunks as a reduce-scatter cuts them (comm.Chunk over the tensor's
// elements: the first ranks' chunks ⌈n/D⌉ long), data rank r holds the
// moments of chunk r only and updates that chunk (AdamWStep on views of
// the parameter, its gradient and its bf16 copy), and the updated chunks
// are all-gathered over the data group into the tensor the passes
// multiply by: the bf16 copy in mixed precision, the float32 weight
// otherwise.
//
// What a rank holds: every gradient whole (the reduction is the existing
// bucketed all-reduce, see below), the float32 weights whole, the bf16
// copies whole, and 1/D of the moments. In mixed precision the float32
// master outside the rank's chunks is not updated by the step (only its
// bf16 copy is gathered); syncMasters gathers it before anything reads
// the masters whole (a checkpoint save).
//
// Why the gradients are still all-reduced: the gradient norm that clips
// the step is a float32 sum of squares per tensor in the backend's order
// (StepSums); a reduce-scatter leaves each rank a chunk of each gradient,
// whose partial sums of squares add up to another float32 number than the
// whole tensor's. Keeping the all-reduce keeps the norm, the clipping and
// so every update bit for bit those of ZeRO 0, which the tests prove.
//
// A chunk's AdamW is elementwise, so the update of chunk r is bit for bit
// the elements r of the whole update; the all-gather copies them.

// zeroShard is one rank's part of a ZeRO-1 optimizer: the data group and,
// per parameter, the chunk of its elements this rank updates.
type zeroShard struct {
	data   comm.Comm
	off, n []int
}

// newZeroShard cuts params into data's chunks.
func newZeroShard(params []*engine.Param, data comm.Comm) *zeroShard {
	z := &zeroShard{data: data}
	for _, p := range params {
		off, n := comm.Chunk(p.Value.Len(), data.Size(), data.Rank())
		z.off, z.n = append(z.off, off), append(z.n, n)
	}
	return z
}

// view is t's chunk i as a flat tensor; nil for nil.
func (z *zeroShard) view(t *engine.Tensor, i int) *engine.Tensor {
	if t == nil {
		return nil
	}
	return t.View(z.off[i], z.n[i])
}

// gather all-gathers every parameter's updated chunks into target(p) on
// every data rank, all in flight at once.
func (z *zeroShard) gather(params []*engine.Param, target func(*engine.Param) *engine.Tensor) error {
	var rs comm.Requests
	for i, p := range params {
		t := target(p)
		rs = append(rs, z.data.IAllGather(t, z.view(t, i)))
	}
	if err := rs.Wait(); err != nil {
		return fmt.Errorf("finetune: ZeRO's all-gather of the updated parameters: %w", err)
	}
	return nil
}

// passWeight is the tensor the passes multiply by: the bf16 copy in mixed
// precision, else the weight.
func passWeight(p *engine.Param) *engine.Tensor {
	if p.Copy != nil {
		return p.Copy
	}
	return p.Value
}

// NewShardedOptimizer is NewOptimizer with ZeRO stage 1 over the data
// group data (see zero.go's comment): AdamW only, whose moments are
// allocated for this rank's chunks. A group of one rank (or nil) is
// NewOptimizer's optimizer.
func NewShardedOptimizer(b engine.Backend, params []*engine.Param, cfg OptimizerConfig, data comm.Comm) (*Optimizer, error) {
	if data == nil || data.Size() == 1 {
		return NewOptimizer(b, params, cfg)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Name != "adamw" {
		return nil, errors.New("finetune: ZeRO shards AdamW's moments; optimizer " + cfg.Name + " has none")
	}
	z := newZeroShard(params, data)
	o := &Optimizer{cfg: cfg, backend: b, params: params, zero: z}
	for i, p := range params {
		if z.n[i] == 0 {
			// A tensor of fewer elements than ranks: nothing to update
			// here; its moments are nil.
			o.m, o.v = append(o.m, nil), append(o.v, nil)
			continue
		}
		o.m = append(o.m, b.Alloc(engine.F32, z.n[i]))
		o.v = append(o.v, b.Alloc(engine.F32, z.n[i]))
		o.fused = append(o.fused, engine.AdamWTensors{Param: z.view(p.Value, i), Grad: z.view(p.Grad, i),
			M: o.m[i], V: o.v[i], Copy: z.view(p.Copy, i), WeightDecay: float32(o.weightDecay(p))})
	}
	return o, nil
}

// syncMasters makes every rank's float32 masters whole again in mixed
// precision under ZeRO (the step updates and gathers only the bf16
// copies' chunks); a no-op otherwise.
func (o *Optimizer) syncMasters() error {
	if o.zero == nil {
		return nil
	}
	for _, p := range o.params {
		if p.Copy != nil {
			return o.zero.gather(o.params, func(p *engine.Param) *engine.Tensor { return p.Value })
		}
	}
	return nil
}
