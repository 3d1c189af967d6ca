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
		off, n := comm.Chunk(p.Grad.Len(), data.Size(), data.Rank())
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
	if err := checkCompact(b, params, cfg); err != nil {
		return nil, err
	}
	if cfg.Moments == "int8" {
		return nil, errors.New("finetune: 8-bit moments are not sharded over the data ranks (ZeRO cuts their blocks)")
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
		o.m = append(o.m, b.Alloc(cfg.momentDType(), z.n[i]))
		o.v = append(o.v, b.Alloc(cfg.momentDType(), z.n[i]))
		o.fused = append(o.fused, engine.AdamWTensors{Param: z.view(p.Value, i), Grad: z.view(p.Grad, i),
			M: o.m[i], V: o.v[i], Copy: z.view(p.Copy, i), Low: z.view(p.Low, i), Round: cfg.round(p, z.off[i]),
			WeightDecay: float32(o.weightDecay(p))})
	}
	return o, nil
}

// syncMasters makes every rank's float32 masters whole again in mixed
// precision under ZeRO (the step updates and gathers only the bf16
// copies' chunks): the float32 masters, or a split master's low halves;
// a no-op otherwise.
func (o *Optimizer) syncMasters() error {
	if o.zero == nil {
		return nil
	}
	for _, p := range o.params {
		if p.Copy != nil {
			return o.zero.gather(o.params, func(p *engine.Param) *engine.Tensor {
				if p.Low != nil {
					return p.Low
				}
				return p.Value
			})
		}
	}
	return nil
}

// gatherMoments brings the whole moments of every parameter to data
// rank 0, the replica that writes its grid position's pieces
// (rankPieces), for a checkpoint save: a collective over the data group
// under ZeRO, a no-op without. Each parameter's moment is assembled in
// one device buffer of the largest parameter's size on data rank 0 (its
// own chunk copied, the others' broadcast from the ranks that hold them;
// the other ranks pass their chunk or a scratch of the largest chunk's
// size) and downloaded into dst(kind, param, n) — kind 1 or 2, a host
// slice of n elements; nil: not wanted here, as on a data rank 0 that
// writes no moments. So a save holds, beyond the step's memory, one
// parameter's buffer on the device and the position's moments on the
// host (where an asynchronous save's snapshot holds them anyway).
func (o *Optimizer) gatherMoments(dst func(kind, param, n int) []float32) error {
	z := o.zero
	if z == nil {
		return nil
	}
	b, d := o.backend, z.data
	size := 0
	for _, p := range o.params {
		if d.Rank() == 0 {
			size = max(size, p.Grad.Len())
		} else {
			_, n := comm.Chunk(p.Grad.Len(), d.Size(), 0) // the largest chunk
			size = max(size, n)
		}
	}
	buf := b.Alloc(o.cfg.momentDType(), size) // broadcast in the moments' dtype
	defer b.Free(buf)
	for i, p := range o.params {
		for k, own := range [2][]*engine.Tensor{o.m, o.v} {
			var full *engine.Tensor // data rank 0's assembled moment
			if d.Rank() == 0 {
				full = buf.View(0, p.Grad.Len())
				if z.n[i] > 0 {
					b.Copy(full.View(0, z.n[i]), own[i])
				}
			}
			for r := 1; r < d.Size(); r++ {
				off, n := comm.Chunk(p.Grad.Len(), d.Size(), r)
				if n == 0 {
					continue
				}
				t := buf.View(0, n) // a scratch on the ranks that neither send nor receive
				switch d.Rank() {
				case 0:
					t = full.View(off, n)
				case r:
					t = own[i]
				}
				if err := d.Broadcast(t, r); err != nil {
					return fmt.Errorf("finetune: gathering ZeRO's moments for a checkpoint: %w", err)
				}
			}
			if d.Rank() == 0 {
				if h := dst(k+1, i, full.Len()); h != nil {
					b.Download(h, full)
				}
			}
		}
	}
	return nil
}

// hostMoments are moments gathered to the host (gatherMoments) by
// (kind, param), as a snapshot keys its buffers.
type hostMoments map[[2]int][]float32

// gatherSaved gathers the moments this rank writes in a save of m
// (none but on a data rank 0 that writes a position's moments) into the
// host, reusing into's buffers; every rank of the data group calls it.
func (o *Optimizer) gatherSaved(m *llama.Model, into hostMoments) error {
	_, ms := rankPieces(m, o)
	writes := map[int]bool{}
	for _, p := range ms {
		writes[p.param] = true
	}
	return o.gatherMoments(func(kind, param, n int) []float32 {
		if !writes[param] {
			return nil
		}
		key := [2]int{kind, param}
		if len(into[key]) != n {
			into[key] = make([]float32, n)
		}
		return into[key]
	})
}

// withMoments reads moment pieces from h, the rest from src.
func withMoments(src pieceSource, h hostMoments) pieceSource {
	return func(p shardPiece, put func([]float32) error) error {
		if p.kind > 0 {
			return put(h[[2]int{p.kind, p.param}])
		}
		return src(p, put)
	}
}

// readChunk reads parameter i's tensor name from src (its whole shard,
// as m.ReadInto reads it) and keeps this rank's ZeRO chunk in dst,
// through a temporary of the shard's size.
func (o *Optimizer) readChunk(m *llama.Model, src parallel.SliceReader, name string, i int, dst *engine.Tensor) error {
	p := o.params[i]
	tmp := o.backend.Alloc(engine.F32, p.Grad.Shape...)
	defer o.backend.Free(tmp)
	if err := m.ReadInto(src, name, p, tmp); err != nil {
		return err
	}
	o.backend.Copy(dst, o.zero.view(tmp, i))
	return nil
}

// newRunOptimizer is the optimizer of a run's model: ZeRO-1 over the
// grid's data group when cfg asks for it (over a group of one rank, as on
// one rank, that is NewOptimizer's).
func newRunOptimizer(cfg Config, m *llama.Model) (*Optimizer, error) {
	cfg.Optimizer.Seed = cfg.Seed
	if cfg.Zero == 1 {
		return NewShardedOptimizer(m.Backend(), m.Trainable(), cfg.Optimizer, m.Grid().Data)
	}
	return NewOptimizer(m.Backend(), m.Trainable(), cfg.Optimizer)
}
