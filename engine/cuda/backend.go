package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"

	"github.com/memtrain/memtrain/engine"
)

// GemmEnv names the environment variable that chooses the GEMM precision
// of float32 tensors when Options.GEMM is empty.
const GemmEnv = "MEMTRAIN_CUDA_GEMM"

// GEMM precisions for float32 operands. BF16 operands always multiply on
// bf16 tensor cores with float32 accumulation.
const (
	// GemmF32 multiplies in float32 throughout: slow (no tensor cores) but
	// as exact as the CPU; the conformance suite runs with it.
	GemmF32 = "f32"
	// GemmTF32 rounds the inputs to TF32 (10-bit mantissa) on tensor cores.
	GemmTF32 = "tf32"
	// GemmBF16 rounds the inputs to bf16 on tensor cores, accumulating in
	// float32: mixed-precision training with float32 master weights, the
	// default.
	GemmBF16 = "bf16"
)

// Options configure a Backend.
type Options struct {
	// Device is the GPU's ordinal, as in cuda:N.
	Device int
	// GEMM is the precision of products of float32 tensors: GemmF32,
	// GemmTF32 or GemmBF16; empty means $MEMTRAIN_CUDA_GEMM, or GemmBF16
	// when that is unset.
	GEMM string
	// LibDir, when set, is the only folder the CUDA libraries are looked
	// for in (tests point it at fake libraries); empty means the usual
	// search (see New).
	LibDir string
	// CacheDir holds compiled kernels; empty means
	// $MEMTRAIN_CUDA_CACHE, else os.UserCacheDir()/memtrain/cuda.
	CacheDir string
	// Poison fills every tensor Empty returns with NaN (I32: −1), a
	// memset of its own, to catch reads before writes in tests;
	// $MEMTRAIN_POISON=1 (engine.Poison) turns it on too.
	Poison bool
}

// Backend is the CUDA implementation of engine.Backend on one GPU.
//
// Every driver call runs on one goroutine locked to its OS thread, where
// the device's primary context is current: each method hands its work to
// that goroutine and waits for it. The kernels themselves run
// asynchronously on one stream, in the order they were issued; Download
// and Synchronize wait for them. A Backend is safe for concurrent use (the
// calls are serialised), though kernels that share tensors must be
// ordered by the caller.
//
// Errors: the interface has no error results, so a failing driver call
// panics with an error naming the call and the driver's reason, except in
// Synchronize, which returns it. Arguments that break a method's contract
// panic with an *engine.Misuse, checked on the host before anything is
// issued, as in the CPU backend: they are programming errors. Limits of
// the kernels or of cuBLAS (a head size beyond the attention kernels', a
// grid too large, sizes beyond 32 bits) and use of a closed backend panic
// with a plain message.
type Backend struct {
	libs     *libraries
	cu       *driverAPI
	w        *worker
	info     DeviceInfo
	gemmMode string // GemmF32, GemmTF32 or GemmBF16
	poison   bool   // Options.Poison

	ctx    uintptr
	stream uintptr
	blas   uintptr
	module uintptr
	fns    map[kernel]uintptr

	mem     *allocator // every device block: tensors, scratch buffers
	scratch [numScratch]devBuffer
	count   counters
	// The tables of tensors of AdamWStep and SumSquaresMulti (table.go).
	adamTable, sumSqTable deviceTable

	allocated atomic.Int64
	peak      atomic.Int64
	closed    bool
}

var _ engine.Backend = (*Backend)(nil)

// DeviceInfo describes the GPU a Backend runs on.
type DeviceInfo struct {
	Ordinal        int
	Name           string
	Major, Minor   int // compute capability
	SMs            int // streaming multiprocessors
	TotalMemory    int64
	DriverVersion  int    // e.g. 12040 for CUDA 12.4
	NVRTCVersion   string // e.g. "12.4"
	CUBLASVersion  int
	KernelTarget   string // what NVRTC compiled for, e.g. "sm_90"
	KernelsCached  bool   // whether the compiled kernels came from the cache
	Libraries      map[string]string
	KernelCacheDir string
}

