package local

import (
	"errors"
	"fmt"
	"github.com/memtrain/memtrain/engine/comm"
	"sort"
	"sync"
	"time"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/cpu/vec"
)

// New returns the communicators of n ranks in this process, one per
// rank, for host tensors of the CPU backend (F32; BF16 for mixed
// precision's activations and weight copies; I32 for token ids). Each is
// used by its own goroutine.
//
// Nothing is sent anywhere: when every rank has joined a collective, each
// rank works on its own chunk (comm.Chunk) of the result directly in the other
// ranks' tensors, and returns once every rank is done. An all-reduce thus
// reads each element of each rank once and writes it once, with no copy
// in between. Sums run in rank order, ((x₀ + x₁) + x₂) + …, in the
// tensors' own type, and each element is summed by exactly one rank and
// copied to the others, so every rank gets the same bits, whatever the
// scheduling. Non-blocking collectives run on a goroutine of their own.
//
// New panics if n < 1 or if TimeoutEnv is malformed (see comm.EnvTimeout
// to check it first).
func New(n int, opts ...comm.Option) []comm.Comm {
	if n < 1 {
		panic(fmt.Sprintf("local: New(%d): a group needs at least one rank", n))
	}
	cfg, err := comm.NewConfig(opts...)
	if err != nil {
		panic(err)
	}
	g := newLocalGroup(cfg.Name, n, cfg.Timeout)
	comms := make([]comm.Comm, n)
	for r := range comms {
		comms[r] = &local{g: g, rank: r, counters: comm.NewCounters()}
	}
	return comms
}

// localGroup is what the ranks of one in-process group share: the
// collectives in flight, keyed by their sequence number, since the i-th
// collective of every rank is the same collective.
type localGroup struct {
	name    string
	size    int
	timeout time.Duration

	mu     sync.Mutex
	slots  map[uint64]*slot
	broken error // set by a timeout or a mismatch; every later collective fails
}

func newLocalGroup(name string, size int, timeout time.Duration) *localGroup {
	return &localGroup{name: name, size: size, timeout: timeout, slots: make(map[uint64]*slot)}
}

// A slot is one collective in flight: what each rank brought to it, and
// two rendezvous. ready is closed when every rank has joined (the tensors
// of all ranks are then in a and b), done when every rank has finished its
// share (no one touches another rank's tensors after that). failed is
// closed instead of ready when the collective cannot complete.
type slot struct {
	op    comm.Op
	dtype engine.DType
	n     int // payload length, the same on every rank
	root  int
	first int // the rank whose arguments the others are checked against

	// Per rank: all-reduce, broadcast: a = t; reduce-scatter: a = src,
	// b = dst; all-gather: a = dst, b = src.
	a, b       []*engine.Tensor
	name       []string // split
	color, key []int    // split
	split      []splitResult

	joined        []bool
	arrived, left int
	ready, done   chan struct{}
	failed        chan struct{}
	err           error
}

type splitResult struct {
	g    *localGroup
	rank int
}

// call is one rank's side of a collective.
type call struct {
	op         comm.Op
	seq        uint64
	step       int
	a, b       *engine.Tensor
	n          int
	root       int
	name       string
	color, key int
}

// local is one rank's comm.Comm.
type local struct {
	g        *localGroup
	rank     int
	seq      uint64 // collectives issued so far; the next one's key
	counters *comm.Counters
	closed   bool
}

func (c *local) Rank() int         { return c.rank }
func (c *local) Size() int         { return c.g.size }
func (c *local) Group() string     { return c.g.name }
func (c *local) Stats() comm.Stats { return c.counters.Stats() }
func (c *local) SetStep(step int)  { c.counters.SetStep(step) }

func (c *local) Close() error {
	c.closed = true
	return nil
}

func (c *local) AllReduce(t *engine.Tensor) error { return c.do(comm.AllReduce, t, nil, 0) }
func (c *local) ReduceScatter(dst, src *engine.Tensor) error {
	return c.do(comm.ReduceScatter, src, dst, 0)
}
func (c *local) AllGather(dst, src *engine.Tensor) error { return c.do(comm.AllGather, dst, src, 0) }
func (c *local) Broadcast(t *engine.Tensor, root int) error {
	return c.do(comm.Broadcast, t, nil, root)
}
func (c *local) Barrier() error                           { return c.do(comm.Barrier, nil, nil, 0) }
func (c *local) IAllReduce(t *engine.Tensor) comm.Request { return c.start(comm.AllReduce, t, nil) }
func (c *local) IReduceScatter(dst, src *engine.Tensor) comm.Request {
	return c.start(comm.ReduceScatter, src, dst)
}
func (c *local) IAllGather(dst, src *engine.Tensor) comm.Request {
	return c.start(comm.AllGather, dst, src)
}

