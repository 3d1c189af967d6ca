package llama

import (
	"fmt"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// Gradient reduction over the data-parallel ranks, in buckets that
// overlap the backward pass, as PyTorch DDP's do.
//
// During an optimizer step's last micro-batch (ForwardBackwardSum's last
// slot, or a ForwardBackward after LastMicroBatch) the backward marks each
// gradient final where the pass makes its last write into it (gradFinal),
// and the gradient goes into its group's open bucket, which is issued as
// one all-reduce group (comm.IAllReduceGroup) as soon as it holds
// Options.GradientBucketBytes. ReduceGradients issues the buckets still
// open and waits for them all, before anything reads the gradients (the
// optimizer, the gradient norm). Earlier micro-batches only accumulate:
// a sum issued before the last one would miss its part.
//
// The readiness rule — where a gradient's last write is:
//
//   - a weight written by one kernel of the backward (a layer's linears
//     and norms, the final norm, an untied LM head over its chunks, the
//     adapters): after that kernel, marked where the pass leaves the
//     layer (layerGradsFinal), the head (backward's start) or the final
//     norm;
//   - a tied embedding, written by the LM head and by the embedding's
//     backward: after the embedding's backward only, the pass's last
//     kernel (the head's write is not a final one);
//   - a Z-sharded weight: its gradient block is reduce-scattered over Z
//     and this rank's chunk added into its gradient (zGrads), so it is
//     final when that addition is issued, which with ORS comes later in
//     the pass, when the block's buffer is needed again or at its end;
//     zGrads marks it there, and the places above skip it (wroteGrad). A
//     tied, Z-sharded embedding is reduce-scattered once, after the
//     embedding's backward has added its part to the head's.
//
// Every trainable gradient is marked exactly once in such a pass (a
// second mark, or none, panics: a pass that wrote a gradient after its
// sum was issued would sum a partial gradient).
//
// Order. Gradients become final in the backward's order — the head, the
// final norm, the layers from the last to the first, the embedding — on
// every rank alike, and a rank's buckets depend only on the sizes of its
// shards, which are equal on the ranks of a group: so every rank issues
// the same collectives on each group in the same order, and two ranks
// sharing two groups (a data group and a Z group, say) interleave their
// buckets with the backward's other collectives alike, as NCCL's rule for
// several communicators asks (engine/cuda's TestNCCLOrderEmulated checks
// it). On the CUDA backend a bucket runs on its communicator's stream,
// after an event recorded on the compute stream behind the kernels that
// wrote it, and the compute stream waits for it only in ReduceGradients.
// On data-parallel and Z grids nothing allocates, frees or synchronises
// the host while a bucket is in flight (engine/cuda's
// TestSteadyStateGridEmulated). On X grids RMSNorm's host round trips
// synchronise with the compute stream meanwhile (as they already did
// with ORS's reduce-scatters in flight): the compute stream waits for no
// bucket before ReduceGradients, so such a wait cannot hang on one.
//
// Results. An all-reduce sums each element over the group's ranks in
// rank order whatever the bucket it travels in and whenever it is issued,
// so the sums are bit for bit those of one all-reduce a gradient after
// the backward (Options.ReduceAfterBackward; TestGradientBucketsExact).
//
// Adapters are summed twice: A's over the ranks that split its
// projection's input, B's over those that split its output, then both
// over the batch's ranks (data and Z). The first sum is issued in the
// backward; the second, which needs the first's result, in ReduceGradients
// — except where the first group has one rank (no X or Y split), where the
// batch's sum is issued in the backward.

// gradReduce is the reduction of the step in progress.
type gradReduce struct {
	armed bool         // the next training pass is its step's last micro-batch
	bs    *gradBuckets // the buckets of the pass's backward, nil outside one
	final map[*engine.Param]bool
	// later are the gradients whose batch sum waits for their first sum
	// (adapters on X or Y ranks), in the order they became final.
	later []*engine.Tensor
}

// LastMicroBatch tells the model that the next ForwardBackward is its
// optimizer step's last micro-batch: on a grid its backward then issues
// the gradients' sums over the data-parallel ranks as they become final,
// and ReduceGradients, which must follow before the gradients are read,
// waits for them. Without it ForwardBackward only accumulates, and
// ReduceGradients does the whole reduction. (ForwardBackwardSum knows its
// last micro-batch from its slot.)
func (m *Model) LastMicroBatch() { m.reduce.armed = true }

// beginReduce starts the reduction in the training pass about to run its
// head and backward, when the pass is its step's last micro-batch (last,
// or armed by LastMicroBatch) on a grid of more than one rank.
func (m *Model) beginReduce(last bool) error {
	r := &m.reduce
	last, r.armed = last || r.armed, false
	if !last || m.Options.Parallel.World.Size() == 1 || m.Options.ReduceAfterBackward {
		return nil
	}
	if r.bs != nil {
		return fmt.Errorf("llama: a second last micro-batch before ReduceGradients")
	}
	r.bs = m.gradientBuckets()
	if r.final == nil {
		r.final = map[*engine.Param]bool{}
	}
	clear(r.final)
	r.later = r.later[:0]
	return nil
}

// gradFinal marks p's gradient final in the pass: it is summed over first
// (the adapters' X or Y group; nil for none), then over c. Outside a
// reducing pass it does nothing.
func (m *Model) gradFinal(p *engine.Param, first, c comm.Comm) {
	r := &m.reduce
	if r.bs == nil || p.Grad == nil {
		return
	}
	if r.final[p] {
		panic(fmt.Sprintf("llama: gradient of %s marked final twice in one backward", p.Name))
	}
	r.final[p] = true
	if first != nil && first.Size() > 1 {
		r.bs.add(p.Grad, first)
		r.later = append(r.later, p.Grad)
		return
	}
	r.bs.add(p.Grad, c)
}

// baseGroups are the groups a base parameter's gradient is summed over,
// by its declared split (parallel.Grid.GradGroups): first (nil for
// none), then batch — the data replicas for a weight shard, the data·Z
// ranks for a vector (see ReduceGradients).
func (m *Model) baseGroups(p *engine.Param) (first, batch comm.Comm) {
	return m.Options.Parallel.GradGroups(p.Split)
}

// wroteGrad records that the pass has made its last direct write into
// base parameter p's gradient — unless p is a Z-sharded matrix, whose
// final write is zGrads' addition of its reduce-scattered chunk, marked
// there.
func (m *Model) wroteGrad(p *engine.Param) {
	if m.reduce.bs == nil || (m.zg != nil && p.Split.ChunksZ()) {
		return
	}
	m.baseGradFinal(p)
}

// baseGradFinal is gradFinal for base parameter p, over its split's
// groups.
func (m *Model) baseGradFinal(p *engine.Param) {
	first, batch := m.baseGroups(p)
	m.gradFinal(p, first, batch)
}

// layerGradsFinal marks layer l's gradients final once its backward is
// done: its weights' (or, with adapters, the adapters').
func (m *Model) layerGradsFinal(l int) {
	if m.reduce.bs == nil {
		return
	}
	layer := m.Layers[l]
	for _, p := range layer.params {
		m.wroteGrad(p)
	}
	for _, ad := range layer.LoRA {
		if ad != nil {
			dataZ := m.Options.Parallel.DataZ
			m.gradFinal(ad.A, ad.in, dataZ)
			m.gradFinal(ad.B, ad.out, dataZ)
		}
	}
}

// endBackwardReduce issues the buckets still open at the end of a
// reducing pass's backward, without waiting: ReduceGradients does.
func (m *Model) endBackwardReduce() {
	r := &m.reduce
	if r.bs == nil {
		return
	}
	for _, p := range m.Trainable() {
		if (p.Grad != nil || m.fused != nil) && !r.final[p] { // a fused step's are freed by now
			panic(fmt.Sprintf("llama: gradient of %s never marked final in the backward", p.Name))
		}
	}
	r.bs.flush()
}

// abandon waits for the sums a failed step left in flight, so that no
// collective still writes a gradient that is about to be cleared, and
// forgets the step. Their errors are dropped: the step that issued them
// has returned its own already, and a broken group fails its next
// collective anyway.
func (r *gradReduce) abandon() {
	r.armed = false
	if r.bs != nil {
		_ = r.bs.pending.Wait()
		r.bs = nil
	}
}

// inFlight reports whether a backward issued sums that ReduceGradients
// has not yet completed.
func (r *gradReduce) inFlight() bool { return r.bs != nil }

// ReduceGradients completes an optimizer step's gradients on a grid, once
// after its last micro-batch: every gradient is summed over the groups
// its declared split names (parallel.Grid.GradGroups): a weight shard's
// over the data-parallel replicas, a vector's over the data·Z ranks,
// which saw different tokens (its X·Y copies at one data·Z coordinate
// computed the same sum, so Y is not summed). On one rank it does
// nothing.
//
// When the last micro-batch's backward issued the gradients' buckets
// (see the comment at the top of buckets.go), it waits for them (and
// issues the adapters' second sums); otherwise it issues them all here, in
// parameter order. Either way the gradients go in buckets
// (Options.GradientBucketBytes), one open bucket per group, each issued
// as one all-reduce group as soon as it is full, the rest at the end. The
// ranks of a group hold shards of the same sizes, so they issue the same
// buckets on it, and two ranks sharing both groups interleave them alike,
// as NCCL requires of collectives on several communicators. With OAR the
// buckets run in the background until they are waited for here; without,
// each is waited for in turn. The sums are those of one all-reduce a
// gradient, and each gradient counts as one.
func (m *Model) ReduceGradients() (err error) {
	if m.Options.FusedOptimizer {
		return errFusedPass // FusedStep sums each unit's in its backward
	}
	g := m.Options.Parallel
	if g.World.Size() == 1 {
		return nil // nothing to sum
	}
	defer recoverComm(&err)
	if r := &m.reduce; r.bs != nil {
		bs := r.bs
		r.bs = nil
		bs.finish() // the first sums are complete before the batch's ranks add theirs
		for _, t := range r.later {
			bs.add(t, g.DataZ)
		}
		bs.finish()
		return nil
	}
	if m.lora != nil {
		return m.reduceAdapterGradients()
	}
	bs := m.gradientBuckets()
	var later []*engine.Param // summed over a first group, then over their batch's
	for _, p := range m.Trainable() {
		first, batch := m.baseGroups(p)
		if first != nil && first.Size() > 1 {
			bs.add(p.Grad, first)
			later = append(later, p)
			continue
		}
		bs.add(p.Grad, batch)
	}
	bs.finish()
	if later != nil {
		for _, p := range later {
			_, batch := m.baseGroups(p)
			bs.add(p.Grad, batch)
		}
		bs.finish()
	}
	return nil
}

// gradBuckets all-reduces gradients in buckets: one open bucket per
// group, filled in the order the gradients are added and issued as one
// all-reduce group (comm.IAllReduceGroup) once it holds limit bytes or
// more. Without OAR each bucket is waited for when issued; with it, in
// finish. A failed collective panics with a commFailure (check).
type gradBuckets struct {
	limit   int64
	overlap bool
	open    []*gradBucket // in the order of their groups' first gradients
	pending comm.Requests
}

type gradBucket struct {
	c     comm.Comm
	grads []*engine.Tensor
	bytes int64
}

// gradientBuckets returns empty buckets of Options.GradientBucketBytes on
// m's grid.
func (m *Model) gradientBuckets() *gradBuckets {
	limit := int64(m.Options.GradientBucketBytes)
	if limit == 0 {
		limit = DefaultGradientBucketBytes
	}
	return &gradBuckets{limit: limit, overlap: m.Options.Parallel.Overlap.AllReduce}
}

// add puts t in c's bucket, issuing it when full; nil or a group of one
// rank needs no sum.
func (bs *gradBuckets) add(t *engine.Tensor, c comm.Comm) {
	if c == nil || c.Size() == 1 {
		return
	}
	var b *gradBucket
	for _, o := range bs.open {
		if o.c == c {
			b = o
		}
	}
	if b == nil {
		b = &gradBucket{c: c}
		bs.open = append(bs.open, b)
	}
	b.grads = append(b.grads, t)
	if b.bytes += t.Bytes(); b.bytes >= bs.limit {
		bs.issue(b)
	}
}

func (bs *gradBuckets) issue(b *gradBucket) {
	r := comm.IAllReduceGroup(b.c, b.grads)
	if bs.overlap {
		bs.pending = append(bs.pending, r)
	} else {
		check(r.Wait())
	}
	b.grads, b.bytes = nil, 0
}

// flush issues the buckets still open, in the order they were opened.
func (bs *gradBuckets) flush() {
	for _, b := range bs.open {
		if len(b.grads) > 0 {
			bs.issue(b)
		}
	}
}

// finish issues the buckets still open and waits for every sum.
func (bs *gradBuckets) finish() {
	bs.flush()
	err := bs.pending.Wait()
	bs.open, bs.pending = nil, nil
	check(err)
}