// New returns a backend on GPU opts.Device. It loads the CUDA driver
// (libcuda.so.1), cuBLAS and NVRTC, searching $MEMTRAIN_CUDA_LIB_DIR,
// $LD_LIBRARY_PATH, $CUDA_HOME/lib64 and $CUDA_PATH/lib64, the system's
// library folders (/usr/lib/x86_64-linux-gnu, /usr/local/cuda/lib64, …),
// the nvidia/*/lib folders of pip-installed NVIDIA packages (PyTorch's),
// and finally the dynamic loader's own path. It compiles the kernels with
// NVRTC for the GPU's compute capability, or loads them from the cache.
//
// Without the libraries or a GPU it returns one line saying what it looked
// for and where; such errors match ErrNoCUDA.
func New(opts Options) (*Backend, error) {
	mode := opts.GEMM
	if mode == "" {
		mode = os.Getenv(GemmEnv)
	}
	if mode == "" {
		mode = GemmBF16
	}
	switch mode {
	case GemmF32, GemmTF32, GemmBF16:
	default:
		return nil, fmt.Errorf("cuda: GEMM precision %q: want %s, %s or %s", mode, GemmF32, GemmTF32, GemmBF16)
	}
	if opts.Device < 0 {
		return nil, fmt.Errorf("cuda: device %d: want 0 or more", opts.Device)
	}
	libs, err := loadLibraries(opts.LibDir)
	if err != nil {
		return nil, err
	}
	b := &Backend{libs: libs, gemmMode: mode, fns: map[kernel]uintptr{}, w: newWorker(), poison: opts.Poison || engine.Poison()}
	b.cu = libs.cu.counting(&b.count)
	b.mem = newAllocator(b.cu, b.err)
	if err := b.w.try(func() error { return b.open(opts) }); err != nil {
		b.w.stop()
		return nil, err
	}
	return b, nil
}

// errNoDevice is the error of a machine with the libraries but no GPU.
type errNoDevice struct{ msg string }

func (e *errNoDevice) Error() string        { return e.msg }
func (e *errNoDevice) Is(target error) bool { return target == ErrNoCUDA }

// open initialises the device on the worker thread: the primary context
// (the one the CUDA runtime, and so cuBLAS and NCCL, use too), a stream,
// a cuBLAS handle on it, and the kernels.
func (b *Backend) open(opts Options) error {
	cu := b.cu
	if r := cu.cuInit(0); r != cudaSuccess {
		if r == cudaErrorNoDevice || r == cudaErrorStubLibrary {
			return &errNoDevice{fmt.Sprintf("cuda: no CUDA device (cuInit: %s; libcuda from %s)", b.describe(r), b.libs.paths[libCUDA.name])}
		}
		return b.err("cuInit", r)
	}
	var count, ver int32
	if err := b.call("cuDeviceGetCount", cu.cuDeviceGetCount(&count)); err != nil {
		return err
	}
	if opts.Device >= int(count) {
		return &errNoDevice{fmt.Sprintf("cuda: device cuda:%d requested, but %d CUDA device(s) found", opts.Device, count)}
	}
	var dev int32
	if err := b.call("cuDeviceGet", cu.cuDeviceGet(&dev, int32(opts.Device))); err != nil {
		return err
	}
	if err := b.call("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(&b.ctx, dev)); err != nil {
		return err
	}
	b.info.Ordinal = opts.Device
	if err := b.call("cuCtxSetCurrent", cu.cuCtxSetCurrent(b.ctx)); err != nil {
		return errors.Join(err, b.release())
	}
	name := make([]byte, 256)
	var major, minor, sms int32
	var total uint64
	for _, c := range []struct {
		call string
		r    func() cuResult
	}{
		{"cuDriverGetVersion", func() cuResult { return cu.cuDriverGetVersion(&ver) }},
		{"cuDeviceGetName", func() cuResult { return cu.cuDeviceGetName(&name[0], int32(len(name)), dev) }},
		{"cuDeviceGetAttribute", func() cuResult { return cu.cuDeviceGetAttribute(&major, attrComputeMajor, dev) }},
		{"cuDeviceGetAttribute", func() cuResult { return cu.cuDeviceGetAttribute(&minor, attrComputeMinor, dev) }},
		{"cuDeviceGetAttribute", func() cuResult { return cu.cuDeviceGetAttribute(&sms, attrMultiprocessorCount, dev) }},
		{"cuDeviceTotalMem", func() cuResult { return cu.cuDeviceTotalMem(&total, dev) }},
		{"cuStreamCreate", func() cuResult { return cu.cuStreamCreate(&b.stream, streamNonBlocking) }},
	} {
		if err := b.call(c.call, c.r()); err != nil {
			return errors.Join(err, b.release())
		}
	}
	b.mem.stream = b.stream
	b.info.Name = cString(&name[0])
	b.info.Major, b.info.Minor, b.info.SMs = int(major), int(minor), int(sms)
	b.info.TotalMemory, b.info.DriverVersion = int64(total), int(ver)
	b.info.Libraries = b.libs.pathsNow()

	blas := b.libs.blas
	if s := blas.cublasCreate(&b.blas); s != 0 {
		return errors.Join(fmt.Errorf("cuda: cublasCreate: %s", cublasStatusString(s)), b.release())
	}
	if s := blas.cublasSetStream(b.blas, b.stream); s != 0 {
		return errors.Join(fmt.Errorf("cuda: cublasSetStream: %s", cublasStatusString(s)), b.release())
	}
	var bv int32
	if s := blas.cublasGetVersion(b.blas, &bv); s == 0 {
		b.info.CUBLASVersion = int(bv)
	}

	img, err := b.kernelImage(opts.CacheDir)
	if err != nil {
		return errors.Join(err, b.release())
	}
	if err := b.call("cuModuleLoadData", cu.cuModuleLoadData(&b.module, pointerTo(img))); err != nil {
		return errors.Join(fmt.Errorf("%w (kernels compiled for %s)", err, b.info.KernelTarget), b.release())
	}
	runtime.KeepAlive(img)
	return nil
}