func (c *local) do(op comm.Op, a, b *engine.Tensor, root int) error {
	k, err := c.prepare(op, a, b, root)
	if err != nil || k == nil {
		return err
	}
	return c.run(k)
}

// localRequest is a non-blocking collective running on its own goroutine.
// Ordering needs no queue: the collective's sequence number was taken when
// it was issued, and it meets the other ranks' collective of that number
// whenever its goroutine gets there.
type localRequest struct {
	done chan struct{}
	err  error
}

func (r *localRequest) Wait() error {
	<-r.done
	return r.err
}

func (c *local) start(op comm.Op, a, b *engine.Tensor) comm.Request {
	r := &localRequest{done: make(chan struct{})}
	k, err := c.prepare(op, a, b, 0)
	if err != nil || k == nil {
		r.err = err
		close(r.done)
		return r
	}
	go func() {
		r.err = c.run(k)
		close(r.done)
	}()
	return r
}

func (c *local) wrap(op comm.Op, step int, err error) error {
	return &comm.Error{Group: c.g.name, Rank: c.rank, Size: c.g.size, Op: op, Step: step, Err: err}
}

// prepare checks one rank's arguments, counts the collective and takes
// its sequence number. It returns a nil call when there is nothing more
// to do: a group of one rank.
func (c *local) prepare(op comm.Op, a, b *engine.Tensor, root int) (*call, error) {
	step := c.counters.Step()
	if c.closed {
		return nil, c.wrap(op, step, errors.New("communicator closed"))
	}
	k := &call{op: op, step: step, a: a, b: b, root: root}
	p := c.g.size
	switch op {
	case comm.AllReduce, comm.Broadcast:
		if err := checkHost("t", a); err != nil {
			return nil, c.wrap(op, step, err)
		}
		if op == comm.Broadcast {
			if err := comm.CheckRoot(root, p); err != nil {
				return nil, c.wrap(op, step, err)
			}
		}
		k.n = a.Len()
	case comm.ReduceScatter, comm.AllGather:
		full, part := a, b
		_, inPlace, err := comm.CheckChunk(op, p, c.rank, full, part)
		if err == nil {
			err = checkHost("", full)
		}
		if err != nil {
			return nil, c.wrap(op, step, err)
		}
		k.n = full.Len()
		if p == 1 && !inPlace {
			copyHost(op, full, part)
		}
	}
	c.counters.Add(c.g.name, p, op, k.n)
	if p == 1 {
		return nil, nil
	}
	k.seq = c.seq
	c.seq++
	return k, nil
}

// copyHost is a reduce-scatter or all-gather over one rank: a copy.
func copyHost(op comm.Op, full, part *engine.Tensor) {
	switch full.DType() {
	case engine.F32:
		copyChunk(op, cpu.Float32s(full), cpu.Float32s(part))
	case engine.BF16:
		copyChunk(op, cpu.BF16s(full), cpu.BF16s(part))
	case engine.I32:
		copyChunk(op, cpu.Int32s(full), cpu.Int32s(part))
	}
}

func copyChunk[T any](op comm.Op, full, part []T) {
	if op == comm.ReduceScatter {
		copy(part, full)
	} else {
		copy(full, part)
	}
}

// checkHost checks that t is a host tensor this communicator can read.
func checkHost(name string, t *engine.Tensor) error {
	if err := comm.CheckTensor(name, t); err != nil {
		return err
	}
	if _, ok := t.Storage.(*cpu.Storage); !ok {
		return fmt.Errorf("%v is not a tensor of the CPU backend (in-process ranks share host memory)", t)
	}
	if d := t.DType(); d != engine.F32 && d != engine.BF16 && d != engine.I32 {
		return fmt.Errorf("%v: only f32, bf16 and i32 tensors are supported", t)
	}
	return nil
}

// run takes this rank's part in the collective k: join, wait for the
// others, do this rank's share, wait for the others to finish theirs.
func (c *local) run(k *call) error {
	g := c.g
	s, err := g.join(c.rank, k)
	if err == nil {
		err = g.awaitReady(s)
	}
	if err != nil {
		return c.wrap(k.op, k.step, err)
	}
	switch k.op {
	case comm.Barrier, comm.Split:
		return nil // nothing to compute, and no tensors to keep alive
	}
	switch s.dtype {
	case engine.F32:
		share(s, c.rank, cpu.Float32s, sum[float32])
	case engine.BF16:
		share(s, c.rank, cpu.BF16s, sumBF16)
	case engine.I32:
		share(s, c.rank, cpu.Int32s, sum[int32])
	}
	g.mu.Lock()
	s.left++
	if s.left == g.size {
		close(s.done)
	}
	g.mu.Unlock()
	<-s.done
	return nil
}

