package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/memtrain/memtrain/engine"
	"github.com/memtrain/memtrain/engine/comm"
)

// ncclResult is a NCCL status (ncclResult_t).
type ncclResult int32

// NCCLUniqueID identifies a NCCL communicator while it is being created
// (ncclUniqueId): one rank makes it with NewNCCLUniqueID, the job hands it
// to every rank (over MPI, a TCP store, a file), and each passes it to
// NewNCCL.
type NCCLUniqueID struct {
	Internal [128]byte
}

// ncclAPI is the part of NCCL that memtrain uses.
type ncclAPI struct {
	ncclGetVersion     func(version *int32) ncclResult
	ncclGetUniqueId    func(id *NCCLUniqueID) ncclResult
	ncclCommInitRank   func(comm *uintptr, nranks int32, id NCCLUniqueID, rank int32) ncclResult
	ncclCommInitAll    func(comms *uintptr, ndev int32, devlist *int32) ncclResult
	ncclCommDestroy    func(comm uintptr) ncclResult
	ncclCommSplit      func(comm uintptr, color, key int32, newcomm *uintptr, config unsafe.Pointer) ncclResult
	ncclCommCount      func(comm uintptr, count *int32) ncclResult
	ncclCommUserRank   func(comm uintptr, rank *int32) ncclResult
	ncclGetErrorString func(r ncclResult) string
	ncclAllReduce      func(send, recv devptr, count uint64, dtype, op int32, comm, stream uintptr) ncclResult
	ncclReduceScatter  func(send, recv devptr, recvCount uint64, dtype, op int32, comm, stream uintptr) ncclResult
	ncclAllGather      func(send, recv devptr, sendCount uint64, dtype int32, comm, stream uintptr) ncclResult
	ncclBroadcast      func(send, recv devptr, count uint64, dtype, root int32, comm, stream uintptr) ncclResult
	ncclGroupStart     func() ncclResult
	ncclGroupEnd       func() ncclResult
}

func (n *ncclAPI) symbols() []symbol {
	return []symbol{
		{"ncclGetVersion", &n.ncclGetVersion, true},
		{"ncclGetUniqueId", &n.ncclGetUniqueId, true},
		{"ncclCommInitRank", &n.ncclCommInitRank, true},
		{"ncclCommInitAll", &n.ncclCommInitAll, true},
		{"ncclCommDestroy", &n.ncclCommDestroy, true},
		{"ncclCommSplit", &n.ncclCommSplit, false}, // NCCL 2.18 and later
		{"ncclCommCount", &n.ncclCommCount, true},
		{"ncclCommUserRank", &n.ncclCommUserRank, true},
		{"ncclGetErrorString", &n.ncclGetErrorString, true},
		{"ncclAllReduce", &n.ncclAllReduce, true},
		{"ncclReduceScatter", &n.ncclReduceScatter, true},
		{"ncclAllGather", &n.ncclAllGather, true},
		{"ncclBroadcast", &n.ncclBroadcast, true},
		{"ncclGroupStart", &n.ncclGroupStart, true},
		{"ncclGroupEnd", &n.ncclGroupEnd, true},
	}
}

// NCCL constants (nccl.h).
const (
	ncclInt32    = 2
	ncclFloat32  = 7
	ncclBfloat16 = 9
	ncclSum      = 0
	ncclNoColor  = -1 // NCCL_SPLIT_NOCOLOR
)

// ncclType is NCCL's name for a dtype.
func ncclType(d engine.DType) int32 {
	switch d {
	case engine.BF16:
		return ncclBfloat16
	case engine.I32:
		return ncclInt32
	}
	return ncclFloat32
}

// loadNCCL loads NCCL on first use; a failure is remembered.
func (l *libraries) loadNCCL() (*ncclAPI, error) {
	l.ncclMu.Lock()
	defer l.ncclMu.Unlock()
	if l.nccl != nil || l.ncclErr != nil {
		return l.nccl, l.ncclErr
	}
	h, path, err := loadLibrary(libNCCL, l.env)
	if err == nil {
		api := &ncclAPI{}
		if err = bindAll(h, path, api.symbols()); err == nil {
			l.nccl = api
			l.paths[libNCCL.name] = path
		}
	}
	l.ncclErr = err
	return l.nccl, err
}

