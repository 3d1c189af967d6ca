package cuda

import (
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
			l.paths[libNCCL.names[0]] = path
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
		comms[i] = c
	}
	return comms, nil
}

// ncclComm is one rank's NCCL communicator. Its collectives are issued on
// the backend's worker thread, in stream order with the backend's kernels:
// a blocking one on the backend's stream, a non-blocking one on a stream
// of its own that waits for the kernels issued before it and that the
// backend's stream waits for in Request.Wait.
type ncclComm struct {
	b          *Backend
	api        *ncclAPI
	comm       uintptr
	rank, size int
	group      string
	counters   *comm.Counters
	cfg        comm.Config
	watchdog   *comm.Watchdog

	side     uintptr      // the stream of non-blocking collectives, made on first use
	pad      [2]devBuffer // padded buffers of uneven reduce-scatters and all-gathers
	one      devptr       // a float for Barrier's all-reduce
	closed   bool
	closeErr error
}

func newNCCLComm(b *Backend, api *ncclAPI, cfg comm.Config, counters *comm.Counters, group string, rank, size int) *ncclComm {
	return &ncclComm{b: b, api: api, rank: rank, size: size, group: group, counters: counters, cfg: cfg,
		watchdog: &comm.Watchdog{Timeout: cfg.Timeout}}
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
	return c.b.viewOf(t), nil
}

// run issues f on the backend's worker thread with the stream to use: the
// backend's for a blocking collective, the side stream for a non-blocking
// one (which then waits for the kernels issued so far). It returns the
// request that completes it.
func (c *ncclComm) run(op comm.Op, async bool, f func(stream uintptr) error) comm.Request {
	if c.closed {
		return doneRequest{c.fail(op, fmt.Errorf("use of a closed communicator"))}
	}
	b := c.b
	var ev uintptr
	err := b.w.try(func() error {
		if !async {
			return f(b.stream)
		}
		cu := b.cu
		if c.side == 0 {
			if err := b.call("cuStreamCreate", cu.cuStreamCreate(&c.side, streamNonBlocking)); err != nil {
				return err
			}
		}
		var ready uintptr
		if err := b.call("cuEventCreate", cu.cuEventCreate(&ready, eventNoTiming)); err != nil {
			return err
		}
		defer cu.cuEventDestroy(ready) // destroyed once it has fired
		if err := b.call("cuEventRecord", cu.cuEventRecord(ready, b.stream)); err != nil {
			return err
		}
		if err := b.call("cuStreamWaitEvent", cu.cuStreamWaitEvent(c.side, ready, 0)); err != nil {
			return err
		}
		if err := f(c.side); err != nil {
			return err
		}
		if err := b.call("cuEventCreate", cu.cuEventCreate(&ev, eventNoTiming)); err != nil {
			return err
		}
		return b.call("cuEventRecord", cu.cuEventRecord(ev, c.side))
	})
	if err != nil || !async {
		return doneRequest{c.fail(op, err)}
	}
	return &eventRequest{c: c, op: op, ev: ev}
}

// doneRequest is a collective already complete (or failed).
type doneRequest struct{ err error }

func (r doneRequest) Wait() error { return r.err }

// eventRequest is a non-blocking collective in flight on the side stream.
type eventRequest struct {
	c    *ncclComm
	op   comm.Op
	ev   uintptr
	done bool
}

// Wait makes the backend's stream wait for the collective: kernels issued
// after Wait see its result, as after a blocking collective.
func (r *eventRequest) Wait() error {
	if r.done {
		return r.c.fail(r.op, fmt.Errorf("Wait called twice"))
	}
	r.done = true
	b := r.c.b
	return r.c.fail(r.op, b.w.try(func() error {
		defer b.cu.cuEventDestroy(r.ev)
		return b.call("cuStreamWaitEvent", b.cu.cuStreamWaitEvent(b.stream, r.ev, 0))
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
// p·⌈n/p⌉ elements and the chunk comes back through a second buffer; that
// path runs on the backend's stream even when asked for non-blocking, so
// that the padded buffers are never shared by two collectives in flight.
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
	if p == 1 || n == 0 {
		if !inPlace && d.n > 0 {
			return c.run(op, false, func(stream uintptr) error {
				return c.b.call("cuMemcpyDtoDAsync", c.b.cu.cuMemcpyDtoDAsync(d.ptr, s.at(offset), d.bytes(), stream))
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
	return c.run(op, false, func(stream uintptr) error {
		b := c.b
		full, part := c.padBuffer(0, uint64(p*chunk)*size), c.padBuffer(1, uint64(chunk)*size)
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
	if p == 1 || n == 0 {
		if !inPlace && s.n > 0 {
			return c.run(op, false, func(stream uintptr) error {
				return c.b.call("cuMemcpyDtoDAsync", c.b.cu.cuMemcpyDtoDAsync(d.at(offset), s.ptr, s.bytes(), stream))
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
	return c.run(op, false, func(stream uintptr) error {
		b := c.b
		full, part := c.padBuffer(0, uint64(p*chunk)*size), c.padBuffer(1, uint64(chunk)*size)
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

// padBuffer returns padded buffer i with at least bytes bytes, on the
// worker thread. It grows like the backend's scratch buffers.
func (c *ncclComm) padBuffer(i int, bytes uint64) devptr {
	s := &c.pad[i]
	if bytes <= s.bytes {
		return s.ptr
	}
	b := c.b
	if err := b.freeBuffer(s); err != nil {
		panic(err)
	}
	size := max(bytes, 1<<16)
	b.must("cuMemAlloc", b.cu.cuMemAlloc(&s.ptr, size))
	s.bytes = size
	return s.ptr
}

// Barrier all-reduces one float and waits for it, under the watchdog.
func (c *ncclComm) Barrier() error {
	c.counters.Add(c.group, c.size, comm.Barrier, 0)
	if c.size == 1 {
		return nil
	}
	stop := c.watchdog.Watch(comm.Error{Group: c.group, Rank: c.rank, Size: c.size, Op: comm.Barrier, Step: c.counters.Step()})
	defer stop()
	b := c.b
	return c.run(comm.Barrier, false, func(stream uintptr) error {
		if c.one == 0 {
			if err := b.call("cuMemAlloc", b.cu.cuMemAlloc(&c.one, 4)); err != nil {
				return err
			}
		}
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
	return s, nil
}

// Close waits for the collectives issued and destroys the communicator.
func (c *ncclComm) Close() error {
	if c.closed {
		return c.closeErr
	}
	c.closed = true
	b := c.b
	c.closeErr = b.w.try(func() error {
		err := b.call("cuStreamSynchronize", b.cu.cuStreamSynchronize(b.stream))
		if c.side != 0 {
			if err == nil {
				err = b.call("cuStreamSynchronize", b.cu.cuStreamSynchronize(c.side))
			}
			b.cu.cuStreamDestroy(c.side)
		}
		for i := range c.pad {
			if e := b.freeBuffer(&c.pad[i]); err == nil {
				err = e
			}
		}
		if c.one != 0 {
			b.cu.cuMemFree(c.one)
		}
		if e := c.check("ncclCommDestroy", c.api.ncclCommDestroy(c.comm)); err == nil {
			err = e
		}
		return err
	})
	return c.closeErr
}
