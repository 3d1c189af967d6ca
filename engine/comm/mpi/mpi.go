//go:build mpi

package mpi

/*
#cgo pkg-config: ompi
#include <mpi.h>
#include <stdlib.h>

// MPI's handles and constants are macros (in Open MPI, addresses of
// library globals), which cgo cannot use directly.
static MPI_Comm mt_world(void) { return MPI_COMM_WORLD; }
static MPI_Datatype mt_float(void) { return MPI_FLOAT; }
static MPI_Datatype mt_int(void) { return MPI_INT; }
static MPI_Datatype mt_uint16(void) { return MPI_UINT16_T; }
static MPI_Op mt_sum(void) { return MPI_SUM; }
static void *mt_in_place(void) { return MPI_IN_PLACE; }
static int mt_undefined(void) { return MPI_UNDEFINED; }

static int mt_init(int *provided) {
	int done = 0;
	MPI_Finalized(&done);
	if (done) return -1;
	MPI_Initialized(&done);
	if (done) return -2;
	int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, provided);
	if (rc != MPI_SUCCESS) return rc;
	// Errors come back as codes, to be wrapped with context, rather than
	// aborting the job; communicators split from the world inherit it.
	return MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

static int mt_testsome(int n, MPI_Request *reqs, int *outcount, int *indices) {
	return MPI_Testsome(n, reqs, outcount, indices, MPI_STATUSES_IGNORE);
}

static int mt_error_string(int code, char *buf, int len) {
	int n = 0;
	if (MPI_Error_string(code, buf, &n) != MPI_SUCCESS) return 0;
	return n;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"time"
	"unsafe"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
	"github.com/memtrain/memtrain/engine/cpu"
	"github.com/memtrain/memtrain/engine/cpu/vec"
)

// Init initialises MPI and returns the world communicator of the job
// (MPI_COMM_WORLD), named "world" unless comm.WithName says otherwise. It
// may be called once per process; Close of the world finalises MPI.
func Init(opts ...comm.Option) (comm.Comm, error) {
	cfg, err := comm.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	p := &proxy{calls: make(chan func()), quit: make(chan struct{})}
	started := make(chan error)
	go p.loop(started)
	if err := <-started; err != nil {
		return nil, err
	}
	w := &mpiComm{
		p: p, name: cfg.Name, world: true,
		counters: comm.NewCounters(),
		watchdog: &comm.Watchdog{Timeout: cfg.Timeout},
	}
	_ = p.do(func() { // cannot fail: the loop has just started
		w.c = C.mt_world()
		var rank, size C.int
		C.MPI_Comm_rank(w.c, &rank)
		C.MPI_Comm_size(w.c, &size)
		w.rank, w.size = int(rank), int(size)
	})
	return w, nil
}

// proxy is the progress loop: the one goroutine, locked to its OS thread,
// that calls MPI (see the package documentation).
type proxy struct {
	calls chan func()   // run on the MPI thread, in order
	quit  chan struct{} // closed when the loop has returned

	// Owned by the loop.
	reqs    []C.MPI_Request
	pending []func(error) // completions, parallel to reqs
	indices []C.int       // MPI_Testsome's output, kept to spin without allocating
	exit    bool          // set by the call that finalises MPI
}

// The loop spins on MPI_Testsome this many times after the last progress
// before it starts to sleep, and sleeps at most maxNap: short collectives
// complete without a sleep, long ones cost a few wake-ups per
// millisecond, not a core.
const (
	spins  = 256
	maxNap = 100 * time.Microsecond
)

func (p *proxy) loop(started chan<- error) {
	// Never unlocked: when the loop returns after MPI_Finalize, the thread
	// goes with it, and no other goroutine ever runs on a thread MPI knows.
	runtime.LockOSThread()
	defer close(p.quit)
	var provided C.int
	if rc := C.mt_init(&provided); rc != C.MPI_SUCCESS {
		switch rc {
		case -1:
			started <- errors.New("mpi: Init after MPI was finalised")
		case -2:
			started <- errors.New("mpi: Init called twice (MPI is already initialised)")
		default:
			started <- fmt.Errorf("mpi: MPI_Init_thread: %w", mpiError(rc))
		}
		return
	}
	if provided < C.MPI_THREAD_FUNNELED {
		started <- fmt.Errorf("mpi: the MPI library provides thread level %d, below MPI_THREAD_FUNNELED", provided)
		return
	}
	started <- nil

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	idle := 0
	for !p.exit {
		if len(p.reqs) == 0 {
			(<-p.calls)()
			idle = 0
			continue
		}
		select {
		case f := <-p.calls:
			f()
			idle = 0
			continue
		default:
		}
		if p.test() {
			idle = 0
			continue
		}
		if idle++; idle < spins {
			continue
		}
		nap := min(time.Duration(idle-spins+1)*time.Microsecond, maxNap)
		timer.Reset(nap)
		select {
		case f := <-p.calls:
			f()
			idle = 0
		case <-timer.C:
		}
		timer.Stop()
	}
}

// errFinalized is the cause of the errors of communicators used after the
// world was closed.
var errFinalized = errors.New("MPI was finalised (the world communicator is closed)")

// post hands f to the MPI thread, or reports errFinalized if it is gone.
func (p *proxy) post(f func()) error {
	select {
	case p.calls <- f:
		return nil
	case <-p.quit:
		return errFinalized
	}
}

// do runs f on the MPI thread and waits for it.
func (p *proxy) do(f func()) error {
	done := make(chan struct{})
	if err := p.post(func() {
		f()
		close(done)
	}); err != nil {
		return err
	}
	<-done
	return nil
}

// add makes req pending; finish will be called on the MPI thread when it
// completes (with nil) or fails.
func (p *proxy) add(req C.MPI_Request, finish func(error)) {
	p.reqs = append(p.reqs, req)
	p.pending = append(p.pending, finish)
}

// test tests every pending request once and finishes those completed. It
// reports whether any did.
func (p *proxy) test() bool {
	n := len(p.reqs)
	if cap(p.indices) < n {
		p.indices = make([]C.int, 2*n)
	}
	indices := p.indices[:n]
	var count C.int
	rc := C.mt_testsome(C.int(n), &p.reqs[0], &count, &indices[0])
	if rc != C.MPI_SUCCESS {
		// MPI does not say which request failed: fail them all, which
		// the callers cannot recover from anyway.
		err := mpiError(rc)
		for _, f := range p.pending {
			f(err)
		}
		clear(p.pending)
		p.reqs, p.pending = p.reqs[:0], p.pending[:0]
		return true
	}
	if count <= 0 { // 0, or MPI_UNDEFINED: none completed
		return false
	}
	for _, i := range indices[:count] {
		p.pending[i](nil)
		p.pending[i] = nil
	}
	k := 0
	for i := range n {
		if p.pending[i] != nil {
			p.reqs[k], p.pending[k] = p.reqs[i], p.pending[i]
			k++
		}
	}
	clear(p.pending[k:])
	p.reqs, p.pending = p.reqs[:k], p.pending[:k]
	return true
}

// mpiError turns an MPI error code into an error with MPI's own words.
func mpiError(code C.int) error {
	var buf [C.MPI_MAX_ERROR_STRING]C.char
	if n := C.mt_error_string(code, &buf[0], C.MPI_MAX_ERROR_STRING); n > 0 {
		return fmt.Errorf("MPI error %d: %s", int(code), C.GoStringN(&buf[0], n))
	}
	return fmt.Errorf("MPI error %d", int(code))
}

// mpiComm is one rank's MPI communicator.
type mpiComm struct {
	p          *proxy
	c          C.MPI_Comm
	rank, size int
	name       string
	world      bool
	counters   *comm.Counters // shared with every communicator split from the world
	watchdog   *comm.Watchdog
	closed     bool
}

func (m *mpiComm) Rank() int                        { return m.rank }
func (m *mpiComm) Size() int                        { return m.size }
func (m *mpiComm) Group() string                    { return m.name }
func (m *mpiComm) Stats() comm.Stats                { return m.counters.Stats() }
func (m *mpiComm) SetStep(step int)                 { m.counters.SetStep(step) }
func (m *mpiComm) AllReduce(t *engine.Tensor) error { return m.IAllReduce(t).Wait() }
func (m *mpiComm) ReduceScatter(dst, src *engine.Tensor) error {
	return m.IReduceScatter(dst, src).Wait()
}
func (m *mpiComm) AllGather(dst, src *engine.Tensor) error { return m.IAllGather(dst, src).Wait() }
func (m *mpiComm) Broadcast(t *engine.Tensor, root int) error {
	return m.start(comm.Broadcast, t, nil, root).Wait()
}
func (m *mpiComm) Barrier() error { return m.start(comm.Barrier, nil, nil, 0).Wait() }
func (m *mpiComm) IAllReduce(t *engine.Tensor) comm.Request {
	return m.start(comm.AllReduce, t, nil, 0)
}
func (m *mpiComm) IReduceScatter(dst, src *engine.Tensor) comm.Request {
	return m.start(comm.ReduceScatter, src, dst, 0)
}
func (m *mpiComm) IAllGather(dst, src *engine.Tensor) comm.Request {
	return m.start(comm.AllGather, dst, src, 0)
}

func (m *mpiComm) errorAt(op comm.Op, step int) comm.Error {
	return comm.Error{Group: m.name, Rank: m.rank, Size: m.size, Op: op, Step: step}
}

func (m *mpiComm) wrap(op comm.Op, step int, err error) error {
	e := m.errorAt(op, step)
	e.Err = err
	return &e
}

// request is a collective in flight.
type request struct {
	done chan struct{}
	err  error
}

func (r *request) Wait() error {
	<-r.done
	return r.err
}

func finished(err error) *request {
	r := &request{done: make(chan struct{}), err: err}
	close(r.done)
	return r
}

// buffer is a host tensor's elements as MPI sees them.
type buffer struct {
	ptr   unsafe.Pointer // nil when empty
	n     int
	dtype C.MPI_Datatype
	esize int
	bf16  bool // bit patterns of bfloat16s, moved as 16-bit integers
}

// uint16s is b's elements as bf16 bit patterns.
func (b buffer) uint16s() []uint16 {
	if b.ptr == nil {
		return nil
	}
	return unsafe.Slice((*uint16)(b.ptr), b.n)
}

func hostBuffer(name string, t *engine.Tensor) (buffer, error) {
	if err := comm.CheckTensor(name, t); err != nil {
		return buffer{}, err
	}
	if _, ok := t.Storage.(*cpu.Storage); !ok {
		return buffer{}, fmt.Errorf("%v is not a tensor of the CPU backend (MPI reads host memory)", t)
	}
	b := buffer{n: t.Len(), esize: 4}
	if b.n > math.MaxInt32 {
		return buffer{}, fmt.Errorf("%v has %d elements, more than MPI's int counts hold", t, b.n)
	}
	switch t.DType() {
	case engine.F32:
		b.dtype = C.mt_float()
		if s := cpu.Float32s(t); len(s) > 0 {
			b.ptr = unsafe.Pointer(&s[0])
		}
	case engine.BF16:
		b.dtype, b.esize, b.bf16 = C.mt_uint16(), 2, true
		if s := cpu.BF16s(t); len(s) > 0 {
			b.ptr = unsafe.Pointer(&s[0])
		}
	case engine.I32:
		b.dtype = C.mt_int()
		if s := cpu.Int32s(t); len(s) > 0 {
			b.ptr = unsafe.Pointer(&s[0])
		}
	default:
		return buffer{}, fmt.Errorf("%v: only f32, bf16 and i32 tensors are supported", t)
	}
	return b, nil
}

// cInts is an array of C ints in C memory, which MPI may keep until a
// non-blocking collective completes.
type cInts struct {
	p *C.int
	n int
}

func newCInts(n int) cInts {
	return cInts{p: (*C.int)(C.calloc(C.size_t(max(n, 1)), C.size_t(unsafe.Sizeof(C.int(0))))), n: n}
}

func (a cInts) slice() []C.int { return unsafe.Slice(a.p, a.n) }
func (a cInts) free()          { C.free(unsafe.Pointer(a.p)) }

// start checks and counts a collective, and posts it to the MPI thread.
// For reduce-scatter a is src and b dst; for all-gather a is dst and b src.
func (m *mpiComm) start(op comm.Op, a, b *engine.Tensor, root int) comm.Request {
	step := m.counters.Step()
	fail := func(err error) comm.Request { return finished(m.wrap(op, step, err)) }
	if m.closed {
		return fail(errors.New("communicator closed"))
	}
	var bufA, bufB buffer
	var err error
	inPlace := false
	n := 0
	switch op {
	case comm.AllReduce, comm.Broadcast:
		if bufA, err = hostBuffer("t", a); err != nil {
			return fail(err)
		}
		if op == comm.Broadcast {
			if err := comm.CheckRoot(root, m.size); err != nil {
				return fail(err)
			}
		}
		n = bufA.n
	case comm.ReduceScatter, comm.AllGather:
		if _, inPlace, err = comm.CheckChunk(op, m.size, m.rank, a, b); err != nil {
			return fail(err)
		}
		if bufA, err = hostBuffer("", a); err != nil {
			return fail(err)
		}
		if bufB, err = hostBuffer("", b); err != nil {
			return fail(err)
		}
		n = bufA.n
	}
	m.counters.Add(m.name, m.size, op, n)
	if m.size == 1 {
		if (op == comm.ReduceScatter || op == comm.AllGather) && !inPlace && n > 0 {
			from, to := bufA, bufB
			if op == comm.AllGather {
				from, to = bufB, bufA
			}
			copy(unsafe.Slice((*byte)(to.ptr), n*to.esize), unsafe.Slice((*byte)(from.ptr), n*from.esize))
		}
		return finished(nil)
	}

	r := &request{done: make(chan struct{})}
	if bufA.bf16 && (op == comm.AllReduce || op == comm.ReduceScatter) {
		m.reduceBF16(r, op, step, bufA, bufB)
		return r
	}
	// MPI keeps the tensors' addresses after the posting call returns:
	// pin them until the collective completes (cgo's pointer rules).
	var pins runtime.Pinner
	for _, buf := range []buffer{bufA, bufB} {
		if buf.ptr != nil {
			pins.Pin(buf.ptr)
		}
	}
	var counts, displs cInts
	var tmp []byte // an in-place reduce-scatter's result, copied to dst at the end
	stop := m.watchdog.Watch(m.errorAt(op, step))
	finish := func(err error) {
		stop()
		if err == nil && tmp != nil {
			copy(unsafe.Slice((*byte)(bufB.ptr), len(tmp)), tmp)
		}
		pins.Unpin()
		if counts.p != nil {
			counts.free()
		}
		if displs.p != nil {
			displs.free()
		}
		if err != nil {
			err = m.wrap(op, step, err)
		}
		r.err = err
		close(r.done)
	}
	if op == comm.ReduceScatter && inPlace && bufB.n > 0 {
		tmp = make([]byte, bufB.n*bufB.esize)
		pins.Pin(&tmp[0])
	}
	if op == comm.ReduceScatter || op == comm.AllGather {
		counts, displs = newCInts(m.size), newCInts(m.size)
		cs, ds := counts.slice(), displs.slice()
		for q := range m.size {
			off, l := comm.Chunk(n, m.size, q)
			cs[q], ds[q] = C.int(l), C.int(off)
		}
	}
	err = m.p.post(func() {
		var req C.MPI_Request
		var rc C.int
		switch op {
		case comm.AllReduce:
			rc = C.MPI_Iallreduce(C.mt_in_place(), bufA.ptr, C.int(n), bufA.dtype, C.mt_sum(), m.c, &req)
		case comm.ReduceScatter:
			out := bufB.ptr
			if tmp != nil {
				out = unsafe.Pointer(&tmp[0])
			}
			rc = C.MPI_Ireduce_scatter(bufA.ptr, out, counts.p, bufA.dtype, C.mt_sum(), m.c, &req)
		case comm.AllGather:
			send := bufB.ptr
			if inPlace {
				send = C.mt_in_place()
			}
			rc = C.MPI_Iallgatherv(send, C.int(bufB.n), bufB.dtype, bufA.ptr, counts.p, displs.p, bufA.dtype, m.c, &req)
		case comm.Broadcast:
			rc = C.MPI_Ibcast(bufA.ptr, C.int(n), bufA.dtype, C.int(root), m.c, &req)
		case comm.Barrier:
			rc = C.MPI_Ibarrier(m.c, &req)
		}
		if rc != C.MPI_SUCCESS {
			finish(mpiError(rc))
			return
		}
		m.p.add(req, finish)
	})
	if err != nil {
		finish(err)
	}
	return r
}

// reduceBF16 runs a bf16 all-reduce (src is t, dst unused) or
// reduce-scatter into r. MPI has no bf16 type, and a reduction operator
// on bf16 pairs would round at every step of MPI's sum, in an order of
// its choosing. Instead every rank receives every rank's copy of the
// elements it must sum — its chunk (comm.Chunk) through MPI_Ialltoallv
// for a reduce-scatter, as many elements as a ring sends; the whole
// tensor through MPI_Iallgather for an all-reduce, (p−1)·n elements where
// a ring sends 2(p−1)/p·n, the same bytes as a float32 ring at p = 4 —,
// sums them in float32 in rank order and rounds once to nearest even, as
// local.New does, so that every rank holds the same bits. One MPI
// collective each, posted in the caller's order: a second stage posted on
// completion could meet other collectives out of order.
func (m *mpiComm) reduceBF16(r *request, op comm.Op, step int, src, dst buffer) {
	p, n := m.size, src.n
	mine := n
	if op == comm.ReduceScatter {
		_, mine = comm.Chunk(n, p, m.rank)
	}
	// Rank q's copy of the mine elements this rank sums (its chunk, or the
	// whole tensor) lands at recv[q·mine:].
	recv := make([]uint16, max(p*mine, 1))
	var counts, displs, rcounts, rdispls cInts
	if op == comm.ReduceScatter {
		counts, displs = newCInts(p), newCInts(p)   // the chunks of src, by rank
		rcounts, rdispls = newCInts(p), newCInts(p) // this rank's chunk, from each rank
		cs, ds, rcs, rds := counts.slice(), displs.slice(), rcounts.slice(), rdispls.slice()
		for q := range p {
			o, l := comm.Chunk(n, p, q)
			cs[q], ds[q] = C.int(l), C.int(o)
			rcs[q], rds[q] = C.int(mine), C.int(q*mine)
		}
	}
	var pins runtime.Pinner
	pins.Pin(&recv[0])
	if src.ptr != nil {
		pins.Pin(src.ptr)
	}
	stop := m.watchdog.Watch(m.errorAt(op, step))
	finish := func(err error) {
		stop()
		pins.Unpin()
		for _, a := range []cInts{counts, displs, rcounts, rdispls} {
			if a.p != nil {
				a.free()
			}
		}
		if err == nil {
			out := dst.uint16s() // in place, src's chunk: its copy was sent already
			if op == comm.AllReduce {
				out = src.uint16s()
			}
			sumBF16(out, recv, p, mine)
		} else {
			err = m.wrap(op, step, err)
		}
		r.err = err
		close(r.done)
	}
	err := m.p.post(func() {
		var req C.MPI_Request
		var rc C.int
		if op == comm.ReduceScatter {
			rc = C.MPI_Ialltoallv(src.ptr, counts.p, displs.p, src.dtype,
				unsafe.Pointer(&recv[0]), rcounts.p, rdispls.p, src.dtype, m.c, &req)
		} else {
			rc = C.MPI_Iallgather(src.ptr, C.int(n), src.dtype, unsafe.Pointer(&recv[0]), C.int(n), src.dtype, m.c, &req)
		}
		if rc != C.MPI_SUCCESS {
			finish(mpiError(rc))
			return
		}
		// The sum runs off the MPI thread, which keeps progressing the
		// other collectives meanwhile.
		m.p.add(req, func(err error) { go finish(err) })
	})
	if err != nil {
		finish(err)
	}
}

// sumBF16 sets out[i] to the float32 sum in rank order of the p bf16
// values recv[q·m+i], rounded once to nearest even.
func sumBF16(out, recv []uint16, p, m int) {
	acc, x := make([]float32, m), make([]float32, m)
	vec.WidenBF16(acc, recv[:m])
	for q := 1; q < p; q++ {
		vec.WidenBF16(x, recv[q*m:(q+1)*m])
		for i, v := range x {
			acc[i] += v
		}
	}
	vec.RoundBF16(out, acc)
}

func (m *mpiComm) Split(name string, color, key int) (comm.Comm, error) {
	step := m.counters.Step()
	wrap := func(err error) error { return m.wrap(comm.Split, step, err) }
	if m.closed {
		return nil, wrap(errors.New("communicator closed"))
	}
	if name == "" {
		return nil, wrap(errors.New("empty group name"))
	}
	if color < 0 && color != comm.Undefined {
		return nil, wrap(fmt.Errorf("color %d is negative and not Undefined", color))
	}
	if color > math.MaxInt32 || key > math.MaxInt32 || key < math.MinInt32 {
		return nil, wrap(fmt.Errorf("color %d or key %d does not fit in a C int", color, key))
	}
	cColor := C.int(color)
	if color == comm.Undefined {
		cColor = C.mt_undefined()
	}
	var sub C.MPI_Comm
	var rank, size C.int
	var rc C.int
	// MPI_Comm_split has no non-blocking form: it blocks the MPI thread,
	// under the watchdog like any collective.
	stop := m.watchdog.Watch(m.errorAt(comm.Split, step))
	err := m.p.do(func() {
		rc = C.MPI_Comm_split(m.c, cColor, C.int(key), &sub)
		if rc == C.MPI_SUCCESS && color != comm.Undefined {
			C.MPI_Comm_rank(sub, &rank)
			C.MPI_Comm_size(sub, &size)
		}
	})
	stop()
	if err != nil {
		return nil, wrap(err)
	}
	if rc != C.MPI_SUCCESS {
		return nil, wrap(mpiError(rc))
	}
	if color == comm.Undefined {
		return nil, nil
	}
	return &mpiComm{
		p: m.p, c: sub, rank: int(rank), size: int(size), name: name,
		counters: m.counters, watchdog: m.watchdog,
	}, nil
}

// Close frees a split communicator, or, for the world, finalises MPI and
// ends the MPI thread.
func (m *mpiComm) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	var rc C.int
	if !m.world {
		if err := m.p.do(func() { rc = C.MPI_Comm_free(&m.c) }); err != nil {
			return nil // finalising MPI freed it
		}
		if rc != C.MPI_SUCCESS {
			return fmt.Errorf("comm: group %q: MPI_Comm_free: %w", m.name, mpiError(rc))
		}
		return nil
	}
	stop := m.watchdog.Watch(m.errorAt(comm.Close, m.counters.Step()))
	defer stop()
	err := m.p.do(func() {
		if len(m.p.reqs) > 0 {
			rc = -1
			return
		}
		rc = C.MPI_Finalize()
		m.p.exit = true
	})
	switch {
	case err != nil:
		return fmt.Errorf("comm: group %q: %w", m.name, err)
	case rc == -1:
		m.closed = false // still usable: Wait, then Close again
		return fmt.Errorf("comm: group %q: Close with collectives still in flight (Wait for them first)", m.name)
	case rc != C.MPI_SUCCESS:
		return fmt.Errorf("comm: group %q: MPI_Finalize: %w", m.name, mpiError(rc))
	}
	return nil
}
