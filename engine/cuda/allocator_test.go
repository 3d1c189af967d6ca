package cuda

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/memtrain/memtrain/engine"
)

func TestBlockSize(t *testing.T) {
	for _, tt := range []struct{ n, want uint64 }{
		{1, 512},
		{512, 512},
		{513, 1024},
		{8 << 10, 8 << 10},
		{8<<10 + 1, 8<<10 + 512}, // 2^13 < n: classes of 2^9
		{1 << 20, 1 << 20},
		{1<<20 + 1, 1<<20 + 1<<16},
		{3<<20 - 1, 3 << 20},
		{101 << 20, 104 << 20}, // 2^26 ≤ n < 2^27: classes of 4 MiB
	} {
		if got := blockSize(tt.n); got != tt.want {
			t.Errorf("blockSize(%d) = %d, want %d", tt.n, got, tt.want)
		}
	}
	// The rule: a multiple of 512 bytes, at least n, wasting less than
	// 512 bytes or 1/16 of n.
	for n := uint64(1); n < 1<<32; n += n/7 + 1 {
		got := blockSize(n)
		if got < n || got%512 != 0 || got-n >= max(512, n/16) {
			t.Fatalf("blockSize(%d) = %d: waste %d", n, got, got-n)
		}
	}
}

// stubDriver is the part of the driver the allocator calls, in memory:
// addresses handed out in order, a device of limit bytes (0: no limit),
// and events that complete when the test says.
type stubDriver struct {
	next, used, limit uint64
	blocks            map[devptr]uint64
	events            map[uintptr]bool // recorded event → complete
	allocs, frees     int
	syncs             int
}

func newStub(limit uint64) (*stubDriver, *allocator) {
	d := &stubDriver{next: 1 << 20, limit: limit, blocks: map[devptr]uint64{}, events: map[uintptr]bool{}}
	cu := &driverAPI{
		cuMemAlloc: func(p *devptr, n uint64) cuResult {
			d.allocs++
			if d.limit > 0 && d.used+n > d.limit {
				return 2 // CUDA_ERROR_OUT_OF_MEMORY
			}
			*p = devptr(d.next)
			d.blocks[*p] = n
			d.next += n
			d.used += n
			return cudaSuccess
		},
		cuMemFree: func(p devptr) cuResult {
			d.frees++
			n, ok := d.blocks[p]
			if !ok {
				return 1
			}
			delete(d.blocks, p)
			d.used -= n
			return cudaSuccess
		},
		cuStreamSynchronize: func(uintptr) cuResult { d.syncs++; return cudaSuccess },
		cuEventSynchronize: func(e uintptr) cuResult {
			d.syncs++
			d.events[e] = true
			return cudaSuccess
		},
		cuEventCreate: func(e *uintptr, _ uint32) cuResult {
			*e = uintptr(len(d.events) + 1)
			d.events[*e] = false
			return cudaSuccess
		},
		cuEventRecord:  func(uintptr, uintptr) cuResult { return cudaSuccess },
		cuEventDestroy: func(uintptr) cuResult { return cudaSuccess },
		cuEventQuery: func(e uintptr) cuResult {
			if d.events[e] {
				return cudaSuccess
			}
			return cudaErrorNotReady
		},
	}
	a := newAllocator(cu, func(call string, r cuResult) error { return &DriverError{Call: call, Code: int(r)} })
	a.stream = 1
	return d, a
}

func mustAlloc(t *testing.T, a *allocator, n uint64) devptr {
	t.Helper()
	p, size, err := a.alloc(n)
	if err != nil {
		t.Fatalf("alloc(%d): %v", n, err)
	}
	if size != blockSize(n) {
		t.Fatalf("alloc(%d) gave a block of %d, want %d", n, size, blockSize(n))
	}
	return p
}

func mustRelease(t *testing.T, a *allocator, p devptr) {
	t.Helper()
	if err := a.release(p); err != nil {
		t.Fatal(err)
	}
}

