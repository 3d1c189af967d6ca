package finetune

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/llama"
	"github.com/memtrain/memtrain/engine/parallel"
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

// whole returns the optimizer as a checkpoint save reads it, and the
// function that releases what it allocated. Without ZeRO it is o itself.
// Under ZeRO it is collective over the data group: the masters are made
// whole (syncMasters), and data rank 0, the replica that writes the
// grid position's pieces (rankPieces), gets every parameter's moments
// whole in temporaries, each chunk broadcast from the rank that holds it;
// the other ranks' moments stay their chunks (a save only asks them
// whether there are moments). Rank 0 thus holds the whole moments for
// the save's duration (an asynchronous save: until its host snapshot is
// taken), the other ranks one chunk's scratch.
func (o *Optimizer) whole() (*Optimizer, func(), error) {
	z := o.zero
	if z == nil {
		return o, func() {}, nil
	}
	if err := o.syncMasters(); err != nil {
		return nil, nil, err
	}
	b, d := o.backend, z.data
	w := *o
	w.m, w.v = make([]*engine.Tensor, len(o.m)), make([]*engine.Tensor, len(o.v))
	var temps []*engine.Tensor
	release := func() {
		for _, t := range temps {
			b.Free(t)
		}
		temps = nil
	}
	scratch := 0
	for _, p := range o.params {
		_, n := comm.Chunk(p.Value.Len(), d.Size(), 0) // the largest chunk
		scratch = max(scratch, n)
	}
	var buf *engine.Tensor
	if d.Rank() != 0 {
		buf = b.Alloc(engine.F32, scratch)
		temps = append(temps, buf)
	}
	for i, p := range o.params {
		for k, own := range [2][]*engine.Tensor{o.m, o.v} {
			full := own[i]
			if d.Rank() == 0 {
				full = b.Alloc(engine.F32, p.Value.Len())
				temps = append(temps, full)
				if n := z.n[i]; n > 0 {
					b.Copy(full.View(0, n), own[i])
				}
			}
			[2][]*engine.Tensor{w.m, w.v}[k][i] = full
			for r := 1; r < d.Size(); r++ {
				off, n := comm.Chunk(p.Value.Len(), d.Size(), r)
				if n == 0 {
					continue
				}
				var t *engine.Tensor
				switch d.Rank() {
				case 0:
					t = full.View(off, n)
				case r:
					t = own[i]
				default:
					t = buf.View(0, n)
				}
				if err := d.Broadcast(t, r); err != nil {
					release()
					return nil, nil, fmt.Errorf("finetune: gathering ZeRO's moments for a checkpoint: %w", err)
				}
			}
		}
	}
	return &w, release, nil
}

// readChunk reads parameter i's tensor name from src (its whole shard,
// as m.ReadInto reads it) and keeps this rank's ZeRO chunk in dst,
// through a temporary of the shard's size.
func (o *Optimizer) readChunk(m *llama.Model, src parallel.SliceReader, name string, i int, dst *engine.Tensor) error {
	p := o.params[i]
	tmp := o.backend.Alloc(engine.F32, p.Value.Shape...)
	defer o.backend.Free(tmp)
	if err := m.ReadInto(src, name, p, tmp); err != nil {
		return err
	}
	o.backend.Copy(dst, o.zero.view(tmp, i))
	return nil
}

// newRunOptimizer is the optimizer of a run's model: ZeRO-1 over the
// grid's data group when cfg asks for it (and there is one).
func newRunOptimizer(cfg Config, m *llama.Model) (*Optimizer, error) {
	if g := m.Grid(); cfg.Zero == 1 && g != nil {
		return NewShardedOptimizer(m.Backend(), m.Trainable(), cfg.Optimizer, g.Data)
	}
	return NewOptimizer(m.Backend(), m.Trainable(), cfg.Optimizer)
}
