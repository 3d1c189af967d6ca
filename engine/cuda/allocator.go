package cuda

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
)

// allocator is the backend's caching allocator of device memory: tensors
// and scratch buffers take blocks from it, and a freed block goes to a
// free list of its size, to be handed out again with no driver call and
// no synchronisation. In steady state a training step then makes no
// cuMemAlloc or cuMemFree at all: every step asks for the same sizes.
//
// Reuse is stream-ordered. Every kernel, cuBLAS call, memset and copy of
// the backend runs on its one stream (copies to and from the host too:
// copyToDevice and copyToHost), so work issued after a block is freed
// runs after the work that used it, and a block may be reused the moment
// it is freed. Work on another stream (a collective on NCCL's side stream)
// is not ordered so: a block it may use is freed with freeAfter, or every
// free waits behind a fence, and returns to its free list only once that
// stream's work has completed (cuEventQuery, which does not block).
//
// Blocks are never split or merged: each is one cuMemAlloc of a size
// class (blockSize), which bounds the waste. When cuMemAlloc fails the
// cached blocks are given back to the driver (one synchronisation) and
// the allocation is tried once more. That path is for a full device, not
// for steady state: on a GPU cuMemFree waits for the whole device, a
// collective in flight included.
//
// Its methods run on the backend's worker thread; the byte counts are
// atomics so that any goroutine may read them.
type allocator struct {
	cu     *driverAPI                          // the backend's bindings, which count the calls
	stream uintptr                             // the backend's stream, which orders reuse
	errOf  func(call string, r cuResult) error // the backend's DriverError for a failed call

	free    map[uint64][]devptr // cached blocks by size
	sizes   map[devptr]uint64   // every block held from the driver: its size
	pending []pendingBlock      // freed blocks waiting for work on other streams
	fences  []*fence            // work on other streams that every free waits for

	reserved atomic.Int64 // Σ sizes
	cached   atomic.Int64 // bytes in the free lists
}

// A fence is an event recorded on another stream: the point its work
// must reach before the blocks waiting for it may be reused.
type fence struct {
	ev   uintptr
	done bool
}

// A pendingBlock is a freed block waiting for fences.
type pendingBlock struct {
	ptr   devptr
	waits []*fence
}

// Size classes. A request of up to 8 KiB is rounded up to a multiple of
// 512 bytes; a larger one, between 2^k and 2^(k+1), to a multiple of
// 2^(k-4), sixteen classes to each power of two, so that the waste is
// below 1/16 of the request. Small tensors (biases, norms' weights,
// reduction partials) then share a few classes, and large ones waste at
// most 6.25% while several of nearly the same size (a batch's
// activations at different lengths) still reuse each other's blocks.
const (
	smallGranularity = 512
	smallLimit       = 16 * smallGranularity // 8 KiB
	classesPerDouble = 16
)

// blockSize is the size class of a request of n > 0 bytes.
func blockSize(n uint64) uint64 {
	g := uint64(smallGranularity)
	if n > smallLimit {
		g = uint64(1) << (bits.Len64(n) - 1) / classesPerDouble
	}
	return (n + g - 1) / g * g
}

func newAllocator(cu *driverAPI, errOf func(string, cuResult) error) *allocator {
	return &allocator{cu: cu, errOf: errOf, free: map[uint64][]devptr{}, sizes: map[devptr]uint64{}}
}

// alloc returns a block of at least n > 0 bytes and its size: a cached
// one when there is one of its class, else a new one from the driver.
// When the driver has no memory left, the cached blocks are freed (after
// one synchronisation of the stream) and the allocation is tried again.
func (a *allocator) alloc(n uint64) (devptr, uint64, error) {
	size := blockSize(n)
	if len(a.pending) > 0 {
		if err := a.poll(); err != nil {
			return 0, 0, err
		}
	}
	if list := a.free[size]; len(list) > 0 {
		p := list[len(list)-1]
		a.free[size] = list[:len(list)-1]
		a.cached.Add(-int64(size))
		return p, size, nil
	}
	var p devptr
	r := a.cu.cuMemAlloc(&p, size)
	if r != cudaSuccess && a.cached.Load() > 0 {
		if err := a.emptyCache(); err != nil {
			return 0, 0, errors.Join(a.errOf("cuMemAlloc", r), err)
		}
		r = a.cu.cuMemAlloc(&p, size)
	}
	if r != cudaSuccess {
		return 0, 0, a.errOf("cuMemAlloc", r)
	}
	a.sizes[p] = size
	a.reserved.Add(int64(size))
	return p, size, nil
}

// release gives block p back to the cache, to be reused by work issued
// from now on: at once, unless a fence is up.
func (a *allocator) release(p devptr) error {
	if _, ok := a.sizes[p]; !ok {
		return fmt.Errorf("cuda: free of %#x, which is not a block of this backend", uint64(p))
	}
	if len(a.fences) > 0 {
		if err := a.poll(); err != nil {
			return err
		}
	}
	if len(a.fences) == 0 {
		a.toFreeList(p)
		return nil
	}
	a.pending = append(a.pending, pendingBlock{ptr: p, waits: append([]*fence(nil), a.fences...)})
	return nil
}