// join brings rank's side of the collective k to its slot.
func (g *localGroup) join(rank int, k *call) (*slot, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.broken != nil {
		return nil, fmt.Errorf("group unusable after an earlier failure: %w", g.broken)
	}
	s := g.slots[k.seq]
	if s == nil {
		p := g.size
		s = &slot{
			op: k.op, n: k.n, root: k.root, first: rank,
			a: make([]*engine.Tensor, p), b: make([]*engine.Tensor, p),
			joined: make([]bool, p),
			ready:  make(chan struct{}), done: make(chan struct{}), failed: make(chan struct{}),
		}
		if k.a != nil {
			s.dtype = k.a.DType()
		}
		if k.op == comm.Split {
			s.name, s.color, s.key = make([]string, p), make([]int, p), make([]int, p)
		}
		g.slots[k.seq] = s
	} else if err := s.matches(rank, k); err != nil {
		g.fail(err)
		return nil, err
	}
	s.joined[rank] = true
	s.a[rank], s.b[rank] = k.a, k.b
	if k.op == comm.Split {
		s.name[rank], s.color[rank], s.key[rank] = k.name, k.color, k.key
	}
	s.arrived++
	if s.arrived == g.size {
		if k.op == comm.Split {
			if err := s.makeSplit(g); err != nil {
				g.fail(err)
				return nil, err
			}
		}
		delete(g.slots, k.seq)
		close(s.ready)
	}
	return s, nil
}

// matches checks that rank called the same collective as the rank that
// opened the slot: a difference means the ranks' programs went out of
// step, and the group cannot recover.
func (s *slot) matches(rank int, k *call) error {
	describe := func(op comm.Op, n int, dtype engine.DType, root int) string {
		switch op {
		case comm.Barrier, comm.Split:
			return op.String()
		case comm.Broadcast:
			return fmt.Sprintf("%v of %d %v elements from root %d", op, n, dtype, root)
		}
		return fmt.Sprintf("%v of %d %v elements", op, n, dtype)
	}
	var dtype engine.DType
	if k.a != nil {
		dtype = k.a.DType()
	}
	mine := describe(k.op, k.n, dtype, k.root)
	theirs := describe(s.op, s.n, s.dtype, s.root)
	if mine != theirs {
		return fmt.Errorf("collectives out of step: rank %d called %s where rank %d called %s", rank, mine, s.first, theirs)
	}
	return nil
}

// awaitReady waits until every rank has joined s, or the watchdog gives
// up: then the group is broken, and every rank waiting in it learns why.
func (g *localGroup) awaitReady(s *slot) error {
	select {
	case <-s.ready:
		return nil
	default:
	}
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	select {
	case <-s.ready:
		return nil
	case <-s.failed:
		return s.err
	case <-timer.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-s.ready: // the last rank came as the timer fired
		return nil
	case <-s.failed:
		return s.err
	default:
	}
	missing := 0
	for missing < g.size && s.joined[missing] {
		missing++
	}
	err := &comm.TimeoutError{Peer: missing, Timeout: g.timeout}
	g.fail(err)
	return err
}

// fail breaks the group: every collective still gathering its ranks
// fails with err, and so does every later one. Collectives whose ranks
// have all joined finish normally. g.mu is held.
func (g *localGroup) fail(err error) {
	if g.broken == nil {
		g.broken = err
	}
	for seq, s := range g.slots {
		s.err = err
		close(s.failed)
		delete(g.slots, seq)
	}
}

// makeSplit forms the new groups of a comm.Split once every rank has joined.
func (s *slot) makeSplit(parent *localGroup) error {
	p := parent.size
	byColor := make(map[int][]int)
	for r := 0; r < p; r++ {
		if s.color[r] != comm.Undefined {
			byColor[s.color[r]] = append(byColor[s.color[r]], r)
		}
	}
	s.split = make([]splitResult, p)
	for color, ranks := range byColor {
		sort.SliceStable(ranks, func(i, j int) bool { return s.key[ranks[i]] < s.key[ranks[j]] })
		name := s.name[ranks[0]]
		for _, r := range ranks {
			if s.name[r] != name {
				return fmt.Errorf("split: rank %d names color %d %q, rank %d names it %q", r, color, s.name[r], ranks[0], name)
			}
		}
		g := newLocalGroup(name, len(ranks), parent.timeout)
		for i, r := range ranks {
			s.split[r] = splitResult{g: g, rank: i}
		}
	}
	return nil
}