// release undoes what open did, after a failure or at Close. It runs on
// the worker thread.
func (b *Backend) release() error {
	cu := b.cu
	var errs []error
	if b.module != 0 {
		errs = append(errs, b.call("cuModuleUnload", cu.cuModuleUnload(b.module)))
		b.module = 0
	}
	if b.blas != 0 {
		if s := b.libs.blas.cublasDestroy(b.blas); s != 0 {
			errs = append(errs, fmt.Errorf("cuda: cublasDestroy: %s", cublasStatusString(s)))
		}
		b.blas = 0
	}
	for i := range b.scratch {
		errs = append(errs, b.freeBuffer(&b.scratch[i]))
	}
	errs = append(errs, b.mem.close())
	if b.stream != 0 {
		errs = append(errs, b.call("cuStreamDestroy", cu.cuStreamDestroy(b.stream)))
		b.stream = 0
	}
	if b.ctx != 0 {
		var dev int32
		if r := cu.cuDeviceGet(&dev, int32(b.info.Ordinal)); r == cudaSuccess {
			errs = append(errs, b.call("cuDevicePrimaryCtxRelease", cu.cuDevicePrimaryCtxRelease(dev)))
		}
		b.ctx = 0
	}
	return errors.Join(errs...)
}

// Close waits for the kernels issued so far, frees the device memory the
// backend holds (tensors still allocated, scratch buffers, the cache),
// its stream, cuBLAS handle and kernels, and releases the device. A
// closed backend must not be used, nor its tensors.
func (b *Backend) Close() error {
	if b.closed {
		return nil
	}
	err := b.w.try(func() error {
		return errors.Join(b.call("cuStreamSynchronize", b.cu.cuStreamSynchronize(b.stream)), b.release())
	})
	b.w.stop()
	b.closed = true
	return err
}

// Info describes the device and the libraries the backend uses.
func (b *Backend) Info() DeviceInfo { return b.info }

// Name reports the backend, its device and its GEMM precision, e.g.
// "cuda:0(NVIDIA H200, sm_90, gemm bf16)".
func (b *Backend) Name() string {
	return fmt.Sprintf("cuda:%d(%s, sm_%d%d, gemm %s)", b.info.Ordinal, b.info.Name, b.info.Major, b.info.Minor, b.gemmMode)
}

// Device is the GPU.
func (b *Backend) Device() engine.Device {
	return engine.Device{Kind: engine.CUDA, Index: b.info.Ordinal}
}

// Threads is 1: one host thread issues the kernels.
func (b *Backend) Threads() int { return 1 }

// GemmPrecision is the precision of products of float32 tensors.
func (b *Backend) GemmPrecision() string { return b.gemmMode }