// TestAllocatorReuse: a freed block serves the next request of its size
// class at once, without the driver; other classes get blocks of their
// own; close gives every block back.
func TestAllocatorReuse(t *testing.T) {
	d, a := newStub(0)
	p := mustAlloc(t, a, 1000)
	mustRelease(t, a, p)
	if q := mustAlloc(t, a, 600); q != p {
		t.Errorf("a request of the same class got block %#x, want the freed %#x", q, p)
	}
	q := mustAlloc(t, a, 2000)
	if q == p {
		t.Errorf("a request of another class got the live block")
	}
	mustRelease(t, a, q)
	if d.allocs != 2 || d.frees != 0 || d.syncs != 0 {
		t.Errorf("%d allocations, %d frees, %d synchronisations; want 2, 0, 0", d.allocs, d.frees, d.syncs)
	}
	if r, c := a.reserved.Load(), a.cached.Load(); r != 512*2+2048 || c != 2048 {
		t.Errorf("reserved %d, cached %d; want %d, %d", r, c, 512*2+2048, 2048)
	}
	if err := a.release(p + 1); err == nil || !strings.Contains(err.Error(), "not a block") {
		t.Errorf("release of no block: %v", err)
	}
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	if len(d.blocks) != 0 || a.reserved.Load() != 0 || a.cached.Load() != 0 {
		t.Errorf("after close: %d blocks held, reserved %d, cached %d", len(d.blocks), a.reserved.Load(), a.cached.Load())
	}
}

// TestAllocatorFences: blocks freed behind a fence, or after another
// stream's work, are reused only once that work has completed, found by
// polling without waiting.
func TestAllocatorFences(t *testing.T) {
	for _, tt := range []struct {
		name string
		free func(a *allocator, p devptr) error
	}{
		{"fence", func(a *allocator, p devptr) error {
			if err := a.fence(7); err != nil {
				return err
			}
			return a.release(p)
		}},
		{"releaseAfter", func(a *allocator, p devptr) error { return a.releaseAfter(p, 7) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, a := newStub(0)
			p := mustAlloc(t, a, 4096)
			if err := tt.free(a, p); err != nil {
				t.Fatal(err)
			}
			q := mustAlloc(t, a, 4096)
			if q == p {
				t.Fatalf("a block freed behind unfinished work on another stream was reused")
			}
			mustRelease(t, a, q) // behind the fence too, for "fence"
			for e := range d.events {
				d.events[e] = true // the side stream's work completes
			}
			got := map[devptr]bool{mustAlloc(t, a, 4096): true, mustAlloc(t, a, 4096): true}
			if !got[p] || !got[q] {
				t.Errorf("after the work completed, allocations got %v, want %#x and %#x", got, p, q)
			}
			if len(a.fences) != 0 || len(a.pending) != 0 {
				t.Errorf("%d fences up, %d blocks pending after the work completed", len(a.fences), len(a.pending))
			}
			if d.allocs != 2 || d.syncs != 0 {
				t.Errorf("%d allocations, %d synchronisations; want 2, 0", d.allocs, d.syncs)
			}
			if err := a.close(); err != nil || len(d.blocks) != 0 {
				t.Errorf("close: %v, %d blocks held", err, len(d.blocks))
			}
		})
	}
}

// TestAllocatorRetry: when the driver has no memory for a request, the
// cache is emptied (one synchronisation) and the request tried once more;
// when that fails too, the error is the driver's.
func TestAllocatorRetry(t *testing.T) {
	d, a := newStub(3 << 20)
	p := mustAlloc(t, a, 2<<20)
	mustRelease(t, a, p)
	mustAlloc(t, a, 3<<20-1<<16) // another class: fits once p is freed
	if d.allocs != 3 || d.frees != 1 || d.syncs != 1 {
		t.Errorf("%d allocations, %d frees, %d synchronisations; want 3 (one failed), 1, 1", d.allocs, d.frees, d.syncs)
	}
	if _, _, err := a.alloc(1 << 20); err == nil {
		t.Fatal("an allocation beyond the device's memory succeeded")
	} else if e := (*DriverError)(nil); !errors.As(err, &e) || e.Call != "cuMemAlloc" || e.Code != 2 {
		t.Errorf("error %v, want cuMemAlloc's out of memory", err)
	}
	if d.allocs != 4 || d.syncs != 1 {
		t.Errorf("with nothing cached: %d allocations, %d synchronisations; want one more allocation, no synchronisation", d.allocs, d.syncs)
	}
}

