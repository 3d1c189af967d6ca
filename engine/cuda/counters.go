package cuda

import "sync/atomic"

// Counters are the driver calls a backend has made since New that cost a
// training step the most when it makes them every step: allocations and
// frees, which synchronise the device or fragment its memory, and host
// synchronisations, which stall the host until the GPU has caught up and
// leave the GPU idle until the host issues more. Each counts calls,
// successful or not; the difference of two readings is what the work
// between them made.
type Counters struct {
	// Allocs counts cuMemAlloc: the caching allocator's blocks.
	Allocs int64
	// Frees counts cuMemFree: blocks given back to the driver.
	Frees int64
	// Syncs counts cuStreamSynchronize and cuEventSynchronize (the
	// backend never calls cuCtxSynchronize or a synchronous copy). Every
	// copy to the host (Download, DownloadInt32, an I32 tensor's host
	// copy refreshed) is a cuMemcpyDtoHAsync followed by a
	// cuStreamSynchronize, so each counts once here.
	Syncs int64
}

// Counters reports the backend's driver calls so far, its NCCL
// communicators' included. It may be called from any goroutine.
func (b *Backend) Counters() Counters {
	return Counters{Allocs: b.count.allocs.Load(), Frees: b.count.frees.Load(), Syncs: b.count.syncs.Load()}
}

// Sub is c minus an earlier reading: the calls made in between.
func (c Counters) Sub(earlier Counters) Counters {
	return Counters{Allocs: c.Allocs - earlier.Allocs, Frees: c.Frees - earlier.Frees, Syncs: c.Syncs - earlier.Syncs}
}

// counters are a backend's running counts.
type counters struct {
	allocs, frees, syncs atomic.Int64
}

// counting is a copy of the driver bindings for one backend whose
// allocation, free and synchronisation entry points count their calls in
// c. Counting at the bindings, rather than at the backend's call sites,
// catches every caller: the allocator, the NCCL communicators, Close.
func (d *driverAPI) counting(c *counters) *driverAPI {
	w := *d
	alloc, free, streamSync, eventSync := d.cuMemAlloc, d.cuMemFree, d.cuStreamSynchronize, d.cuEventSynchronize
	w.cuMemAlloc = func(p *devptr, n uint64) cuResult { c.allocs.Add(1); return alloc(p, n) }
	w.cuMemFree = func(p devptr) cuResult { c.frees.Add(1); return free(p) }
	w.cuStreamSynchronize = func(s uintptr) cuResult { c.syncs.Add(1); return streamSync(s) }
	w.cuEventSynchronize = func(e uintptr) cuResult { c.syncs.Add(1); return eventSync(e) }
	return &w
}