// Synchronize waits for every kernel issued so far and reports the first
// error the device met running them.
func (b *Backend) Synchronize() error {
	if b.closed {
		return fmt.Errorf("cuda: Synchronize on a closed backend")
	}
	return b.w.try(func() error { return b.call("cuStreamSynchronize", b.cu.cuStreamSynchronize(b.stream)) })
}

// do runs f on the worker thread. A failing driver call inside f panics
// (see must); the panic reaches the caller of do.
func (b *Backend) do(f func()) {
	if b.closed {
		panic("cuda: use of a closed backend")
	}
	b.w.run(f)
}

// must panics with the error of a failed driver call.
func (b *Backend) must(call string, r cuResult) {
	if r != cudaSuccess {
		panic(b.err(call, r))
	}
}

// call returns the error of a failed driver call, or nil.
func (b *Backend) call(call string, r cuResult) error {
	if r == cudaSuccess {
		return nil
	}
	return b.err(call, r)
}

// DriverError is a failed CUDA driver call.
type DriverError struct {
	Call        string // e.g. "cuMemAlloc"
	Code        int    // the CUresult
	Name, Cause string // the driver's name for the code and its description
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, e.Code, e.Cause)
}

func (b *Backend) err(call string, r cuResult) error {
	var name, desc *byte
	e := &DriverError{Call: call, Code: int(r), Name: "CUDA_ERROR", Cause: "unknown error"}
	if b.cu.cuGetErrorName(r, &name) == cudaSuccess && name != nil {
		e.Name = cString(name)
	}
	if b.cu.cuGetErrorString(r, &desc) == cudaSuccess && desc != nil {
		e.Cause = cString(desc)
	}
	return e
}

// describe names a result code for messages: "CUDA_ERROR_NO_DEVICE: no
// CUDA-capable device is detected".
func (b *Backend) describe(r cuResult) string {
	e := b.err("", r).(*DriverError)
	return e.Name + ": " + e.Cause
}

func cublasStatusString(s cublasStatus) string {
	names := map[cublasStatus]string{
		1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
		8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
		14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
	}
	if n, ok := names[s]; ok {
		return fmt.Sprintf("%s (%d)", n, int(s))
	}
	return fmt.Sprintf("cuBLAS status %d", int(s))
}

// launch issues kernel k on the stream. It runs on the worker thread.
func (b *Backend) launch(k kernel, grid, block dim3, args ...any) {
	sig, ok := kernelSignatures[k]
	if !ok {
		panic(fmt.Sprintf("cuda: kernel %s is not in the sources", k))
	}
	a, err := packArgs(k, sig, args)
	if err != nil {
		panic(err)
	}
	if grid.x == 0 || grid.y == 0 || grid.z == 0 {
		return // nothing to do
	}
	if grid.y > maxGridYZ || grid.z > maxGridYZ || block.x*block.y*block.z > 1024 {
		panic(fmt.Sprintf("cuda: kernel %s launched with grid %v, block %v", k, grid, block))
	}
	if threads := int(block.x * block.y * block.z); threads > kernelBounds[k] {
		panic(fmt.Sprintf("cuda: kernel %s launched with %d threads a block, beyond its __launch_bounds__(%d)", k, threads, kernelBounds[k]))
	}
	fn := b.fns[k]
	if fn == 0 {
		b.must("cuModuleGetFunction("+string(k)+")", b.cu.cuModuleGetFunction(&fn, b.module, string(k)))
		b.fns[k] = fn
	}
	b.must("cuLaunchKernel("+string(k)+")", b.cu.cuLaunchKernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z, 0, b.stream, a.params(), nil))
	runtime.KeepAlive(a)
}

// worker runs functions on one goroutine locked to its OS thread: CUDA
// binds a context to a thread, and cuBLAS and NCCL follow the thread's
// current context.
type worker struct {
	jobs chan func()
}

func newWorker() *worker {
	w := &worker{jobs: make(chan func())}
	go func() {
		runtime.LockOSThread()
		// The thread is never unlocked: when jobs closes, the goroutine
		// ends and takes the thread, with its CUDA state, with it.
		for f := range w.jobs {
			f()
		}
	}()
	return w
}

// run executes f on the worker's thread and returns when it has. A panic
// in f is raised again in the caller.
func (w *worker) run(f func()) {
	done := make(chan any, 1)
	w.jobs <- func() {
		defer func() { done <- recover() }()
		f()
	}
	if p := <-done; p != nil {
		panic(p)
	}
}