// fakeCounters reads the fake library's own counts for device dev.
func fakeCounters(t *testing.T, dev int) Counters {
	t.Helper()
	h, err := dlopen(filepath.Join(fakeCUDA(t), "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	sym, err := dlsym(h, "fakecuda_counters")
	if err != nil {
		t.Fatal(err)
	}
	var read func(dev int32, out *[3]int64) int32
	bind(&read, sym)
	var out [3]int64
	if n := read(int32(dev), &out); n != 3 {
		t.Fatalf("fakecuda_counters(%d) = %d", dev, n)
	}
	return Counters{Allocs: out[0], Frees: out[1], Syncs: out[2]}
}

// TestAllocatorEmulated runs the allocator behind a backend on a fake GPU
// with 6 MiB free: reuse without driver calls, the cache emptied for a
// request of another class, the panic when even that cannot fit, and
// counters that agree with the library's own.
func TestAllocatorEmulated(t *testing.T) {
	const dev = 6
	dir := fakeCUDA(t)
	t.Setenv("MEMTRAIN_FAKECUDA_FREE", fmt.Sprint(6<<20))
	b, err := New(Options{Device: dev, GEMM: GemmF32, LibDir: dir, CacheDir: fakeCacheDir(t)})
	if err != nil {
		t.Fatal(err)
	}
	goStart, libStart := b.Counters(), fakeCounters(t, dev)
	step := func(what string, f func(), want Counters) {
		t.Helper()
		before := b.Counters()
		f()
		if got := b.Counters().Sub(before); got != want {
			t.Errorf("%s: counted %+v, want %+v", what, got, want)
		}
	}

	x := b.Alloc(engine.F32, 1<<20) // 4 MiB
	b.Fill(x, 3)
	step("Free and Alloc of the same size", func() {
		b.Free(x)
		x = b.Alloc(engine.F32, 1<<20-10)
	}, Counters{})
	got := make([]float32, 1<<20-10)
	b.Download(got, x)
	if got[0] != 0 || got[len(got)-1] != 0 {
		t.Errorf("a reused block was not zeroed: %v … %v", got[0], got[len(got)-1])
	}
	if r, c := b.Reserved(); r != 4<<20 || c != 0 {
		t.Errorf("Reserved() = %d, %d; want %d, 0", r, c, 4<<20)
	}
	step("Alloc of another class, with the first freed", func() {
		b.Free(x)
		x = b.Alloc(engine.F32, 5<<18) // 5 MiB: fits only once the cache is emptied
	}, Counters{Allocs: 2, Frees: 1, Syncs: 1})
	b.Free(x)

	defer func() {
		p := recover()
		if p == nil || !strings.Contains(fmt.Sprint(p), "cuda: Alloc of f32 [2097152] (8388608 bytes) on cuda:6: ") ||
			!strings.Contains(fmt.Sprint(p), "CUDA_ERROR_OUT_OF_MEMORY") || !strings.Contains(fmt.Sprint(p), " of 17179869184 bytes free)") {
			t.Errorf("Alloc beyond the device: panic %v", p)
		}
		if err := b.EmptyCache(); err != nil {
			t.Error(err)
		}
		if r, c := b.Reserved(); r != 0 || c != 0 {
			t.Errorf("after EmptyCache, Reserved() = %d, %d", r, c)
		}
		// The hooks for collectives on other streams, on the real
		// bindings (the fake's events have always completed).
		y := b.Alloc(engine.F32, 10)
		var buf devBuffer
		if err := b.w.try(func() error {
			b.growBuffer(&buf, 100, 0)
			if err := b.freeBufferAfter(&buf, b.stream); err != nil {
				return err
			}
			return b.fenceFrees(b.stream)
		}); err != nil {
			t.Error(err)
		}
		b.Free(y)
		if err := b.Close(); err != nil {
			t.Error(err)
		}
		if gotGo, gotLib := b.Counters().Sub(goStart), fakeCounters(t, dev).Sub(libStart); gotGo != gotLib {
			t.Errorf("the backend counted %+v, the library %+v", gotGo, gotLib)
		}
		os.Unsetenv("MEMTRAIN_FAKECUDA_FREE")
	}()
	b.Alloc(engine.F32, 2<<20) // 8 MiB
}