// releaseAfter gives block p back to the cache once the work issued so
// far on stream (another than the backend's) has completed, as well as
// the work behind any fence up.
func (a *allocator) releaseAfter(p devptr, stream uintptr) error {
	if _, ok := a.sizes[p]; !ok {
		return fmt.Errorf("cuda: free of %#x, which is not a block of this backend", uint64(p))
	}
	f, err := a.record(stream)
	if err != nil {
		return err
	}
	a.pending = append(a.pending, pendingBlock{ptr: p, waits: append([]*fence{f}, a.fences...)})
	return nil
}

// fence makes every block freed from now on wait, before it is reused,
// for the work issued so far on stream (another than the backend's): a
// collective in flight there may use any tensor. The fence comes down by
// itself when that work has completed.
func (a *allocator) fence(stream uintptr) error {
	f, err := a.record(stream)
	if err != nil {
		return err
	}
	a.fences = append(a.fences, f)
	return nil
}

// record makes a fence at the end of the work issued so far on stream.
func (a *allocator) record(stream uintptr) (*fence, error) {
	f := &fence{}
	if r := a.cu.cuEventCreate(&f.ev, eventNoTiming); r != cudaSuccess {
		return nil, a.errOf("cuEventCreate", r)
	}
	if r := a.cu.cuEventRecord(f.ev, stream); r != cudaSuccess {
		a.cu.cuEventDestroy(f.ev)
		return nil, a.errOf("cuEventRecord", r)
	}
	return f, nil
}

// poll takes down the fences whose work has completed, asking the driver
// without waiting, and moves the pending blocks they held to the free
// lists.
func (a *allocator) poll() error {
	var errs []error
	check := func(f *fence) {
		if f.done {
			return
		}
		switch r := a.cu.cuEventQuery(f.ev); r {
		case cudaErrorNotReady:
		case cudaSuccess:
			f.done = true
			a.cu.cuEventDestroy(f.ev)
		default:
			errs = append(errs, a.errOf("cuEventQuery", r))
		}
	}
	up := a.fences[:0]
	for _, f := range a.fences {
		if check(f); !f.done {
			up = append(up, f)
		}
	}
	clear(a.fences[len(up):])
	a.fences = up
	waiting := a.pending[:0]
	for _, pb := range a.pending {
		ready := true
		for _, f := range pb.waits {
			if check(f); !f.done {
				ready = false
			}
		}
		if ready {
			a.toFreeList(pb.ptr)
		} else {
			waiting = append(waiting, pb)
		}
	}
	clear(a.pending[len(waiting):])
	a.pending = waiting
	return errors.Join(errs...)
}

func (a *allocator) toFreeList(p devptr) {
	size := a.sizes[p]
	a.free[size] = append(a.free[size], p)
	a.cached.Add(int64(size))
}

// emptyCache frees the cached blocks, after waiting for the work issued
// so far on the stream, which may still use them. Blocks pending on other
// streams stay: waiting for a collective could wait for other ranks.
func (a *allocator) emptyCache() error {
	if err := a.poll(); err != nil {
		return err
	}
	if a.cached.Load() == 0 {
		return nil
	}
	if r := a.cu.cuStreamSynchronize(a.stream); r != cudaSuccess {
		return a.errOf("cuStreamSynchronize", r)
	}
	var errs []error
	for size, list := range a.free {
		for _, p := range list {
			errs = append(errs, a.freeBlock(p))
		}
		delete(a.free, size)
	}
	a.cached.Store(0)
	return errors.Join(errs...)
}

// freeBlock returns a block to the driver.
func (a *allocator) freeBlock(p devptr) error {
	a.reserved.Add(-int64(a.sizes[p]))
	delete(a.sizes, p)
	if r := a.cu.cuMemFree(p); r != cudaSuccess {
		return a.errOf("cuMemFree", r)
	}
	return nil
}

// close frees every block, live tensors' included, once the work on the
// backend's stream and behind every fence has completed. It runs at the
// backend's Close, which has synchronised the stream.
func (a *allocator) close() error {
	var errs []error
	wait := func(f *fence) {
		if !f.done {
			if r := a.cu.cuEventSynchronize(f.ev); r != cudaSuccess {
				errs = append(errs, a.errOf("cuEventSynchronize", r))
			}
			a.cu.cuEventDestroy(f.ev)
			f.done = true
		}
	}
	for _, f := range a.fences {
		wait(f)
	}
	for _, pb := range a.pending {
		for _, f := range pb.waits {
			wait(f)
		}
	}
	a.fences, a.pending = nil, nil
	for p := range a.sizes {
		errs = append(errs, a.freeBlock(p))
	}
	clear(a.free)
	a.cached.Store(0)
	return errors.Join(errs...)
}