func (c *local) Split(name string, color, key int) (comm.Comm, error) {
	step := c.counters.Step()
	if c.closed {
		return nil, c.wrap(comm.Split, step, errors.New("communicator closed"))
	}
	if name == "" {
		return nil, c.wrap(comm.Split, step, errors.New("empty group name"))
	}
	if color < 0 && color != comm.Undefined {
		return nil, c.wrap(comm.Split, step, fmt.Errorf("color %d is negative and not Undefined", color))
	}
	if c.g.size == 1 {
		if color == comm.Undefined {
			return nil, nil
		}
		return &local{g: newLocalGroup(name, 1, c.g.timeout), counters: c.counters}, nil
	}
	k := &call{op: comm.Split, step: step, seq: c.seq, name: name, color: color, key: key}
	c.seq++
	s, err := c.g.join(c.rank, k)
	if err == nil {
		err = c.g.awaitReady(s)
	}
	if err != nil {
		return nil, c.wrap(comm.Split, step, err)
	}
	res := s.split[c.rank]
	if res.g == nil {
		return nil, nil
	}
	return &local{g: res.g, rank: res.rank, counters: c.counters}, nil
}

// elem is the element types the in-process ranks add up in their own
// type (BF16 is added up in float32: sumBF16).
type elem interface{ ~float32 | ~int32 }

// block is how many elements a rank sums at a time: enough to stream, few
// enough for the partial sums to stay in L1.
const block = 2048

// share does rank r's part of the collective s, whose ranks have all
// joined: its chunk of the sums of an all-reduce or reduce-scatter, or its
// own copies of an all-gather or broadcast. The shares of different ranks
// touch disjoint elements, so they run at the same time without locks.
// sum adds up chunks of the buffers (sum or sumBF16).
func share[T any](s *slot, r int, data func(*engine.Tensor) []T, sum func(bufs [][]T, off, n int, emit func(lo int, acc []T))) {
	p := len(s.a)
	switch s.op {
	case comm.AllReduce:
		bufs := make([][]T, p)
		for q := range bufs {
			bufs[q] = data(s.a[q])
		}
		off, n := comm.Chunk(s.n, p, r)
		sum(bufs, off, n, func(lo int, acc []T) {
			for _, b := range bufs {
				copy(b[lo:], acc)
			}
		})
	case comm.ReduceScatter:
		srcs := make([][]T, p)
		for q := range srcs {
			srcs[q] = data(s.a[q])
		}
		dst := data(s.b[r])
		off, n := comm.Chunk(s.n, p, r)
		sum(srcs, off, n, func(lo int, acc []T) { copy(dst[lo-off:], acc) })
	case comm.AllGather:
		dst := data(s.a[r])
		for q := 0; q < p; q++ {
			off, n := comm.Chunk(s.n, p, q)
			if n == 0 {
				continue
			}
			if src := data(s.b[q]); &src[0] != &dst[off] { // else in place: already there
				copy(dst[off:off+n], src)
			}
		}
	case comm.Broadcast:
		if r != s.root {
			copy(data(s.a[r]), data(s.a[s.root]))
		}
	}
}

// sum adds the elements [off, off+n) of every buffer in rank order, a
// block at a time, and hands each block of sums to emit, which stores it.
// Every block is read in full before emit writes it, so emit may write
// over the inputs (an all-reduce, a reduce-scatter in place).
func sum[T elem](bufs [][]T, off, n int, emit func(lo int, acc []T)) {
	var buf [block]T
	for lo := off; lo < off+n; lo += block {
		hi := min(lo+block, off+n)
		acc := buf[:hi-lo]
		copy(acc, bufs[0][lo:hi])
		for _, b := range bufs[1:] {
			add(acc, b[lo:hi])
		}
		emit(lo, acc)
	}
}

// sumBF16 is sum for bf16 bit patterns: each block is widened to
// float32, summed there in rank order and rounded once to nearest even
// (as the CPU backend rounds its bf16 outputs), so that the result is
// the rank-order float32 sum rounded once, not a sum rounded at every
// step.
func sumBF16(bufs [][]uint16, off, n int, emit func(lo int, acc []uint16)) {
	var acc, x [block]float32
	var out [block]uint16
	for lo := off; lo < off+n; lo += block {
		hi := min(lo+block, off+n)
		a, w := acc[:hi-lo], x[:hi-lo]
		vec.WidenBF16(a, bufs[0][lo:hi])
		for _, b := range bufs[1:] {
			vec.WidenBF16(w, b[lo:hi])
			add(a, w)
		}
		o := out[:hi-lo]
		vec.RoundBF16(o, a)
		emit(lo, o)
	}
}

// add sets acc[i] += x[i]. Float32 goes through vec.Axpy with α = 1,
// whose product is exact, so its sums are those of the plain loop, bit
// for bit, at the speed of its AVX kernels.
func add[T elem](acc, x []T) {
	if a, ok := any(acc).([]float32); ok {
		vec.Axpy(1, any(x).([]float32), a)
		return
	}
	for i := range acc {
		acc[i] += x[i]
	}
}
