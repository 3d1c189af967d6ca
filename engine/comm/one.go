package comm

import (
	"errors"
	"fmt"

	"github.com/memtrain/memtrain/engine"
)

// One returns the communicator of a group of one rank, named name, for
// tensors of backend b: the group a model on one rank runs in, so that
// one rank is the grid of one rank rather than a case apart. Nothing is
// exchanged: an all-reduce or broadcast leaves its tensor as it is, a
// reduce-scatter or all-gather copies src to dst with b (nothing at all
// in place), a barrier returns at once, and nothing is counted (see the
// package documentation). It needs no communicator library, so any
// backend can make one; its groups are split from it with Split.
func One(b engine.Backend, name string) Comm {
	if name == "" {
		panic("comm: One with an empty group name")
	}
	return &one{b: b, name: name, counters: NewCounters()}
}

// one is the only rank of a group of one.
type one struct {
	b        engine.Backend
	name     string
	counters *Counters // shared with the groups split from it
	closed   bool
}

func (c *one) Rank() int        { return 0 }
func (c *one) Size() int        { return 1 }
func (c *one) Group() string    { return c.name }
func (c *one) Stats() Stats     { return c.counters.Stats() }
func (c *one) SetStep(step int) { c.counters.SetStep(step) }

func (c *one) Close() error {
	c.closed = true
	return nil
}

func (c *one) AllReduce(t *engine.Tensor) error { return c.whole(AllReduce, t, 0) }
func (c *one) Broadcast(t *engine.Tensor, root int) error {
	return c.whole(Broadcast, t, root)
}
func (c *one) ReduceScatter(dst, src *engine.Tensor) error {
	return c.chunk(ReduceScatter, src, dst)
}
func (c *one) AllGather(dst, src *engine.Tensor) error { return c.chunk(AllGather, dst, src) }
func (c *one) Barrier() error                          { return c.check(Barrier) }

// The non-blocking collectives are done by the time they return, in the
// backend's order (a copy on a GPU is queued on its stream like the
// kernels after it), so their requests only report the error.
func (c *one) IAllReduce(t *engine.Tensor) Request { return done{c.AllReduce(t)} }
func (c *one) IReduceScatter(dst, src *engine.Tensor) Request {
	return done{c.ReduceScatter(dst, src)}
}
func (c *one) IAllGather(dst, src *engine.Tensor) Request { return done{c.AllGather(dst, src)} }

func (c *one) Split(name string, color, key int) (Comm, error) {
	if err := c.check(Split); err != nil {
		return nil, err
	}
	switch {
	case name == "":
		return nil, c.wrap(Split, errors.New("empty group name"))
	case color == Undefined:
		return nil, nil
	case color < 0:
		return nil, c.wrap(Split, fmt.Errorf("color %d is negative and not Undefined", color))
	}
	return &one{b: c.b, name: name, counters: c.counters}, nil
}

// whole checks an all-reduce's or broadcast's tensor: over one rank
// there is nothing more to do.
func (c *one) whole(op Op, t *engine.Tensor, root int) error {
	if err := c.check(op); err != nil {
		return err
	}
	if err := c.checkTensor("t", t); err != nil {
		return c.wrap(op, err)
	}
	if op == Broadcast {
		if err := CheckRoot(root, 1); err != nil {
			return c.wrap(op, err)
		}
	}
	return nil
}

// chunk is a reduce-scatter or all-gather over one rank: the one chunk is
// the whole tensor, copied from src to dst unless they are the same.
func (c *one) chunk(op Op, full, part *engine.Tensor) error {
	if err := c.check(op); err != nil {
		return err
	}
	_, inPlace, err := CheckChunk(op, 1, 0, full, part)
	if err == nil {
		err = c.checkTensor("", full)
	}
	if err != nil {
		return c.wrap(op, err)
	}
	switch {
	case inPlace || full.Len() == 0:
	case op == ReduceScatter:
		c.b.Copy(part, full)
	default:
		c.b.Copy(full, part)
	}
	return nil
}

// check refuses a closed communicator.
func (c *one) check(op Op) error {
	if c.closed {
		return c.wrap(op, errors.New("communicator closed"))
	}
	return nil
}

// checkTensor checks that t is a tensor of the communicator's backend
// (CheckChunk has checked that the other tensor is on the same device).
func (c *one) checkTensor(name string, t *engine.Tensor) error {
	if err := CheckTensor(name, t); err != nil {
		return err
	}
	if d := c.b.Device(); t.Device() != d {
		return fmt.Errorf("%v is not on %v, the communicator's device", t, d)
	}
	return nil
}

func (c *one) wrap(op Op, err error) error {
	return &Error{Group: c.name, Rank: 0, Size: 1, Op: op, Step: c.counters.Step(), Err: err}
}

// done is the request of a collective already complete.
type done struct{ err error }

func (d done) Wait() error { return d.err }
