package comm

import "sync"

// Counters keeps a rank's Stats: the counts of every group the rank
// belongs to, and the step. Implementations give one Counters to a world
// communicator and to every communicator split from it, and call Add for
// each collective. It is safe for concurrent use: non-blocking collectives
// may be counted from worker goroutines while Stats is read elsewhere.
type Counters struct {
	mu   sync.Mutex
	step int
	ops  map[counterKey]*counts
}

type counterKey struct {
	group string
	size  int
	op    Op
}

// counts keeps integers only; Sent is derived in Stats, so that it is
// exactly Elements × SentFactor rather than a sum of rounded products.
type counts struct {
	calls, elements         int64
	stepCalls, stepElements int64
}

// NewCounters returns counters at step 0 with nothing counted.
func NewCounters() *Counters { return &Counters{ops: make(map[counterKey]*counts)} }

// Add counts one call of op on a group of size ranks with a payload of n
// elements (see the package documentation for what n is). Groups of one
// rank count nothing: they send nothing, and a model of the traffic has
// nothing to compare there.
func (c *Counters) Add(group string, size int, op Op, n int) {
	if size <= 1 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := counterKey{group, size, op}
	e := c.ops[k]
	if e == nil {
		e = new(counts)
		c.ops[k] = e
	}
	e.calls++
	e.elements += int64(n)
	e.stepCalls++
	e.stepElements += int64(n)
}

// SetStep records the step and restarts the per-step counts.
func (c *Counters) SetStep(step int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = step
	for _, e := range c.ops {
		e.stepCalls, e.stepElements = 0, 0
	}
}

// Step is the step last set.
func (c *Counters) Step() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.step
}

// Stats returns a snapshot.
func (c *Counters) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{Step: c.step, Ops: make([]OpStats, 0, len(c.ops))}
	for k, e := range c.ops {
		f := SentFactor(k.op, k.size)
		s.Ops = append(s.Ops, OpStats{
			Group: k.group, Size: k.size, Op: k.op,
			Total: Counts{Calls: e.calls, Elements: e.elements, Sent: float64(e.elements) * f},
			Step:  Counts{Calls: e.stepCalls, Elements: e.stepElements, Sent: float64(e.stepElements) * f},
		})
	}
	sortOps(s.Ops)
	return s
}
