package comm

import "github.com/memtrain/memtrain/engine"

// A Grouper is a communicator that can start several all-reduces as one
// operation of its library: NCCL's group calls (ncclGroupStart,
// ncclGroupEnd), which launch the group's collectives together and
// aggregate small ones into fewer kernels. It is optional: IAllReduceGroup
// uses it where a communicator has it and falls back to one IAllReduce a
// tensor elsewhere (in-process and MPI ranks, for which a group would buy
// nothing), so Comm itself is unchanged.
type Grouper interface {
	// IAllReduceGroup starts the all-reduce of each tensor of ts, in order,
	// as one group, and returns a Request that completes them all. Each
	// tensor is one all-reduce for the ordering rule and the counters, as
	// if IAllReduce had been called on each in turn: every rank of the
	// group passes tensors of the same lengths in the same order.
	IAllReduceGroup(ts []*engine.Tensor) Request
}

// IAllReduceGroup starts the all-reduce of each tensor of ts over c as one
// group where c is a Grouper, else as one IAllReduce each, and returns a
// Request that completes them all. The results are those of the
// all-reduces one at a time: grouping changes when the collectives run,
// not what they compute or how they are counted.
func IAllReduceGroup(c Comm, ts []*engine.Tensor) Request {
	if g, ok := c.(Grouper); ok {
		return g.IAllReduceGroup(ts)
	}
	reqs := make(Requests, len(ts))
	for i, t := range ts {
		reqs[i] = c.IAllReduce(t)
	}
	return reqs
}

// Requests are requests completed together: Wait waits for every one, in
// order, and reports the first error.
type Requests []Request

// Wait waits for every request, even after one has failed, so that no
// buffer is left in use by a collective still in flight.
func (rs Requests) Wait() error {
	var first error
	for _, r := range rs {
		if err := r.Wait(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