// try is run for functions that return an error.
func (w *worker) try(f func() error) error {
	var err error
	w.run(func() { err = f() })
	return err
}

func (w *worker) stop() { close(w.jobs) }

// shapeString is a compact shape for messages.
func shapeString(shape []int) string {
	parts := make([]string, len(shape))
	for i, d := range shape {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ",") + "]"
}

// DeviceCount returns the number of CUDA devices, loading the driver as
// New does (libDir as Options.LibDir). Without the driver or a device it
// returns 0 and the error New would give.
func DeviceCount(libDir string) (int, error) {
	libs, err := loadLibraries(libDir)
	if err != nil {
		return 0, err
	}
	cu := libs.cu
	var n int32
	if r := cu.cuInit(0); r != cudaSuccess {
		b := &Backend{cu: cu}
		if r == cudaErrorNoDevice || r == cudaErrorStubLibrary {
			return 0, &errNoDevice{fmt.Sprintf("cuda: no CUDA device (cuInit: %s)", b.describe(r))}
		}
		return 0, b.err("cuInit", r)
	}
	if r := cu.cuDeviceGetCount(&n); r != cudaSuccess {
		return 0, (&Backend{cu: cu}).err("cuDeviceGetCount", r)
	}
	return int(n), nil
}

// FreeMemory returns the free and total memory of GPU device, as
// cuMemGetInfo reports them in the device's primary context — the one a
// Backend opens, whose own overhead is then already spent: what a backend
// there could still allocate. It loads the driver as New does (libDir as
// Options.LibDir) and holds the context for the call only, so that a
// command can compare what it will allocate with what the GPU has
// before opening a backend.
func FreeMemory(libDir string, device int) (free, total int64, err error) {
	if device < 0 {
		return 0, 0, fmt.Errorf("cuda: device %d: want 0 or more", device)
	}
	libs, err := loadLibraries(libDir)
	if err != nil {
		return 0, 0, err
	}
	done := make(chan struct{})
	go func() {
		// A context is current on one OS thread. The goroutine ends
		// without unlocking it, so the thread ends with it and no other
		// goroutine finds the context current there.
		runtime.LockOSThread()
		free, total, err = memInfo(libs, device)
		close(done)
	}()
	<-done
	return free, total, err
}

// memInfo runs on a locked thread: the primary context of device made
// current, cuMemGetInfo, and the context released.
func memInfo(libs *libraries, device int) (free, total int64, err error) {
	cu := libs.cu
	b := &Backend{cu: cu, libs: libs}
	if r := cu.cuInit(0); r != cudaSuccess {
		if r == cudaErrorNoDevice || r == cudaErrorStubLibrary {
			return 0, 0, &errNoDevice{fmt.Sprintf("cuda: no CUDA device (cuInit: %s)", b.describe(r))}
		}
		return 0, 0, b.err("cuInit", r)
	}
	var count, dev int32
	if r := cu.cuDeviceGetCount(&count); r != cudaSuccess {
		return 0, 0, b.err("cuDeviceGetCount", r)
	}
	if device >= int(count) {
		return 0, 0, &errNoDevice{fmt.Sprintf("cuda: device cuda:%d requested, but %d CUDA device(s) found", device, count)}
	}
	if r := cu.cuDeviceGet(&dev, int32(device)); r != cudaSuccess {
		return 0, 0, b.err("cuDeviceGet", r)
	}
	var ctx uintptr
	if r := cu.cuDevicePrimaryCtxRetain(&ctx, dev); r != cudaSuccess {
		return 0, 0, b.err("cuDevicePrimaryCtxRetain", r)
	}
	defer func() {
		cu.cuCtxSetCurrent(0)
		if r := cu.cuDevicePrimaryCtxRelease(dev); r != cudaSuccess && err == nil {
			err = b.err("cuDevicePrimaryCtxRelease", r)
		}
	}()
	if r := cu.cuCtxSetCurrent(ctx); r != cudaSuccess {
		return 0, 0, b.err("cuCtxSetCurrent", r)
	}
	var f, t uint64
	if r := cu.cuMemGetInfo(&f, &t); r != cudaSuccess {
		return 0, 0, b.err("cuMemGetInfo", r)
	}
	return int64(f), int64(t), nil
}