// NewNCCLUniqueID makes the id of a new communicator (ncclGetUniqueId), on
// one rank; libDir is as Options.LibDir.
func NewNCCLUniqueID(libDir string) (NCCLUniqueID, error) {
	var id NCCLUniqueID
	libs, err := loadLibraries(libDir)
	if err != nil {
		return id, err
	}
	api, err := libs.loadNCCL()
	if err != nil {
		return id, err
	}
	if r := api.ncclGetUniqueId(&id); r != 0 {
		return id, fmt.Errorf("cuda: ncclGetUniqueId: %s", api.ncclGetErrorString(r))
	}
	return id, nil
}

// NewNCCL joins rank of a communicator of size ranks on b's GPU
// (ncclCommInitRank), one process (or one goroutine driving one Backend)
// per rank. Every rank calls it with the same id; it returns when all
// have, or the watchdog ends the process.
func NewNCCL(b *Backend, id NCCLUniqueID, rank, size int, opts ...comm.Option) (comm.Comm, error) {
	cfg, err := comm.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if rank < 0 || rank >= size {
		return nil, fmt.Errorf("cuda: NCCL rank %d of %d", rank, size)
	}
	api, err := b.libs.loadNCCL()
	if err != nil {
		return nil, err
	}
	c := newNCCLComm(b, api, cfg, comm.NewCounters(), cfg.Name, rank, size)
	stop := c.watchdog.Watch(comm.Error{Group: c.group, Rank: rank, Size: size, Op: comm.Barrier})
	defer stop()
	err = b.w.try(func() error {
		if r := api.ncclCommInitRank(&c.comm, int32(size), id, int32(rank)); r != 0 {
			return fmt.Errorf("cuda: ncclCommInitRank (rank %d of %d): %s", rank, size, api.ncclGetErrorString(r))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := c.setup(); err != nil {
		return nil, err
	}
	return c, nil
}

// NewNCCLGroup makes a communicator over several GPUs driven by one
// process (ncclCommInitAll): rank i is backends[i]'s device. Each rank's
// collectives must then be called from its own goroutine, concurrently,
// as with any group.
func NewNCCLGroup(backends []*Backend, opts ...comm.Option) ([]comm.Comm, error) {
	cfg, err := comm.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if len(backends) == 0 {
		return nil, fmt.Errorf("cuda: NewNCCLGroup of no backends")
	}
	api, err := backends[0].libs.loadNCCL()
	if err != nil {
		return nil, err
	}
	devs := make([]int32, len(backends))
	for i, b := range backends {
		devs[i] = int32(b.info.Ordinal)
	}
	handles := make([]uintptr, len(backends))
	// ncclCommInitAll switches the calling thread between the devices:
	// give it a thread of its own, which ends with the goroutine.
	done := make(chan ncclResult)
	go func() {
		runtime.LockOSThread()
		done <- api.ncclCommInitAll(&handles[0], int32(len(devs)), &devs[0])
	}()
	if r := <-done; r != 0 {
		return nil, fmt.Errorf("cuda: ncclCommInitAll over devices %v: %s", devs, api.ncclGetErrorString(r))
	}
	comms := make([]comm.Comm, len(backends))
	for i, b := range backends {
		c := newNCCLComm(b, api, cfg, comm.NewCounters(), cfg.Name, i, len(backends))
		c.comm = handles[i]
		if err := c.setup(); err != nil {
			// setup destroyed this rank's communicator; the others
			// would be left without a peer.
			for j := range i {
				d := comms[j].(*ncclComm)
				d.b.w.try(d.release)
			}
			for j := i + 1; j < len(backends); j++ {
				backends[j].w.try(func() error { return c.check("ncclCommDestroy", api.ncclCommDestroy(handles[j])) })
			}
			return nil, err
		}
		comms[i] = c
	}
	return comms, nil
}

// ncclComm is one rank's NCCL communicator.
//
// Streams. Every collective of the communicator, blocking or not, runs on
// its own communication stream, made once with it. NCCL runs a
// communicator's operations in the order they reach it and pairs them
// across ranks in that order; with the blocking ones on the compute stream
// and the non-blocking ones on a side stream, a blocking collective could
// start while a non-blocking one issued before it on the same communicator
// still waited, and two kernels of one communicator would run at once. A
// stream per communicator also lets the collectives of different groups
// overlap each other and the kernels. Before a collective the
// communication stream waits for an event recorded on the compute stream
// (the kernels that wrote its input); after it, the compute stream waits
// for an event recorded on the communication stream: at once for a
// blocking collective, in Request.Wait for a non-blocking one. Neither
// blocks the host. The events come from a pool: an event may be recorded
// again as soon as a stream has been told to wait for it, since a wait
// binds to the record made before it.
//
// Order across communicators. NCCL's documentation ("Using multiple NCCL
// communicators concurrently") asks every rank to issue the operations of
// all its communicators in one consistent order, since a collective's
// kernel holds the GPU until its peers join it, and two ranks waiting in
// different communicators for each other deadlock. Here a rank issues its
// collectives in program order from its goroutine, so the engine's code
// decides the order; TestNCCLOrderEmulated checks on the fake libraries
// that the orders of a grid's ranks agree.
//
// Memory. Nothing here frees device memory or synchronises the host while
// a collective of the communicator may be in flight: cuMemFree waits for
// the device, and a device waiting for a collective whose peers wait for
// this rank never finishes. The stream, the first event and Barrier's
// float are made with the communicator. The padded buffers of uneven
// reduce-scatters and all-gathers grow by allocating, only when an uneven
// collective larger than any before comes (in a training step's first
// iteration), and an outgrown buffer is kept until Close, since a
// collective still queued on the stream may use it.
type ncclComm struct {
	b          *Backend
	api        *ncclAPI
	comm       uintptr
	rank, size int
	group      string
	counters   *comm.Counters
	cfg        comm.Config
	watchdog   *comm.Watchdog

	stream   uintptr      // the communication stream
	ready    uintptr      // recorded on the compute stream before each collective
	events   []uintptr    // every event recorded after a collective, destroyed by Close
	free     []uintptr    // those free for reuse: held by no pending request
	pad      [2]devBuffer // padded buffers of uneven reduce-scatters and all-gathers
	retired  []devBuffer  // outgrown padded buffers, freed by Close
	one      devptr       // a float for Barrier's all-reduce
	closed   bool
	closeErr error
}

// ncclComm's group calls give comm.IAllReduceGroup its NCCL groups.
var _ comm.Grouper = (*ncclComm)(nil)

// ncclMaxGroupOps is the most operations NCCL accepts between
// ncclGroupStart and ncclGroupEnd.
const ncclMaxGroupOps = 2048

func newNCCLComm(b *Backend, api *ncclAPI, cfg comm.Config, counters *comm.Counters, group string, rank, size int) *ncclComm {
	return &ncclComm{b: b, api: api, rank: rank, size: size, group: group, counters: counters, cfg: cfg,
		watchdog: &comm.Watchdog{Timeout: cfg.Timeout}}
}

// setup makes the communication stream, the event before collectives and
// Barrier's float, once c.comm is set. On failure it destroys the
// communicator.
func (c *ncclComm) setup() error {
	b := c.b
	err := b.w.try(func() error {
		cu := b.cu
		if err := b.call("cuStreamCreate", cu.cuStreamCreate(&c.stream, streamNonBlocking)); err != nil {
			return err
		}
		if err := b.call("cuEventCreate", cu.cuEventCreate(&c.ready, eventNoTiming)); err != nil {
			return err
		}
		if err := b.call("cuMemAlloc", cu.cuMemAlloc(&c.one, 4)); err != nil {
			return err
		}
		return b.call("cuMemsetD8Async", cu.cuMemsetD8Async(c.one, 0, 4, b.stream))
	})
	if err != nil {
		rerr := b.w.try(c.release)
		return fmt.Errorf("cuda: NCCL communicator %q (rank %d of %d): %w", c.group, c.rank, c.size, errors.Join(err, rerr))
	}
	return nil
}

// release destroys what the communicator made, on the worker thread, once
// nothing runs on its stream any more.
func (c *ncclComm) release() error {
	b, cu := c.b, c.b.cu
	var errs []error
	for _, ev := range c.events {
		errs = append(errs, b.call("cuEventDestroy", cu.cuEventDestroy(ev)))
	}
	c.events, c.free = nil, nil
	if c.ready != 0 {
		errs = append(errs, b.call("cuEventDestroy", cu.cuEventDestroy(c.ready)))
		c.ready = 0
	}
	if c.stream != 0 {
		errs = append(errs, b.call("cuStreamDestroy", cu.cuStreamDestroy(c.stream)))
		c.stream = 0
	}
	bufs := append(c.retired, c.pad[:]...)
	c.retired, c.pad = nil, [2]devBuffer{}
	for _, s := range bufs {
		if s.ptr != 0 {
			errs = append(errs, b.call("cuMemFree", cu.cuMemFree(s.ptr)))
		}
	}
	if c.one != 0 {
		errs = append(errs, b.call("cuMemFree", cu.cuMemFree(c.one)))
		c.one = 0
	}
	if c.comm != 0 {
		errs = append(errs, c.check("ncclCommDestroy", c.api.ncclCommDestroy(c.comm)))
		c.comm = 0
	}
	return errors.Join(errs...)
}

func (c *ncclComm) Rank() int     { return c.rank }
func (c *ncclComm) Size() int     { return c.size }
func (c *ncclComm) Group() string { return c.group }

func (c *ncclComm) Stats() comm.Stats { return c.counters.Stats() }
func (c *ncclComm) SetStep(step int)  { c.counters.SetStep(step) }

// fail wraps err as the *comm.Error of op.
func (c *ncclComm) fail(op comm.Op, err error) error {
	if err == nil {
		return nil
	}
	return &comm.Error{Group: c.group, Rank: c.rank, Size: c.size, Op: op, Step: c.counters.Step(), Err: err}
}

// check turns a NCCL status into an error.
func (c *ncclComm) check(call string, r ncclResult) error {
	if r == 0 {
		return nil
	}
	return fmt.Errorf("%s: %s", call, c.api.ncclGetErrorString(r))
}

// viewOf resolves a tensor of this rank's backend, as an error rather than
// a panic: collectives report misuse through their error.
func (c *ncclComm) viewOf(name string, t *engine.Tensor) (v view, err error) {
	if err := comm.CheckTensor(name, t); err != nil {
		return view{}, err
	}
	s, ok := t.Storage.(*Storage)
	if !ok || s.b != c.b {
		return view{}, fmt.Errorf("%s %v is not a tensor of this rank's GPU (%v)", name, t, c.b.Device())
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: %v", name, p)
		}
	}()
	return c.b.viewOf("collective", t), nil
}

// doneEvent returns an event to record after a collective: one from the
// pool, or a new one while the pool fills up (the first iterations of a
// training step); in a steady state none is made. On the worker thread.
func (c *ncclComm) doneEvent() (uintptr, error) {
	if n := len(c.free); n > 0 {
		ev := c.free[n-1]
		c.free = c.free[:n-1]
		return ev, nil
	}
	var ev uintptr
	if err := c.b.call("cuEventCreate", c.b.cu.cuEventCreate(&ev, eventNoTiming)); err != nil {
		return 0, err
	}
	c.events = append(c.events, ev)
	return ev, nil
}

// run issues f on the backend's worker thread with the communication
// stream, ordered after the kernels issued so far, and returns the request
// that completes it: done already for a blocking collective (the compute
// stream waits for it), an eventRequest for a non-blocking one.
func (c *ncclComm) run(op comm.Op, async bool, f func(stream uintptr) error) comm.Request {
	if c.closed {
		return doneRequest{c.fail(op, fmt.Errorf("use of a closed communicator"))}
	}
	b := c.b
	var ev uintptr
	err := b.w.try(func() error {
		cu := b.cu
		if err := b.call("cuEventRecord", cu.cuEventRecord(c.ready, b.stream)); err != nil {
			return err
		}
		if err := b.call("cuStreamWaitEvent", cu.cuStreamWaitEvent(c.stream, c.ready, 0)); err != nil {
			return err
		}
		if err := f(c.stream); err != nil {
			return err
		}
		var err error
		if ev, err = c.doneEvent(); err != nil {
			return err
		}
		err = b.call("cuEventRecord", cu.cuEventRecord(ev, c.stream))
		if err == nil && !async {
			err = b.call("cuStreamWaitEvent", cu.cuStreamWaitEvent(b.stream, ev, 0))
		}
		if err == nil && async {
			// A tensor freed before Wait may still be read or written by
			// the collective: the allocator reuses blocks freed from now
			// only once the communication stream has passed this point.
			err = b.fenceFrees(c.stream)
		}
		if err != nil || !async {
			c.free = append(c.free, ev)
		}
		return err
	})
	if err != nil || !async {
		return doneRequest{c.fail(op, err)}
	}
	return &eventRequest{c: c, op: op, ev: ev}
}

// onComputeStream issues f on the compute stream (the copies of groups of
// one rank, which involve no other rank).
func (c *ncclComm) onComputeStream(op comm.Op, f func(stream uintptr) error) comm.Request {
	if c.closed {
		return doneRequest{c.fail(op, fmt.Errorf("use of a closed communicator"))}
	}
	b := c.b
	return doneRequest{c.fail(op, b.w.try(func() error { return f(b.stream) }))}
}

// doneRequest is a collective already complete (or failed).
type doneRequest struct{ err error }

func (r doneRequest) Wait() error { return r.err }

// eventRequest is a non-blocking collective in flight on the communication
// stream.
type eventRequest struct {
	c    *ncclComm
	op   comm.Op
	ev   uintptr
	done bool
}

// Wait makes the backend's stream wait for the collective, without
// blocking the host: kernels issued after Wait see its result, as after a
// blocking collective. The event goes back to the pool.
func (r *eventRequest) Wait() error {
	switch {
	case r.done:
		return r.c.fail(r.op, fmt.Errorf("Wait called twice"))
	case r.c.closed:
		return r.c.fail(r.op, fmt.Errorf("Wait after the communicator was closed"))
	}
	r.done = true
	c, b := r.c, r.c.b
	return c.fail(r.op, b.w.try(func() error {
		err := b.call("cuStreamWaitEvent", b.cu.cuStreamWaitEvent(b.stream, r.ev, 0))
		c.free = append(c.free, r.ev)
		return err
	}))
}

func (c *ncclComm) AllReduce(t *engine.Tensor) error         { return c.allReduce(t, false).Wait() }
func (c *ncclComm) IAllReduce(t *engine.Tensor) comm.Request { return c.allReduce(t, true) }

func (c *ncclComm) allReduce(t *engine.Tensor, async bool) comm.Request {
	v, err := c.viewOf("t", t)
	if err != nil {
		return doneRequest{c.fail(comm.AllReduce, err)}
	}
	c.counters.Add(c.group, c.size, comm.AllReduce, v.n)
	if c.size == 1 || v.n == 0 {
		return doneRequest{}
	}
	v.deviceWroteInts()
	return c.run(comm.AllReduce, async, func(stream uintptr) error {
		return c.check("ncclAllReduce", c.api.ncclAllReduce(v.ptr, v.ptr, uint64(v.n), ncclType(v.dtype), ncclSum, c.comm, stream))
	})
}

// IAllReduceGroup all-reduces every tensor of ts in NCCL groups
// (ncclGroupStart, ncclGroupEnd) of at most ncclMaxGroupOps, all on the
// communication stream, and returns one request for them all.
func (c *ncclComm) IAllReduceGroup(ts []*engine.Tensor) comm.Request {
	vs := make([]view, 0, len(ts))
	for i, t := range ts {
		v, err := c.viewOf("t", t)
		if err != nil {
			return doneRequest{c.fail(comm.AllReduce, fmt.Errorf("tensor %d of %d of the group: %w", i, len(ts), err))}
		}
		vs = append(vs, v)
	}
	live := vs[:0]
	for _, v := range vs {
		c.counters.Add(c.group, c.size, comm.AllReduce, v.n)
		if v.n > 0 {
			live = append(live, v)
		}
	}
	if c.size == 1 || len(live) == 0 {
		return doneRequest{}
	}
	for _, v := range live {
		v.deviceWroteInts()
	}
	return c.run(comm.AllReduce, true, func(stream uintptr) error {
		for len(live) > 0 {
			part := live[:min(len(live), ncclMaxGroupOps)]
			live = live[len(part):]
			if err := c.check("ncclGroupStart", c.api.ncclGroupStart()); err != nil {
				return err
			}
			var err error
			for _, v := range part {
				if e := c.check("ncclAllReduce", c.api.ncclAllReduce(v.ptr, v.ptr, uint64(v.n), ncclType(v.dtype), ncclSum, c.comm, stream)); err == nil {
					err = e
				}
			}
			// The group ends even after a failed call: the group is
			// the thread's, and later collectives must not join it.
			if e := c.check("ncclGroupEnd", c.api.ncclGroupEnd()); err == nil {
				err = e
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
}

func (c *ncclComm) Broadcast(t *engine.Tensor, root int) error {
	v, err := c.viewOf("t", t)
	if err == nil {
		err = comm.CheckRoot(root, c.size)
	}
	if err != nil {
		return c.fail(comm.Broadcast, err)
	}
	c.counters.Add(c.group, c.size, comm.Broadcast, v.n)
	if c.size == 1 || v.n == 0 {
		return nil
	}
	v.deviceWroteInts()
	return c.run(comm.Broadcast, false, func(stream uintptr) error {
		return c.check("ncclBroadcast", c.api.ncclBroadcast(v.ptr, v.ptr, uint64(v.n), ncclType(v.dtype), int32(root), c.comm, stream))
	}).Wait()
}

func (c *ncclComm) ReduceScatter(dst, src *engine.Tensor) error {
	return c.reduceScatter(dst, src, false).Wait()
}
func (c *ncclComm) IReduceScatter(dst, src *engine.Tensor) comm.Request {
	return c.reduceScatter(dst, src, true)
}

// reduceScatter runs ncclReduceScatter on chunks of ⌈n/p⌉ elements. When p
// does not divide n, src is copied into a buffer padded with zeros to
// p·⌈n/p⌉ elements and the chunk comes back through a second buffer, all
// on the communication stream, whose order keeps two collectives from
// sharing the padded buffers at once.
func (c *ncclComm) reduceScatter(dst, src *engine.Tensor, async bool) comm.Request {
	const op = comm.ReduceScatter
	d, err := c.viewOf("dst", dst)
	if err != nil {
		return doneRequest{c.fail(op, err)}
	}
	s, err := c.viewOf("src", src)
	if err != nil {
		return doneRequest{c.fail(op, err)}
	}
	offset, inPlace, err := comm.CheckChunk(op, c.size, c.rank, src, dst)
	if err != nil {
		return doneRequest{c.fail(op, err)}
	}
	n, p := s.n, c.size
	c.counters.Add(c.group, p, op, n)
	d.deviceWroteInts()
	chunk := (n + p - 1) / p
	b := c.b
	if p == 1 || n == 0 {
		if !inPlace && d.n > 0 {
			return c.onComputeStream(op, func(stream uintptr) error {
				return b.call("cuMemcpyDtoDAsync", b.cu.cuMemcpyDtoDAsync(d.ptr, s.at(offset), d.bytes(), stream))
			})
		}
		return doneRequest{}
	}
	dtype, size := ncclType(s.dtype), uint64(s.dtype.Size())
	if n == p*chunk {
		return c.run(op, async, func(stream uintptr) error {
			return c.check("ncclReduceScatter", c.api.ncclReduceScatter(s.ptr, d.ptr, uint64(chunk), dtype, ncclSum, c.comm, stream))
		})
	}
	return c.run(op, async, func(stream uintptr) error {
		full, part, err := c.padBuffers(uint64(p*chunk)*size, uint64(chunk)*size)
		if err != nil {
			return err
		}
		if err := b.call("cuMemsetD8Async", b.cu.cuMemsetD8Async(full, 0, uint64(p*chunk)*size, stream)); err != nil {
			return err
		}
		if err := b.call("cuMemcpyDtoDAsync", b.cu.cuMemcpyDtoDAsync(full, s.ptr, s.bytes(), stream)); err != nil {
			return err
		}
		if err := c.check("ncclReduceScatter", c.api.ncclReduceScatter(full, part, uint64(chunk), dtype, ncclSum, c.comm, stream)); err != nil {
			return err
		}
		if d.n == 0 {
			return nil
		}
		return b.call("cuMemcpyDtoDAsync", b.cu.cuMemcpyDtoDAsync(d.ptr, part, d.bytes(), stream))
	})
}

func (c *ncclComm) AllGather(dst, src *engine.Tensor) error {
	return c.allGather(dst, src, false).Wait()
}
func (c *ncclComm) IAllGather(dst, src *engine.Tensor) comm.Request {
	return c.allGather(dst, src, true)
}

// allGather is reduceScatter's inverse, padded the same way when p does
// not divide n.
func (c *ncclComm) allGather(dst, src *engine.Tensor, async bool) comm.Request {
	const op = comm.AllGather
	d, err := c.viewOf("dst", dst)
	if err != nil {
		return doneRequest{c.fail(op, err)}
	}
	s, err := c.viewOf("src", src)
	if err != nil {
		return doneRequest{c.fail(op, err)}
	}
	offset, inPlace, err := comm.CheckChunk(op, c.size, c.rank, dst, src)
	if err != nil {
		return doneRequest{c.fail(op, err)}
	}
	n, p := d.n, c.size
	c.counters.Add(c.group, p, op, n)
	d.deviceWroteInts()
	chunk := (n + p - 1) / p
	b := c.b
	if p == 1 || n == 0 {
		if !inPlace && s.n > 0 {
			return c.onComputeStream(op, func(stream uintptr) error {
				return b.call("cuMemcpyDtoDAsync", b.cu.cuMemcpyDtoDAsync(d.at(offset), s.ptr, s.bytes(), stream))
			})
		}
		return doneRequest{}
	}
	dtype, size := ncclType(d.dtype), uint64(d.dtype.Size())
	if n == p*chunk {
		return c.run(op, async, func(stream uintptr) error {
			return c.check("ncclAllGather", c.api.ncclAllGather(s.ptr, d.ptr, uint64(chunk), dtype, c.comm, stream))
		})
	}
	return c.run(op, async, func(stream uintptr) error {
		full, part, err := c.padBuffers(uint64(p*chunk)*size, uint64(chunk)*size)
		if err != nil {
			return err
		}
		if err := b.call("cuMemsetD8Async", b.cu.cuMemsetD8Async(part, 0, uint64(chunk)*size, stream)); err != nil {
			return err
		}
		if s.n > 0 {
			if err := b.call("cuMemcpyDtoDAsync", b.cu.cuMemcpyDtoDAsync(part, s.ptr, s.bytes(), stream)); err != nil {
				return err
			}
		}
		if err := c.check("ncclAllGather", c.api.ncclAllGather(part, full, uint64(chunk), dtype, c.comm, stream)); err != nil {
			return err
		}
		return b.call("cuMemcpyDtoDAsync", b.cu.cuMemcpyDtoDAsync(d.ptr, full, d.bytes(), stream))
	})
}

// padBuffers are the two padded buffers of an uneven reduce-scatter or
// all-gather: the whole tensor's, of full bytes, and one chunk's.
func (c *ncclComm) padBuffers(full, part uint64) (devptr, devptr, error) {
	f, err := c.padBuffer(0, full)
	if err != nil {
		return 0, 0, err
	}
	p, err := c.padBuffer(1, part)
	return f, p, err
}

// padBuffer returns padded buffer i with at least bytes bytes, on the
// worker thread. It grows by half at least, so that a training step's
// uneven shapes stop growing it within its first iteration, and keeps the
// outgrown buffer until Close rather than freeing it: a collective queued
// before on the communication stream may still use it, and cuMemFree
// would wait for the device while peers may still be in a collective.
// (The backend's stream-ordered allocator can take it back sooner, once
// the stream's event after the last user has fired.)
func (c *ncclComm) padBuffer(i int, bytes uint64) (devptr, error) {
	s := &c.pad[i]
	if bytes <= s.bytes {
		return s.ptr, nil
	}
	b := c.b
	size := max(bytes, s.bytes+s.bytes/2, 1<<16)
	var ptr devptr
	if err := b.call("cuMemAlloc", b.cu.cuMemAlloc(&ptr, size)); err != nil {
		return 0, fmt.Errorf("padded buffer of %d bytes: %w", size, err)
	}
	if s.ptr != 0 {
		c.retired = append(c.retired, *s)
	}
	*s = devBuffer{ptr: ptr, bytes: size}
	return ptr, nil
}

// Barrier all-reduces one float on the communication stream and waits for
// it, under the watchdog: holding the host until every rank has come is
// what a barrier is for, and the one host synchronisation here.
func (c *ncclComm) Barrier() error {
	c.counters.Add(c.group, c.size, comm.Barrier, 0)
	if c.size == 1 {
		return nil
	}
	stop := c.watchdog.Watch(comm.Error{Group: c.group, Rank: c.rank, Size: c.size, Op: comm.Barrier, Step: c.counters.Step()})
	defer stop()
	b := c.b
	return c.run(comm.Barrier, false, func(stream uintptr) error {
		if err := c.check("ncclAllReduce", c.api.ncclAllReduce(c.one, c.one, 1, ncclFloat32, ncclSum, c.comm, stream)); err != nil {
			return err
		}
		return b.call("cuStreamSynchronize", b.cu.cuStreamSynchronize(stream))
	}).Wait()
}

// Split makes the sub-groups of ranks passing the same color
// (ncclCommSplit), ordered by key, then by rank.
func (c *ncclComm) Split(name string, color, key int) (comm.Comm, error) {
	if c.api.ncclCommSplit == nil {
		return nil, fmt.Errorf("cuda: Split needs NCCL 2.18 or later (ncclCommSplit)")
	}
	if color < 0 && color != comm.Undefined {
		return nil, c.fail(comm.Split, fmt.Errorf("split color %d is negative", color))
	}
	if c.closed {
		return nil, c.fail(comm.Split, fmt.Errorf("use of a closed communicator"))
	}
	stop := c.watchdog.Watch(comm.Error{Group: c.group, Rank: c.rank, Size: c.size, Op: comm.Split, Step: c.counters.Step()})
	defer stop()
	var sub uintptr
	var rank, size int32
	err := c.b.w.try(func() error {
		col := int32(color)
		if color == comm.Undefined {
			col = ncclNoColor
		}
		if err := c.check("ncclCommSplit", c.api.ncclCommSplit(c.comm, col, int32(key), &sub, nil)); err != nil {
			return err
		}
		if sub == 0 {
			return nil
		}
		if err := c.check("ncclCommUserRank", c.api.ncclCommUserRank(sub, &rank)); err != nil {
			return err
		}
		return c.check("ncclCommCount", c.api.ncclCommCount(sub, &size))
	})
	if err != nil {
		return nil, c.fail(comm.Split, err)
	}
	if sub == 0 {
		return nil, nil
	}
	s := newNCCLComm(c.b, c.api, c.cfg, c.counters, name, int(rank), int(size))
	s.comm = sub
	if err := s.setup(); err != nil {
		return nil, c.fail(comm.Split, err)
	}
	return s, nil
}

// Close waits for the collectives issued on the communicator (every rank
// closes it after its last one, so their peers have issued them too) and
// destroys it with its stream, events and buffers.
func (c *ncclComm) Close() error {
	if c.closed {
		return c.closeErr
	}
	c.closed = true
	b := c.b
	c.closeErr = b.w.try(func() error {
		// The compute stream too: it may still be writing Barrier's
		// float (setup's memset) or waiting for one of the events.
		err := errors.Join(b.call("cuStreamSynchronize", b.cu.cuStreamSynchronize(c.stream)),
			b.call("cuStreamSynchronize", b.cu.cuStreamSynchronize(b.stream)))
		return errors.Join(err, c.release())
	})
	return c.closeErr
}
