package cuda

import (
	"fmt"
	"maps"
	"sync"
	"unsafe"
)

// This file binds the C functions memtrain calls in the CUDA driver
// (libcuda), cuBLAS and NVRTC: Go function variables whose signatures
// spell out the C prototypes, filled in with purego when the libraries
// load. C int is int32, size_t uint64, a CUdeviceptr a devptr, and every
// handle (context, stream, event, module, function, cuBLAS handle, NVRTC
// program) a uintptr. The names in the symbol tables are the exported
// ones: cuda.h maps cuMemAlloc to cuMemAlloc_v2 and so on, and those _v2
// entry points are what a C program built against it calls.

// devptr is a device address (CUdeviceptr).
type devptr uint64

// cuResult is a driver API status (CUresult).
type cuResult int32

// cublasStatus is a cuBLAS status (cublasStatus_t).
type cublasStatus int32

// nvrtcResult is an NVRTC status (nvrtcResult).
type nvrtcResult int32

// driverAPI is the part of libcuda that memtrain uses.
type driverAPI struct {
	cuInit                    func(flags uint32) cuResult
	cuDriverGetVersion        func(version *int32) cuResult
	cuDeviceGetCount          func(count *int32) cuResult
	cuDeviceGet               func(dev *int32, ordinal int32) cuResult
	cuDeviceGetName           func(name *byte, size int32, dev int32) cuResult
	cuDeviceGetAttribute      func(value *int32, attr int32, dev int32) cuResult
	cuDeviceTotalMem          func(bytes *uint64, dev int32) cuResult
	cuDevicePrimaryCtxRetain  func(ctx *uintptr, dev int32) cuResult
	cuDevicePrimaryCtxRelease func(dev int32) cuResult
	cuCtxSetCurrent           func(ctx uintptr) cuResult
	cuStreamCreate            func(stream *uintptr, flags uint32) cuResult
	cuStreamDestroy           func(stream uintptr) cuResult
	cuStreamSynchronize       func(stream uintptr) cuResult
	cuStreamWaitEvent         func(stream, event uintptr, flags uint32) cuResult
	cuEventCreate             func(event *uintptr, flags uint32) cuResult
	cuEventRecord             func(event, stream uintptr) cuResult
	cuEventSynchronize        func(event uintptr) cuResult
	cuEventQuery              func(event uintptr) cuResult
	cuEventElapsedTime        func(ms *float32, start, end uintptr) cuResult
	cuEventDestroy            func(event uintptr) cuResult
	cuMemAlloc                func(ptr *devptr, bytes uint64) cuResult
	cuMemFree                 func(ptr devptr) cuResult
	cuMemGetInfo              func(free, total *uint64) cuResult
	cuMemcpyHtoDAsync         func(dst devptr, src unsafe.Pointer, bytes uint64, stream uintptr) cuResult
	cuMemcpyDtoHAsync         func(dst unsafe.Pointer, src devptr, bytes uint64, stream uintptr) cuResult
	cuMemcpyDtoDAsync         func(dst, src devptr, bytes uint64, stream uintptr) cuResult
	cuMemsetD8Async           func(dst devptr, value uint8, n uint64, stream uintptr) cuResult
	cuMemsetD16Async          func(dst devptr, value uint16, n uint64, stream uintptr) cuResult
	cuMemsetD32Async          func(dst devptr, value uint32, n uint64, stream uintptr) cuResult
	cuModuleLoadData          func(module *uintptr, image unsafe.Pointer) cuResult
	cuModuleUnload            func(module uintptr) cuResult
	cuModuleGetFunction       func(fn *uintptr, module uintptr, name string) cuResult
	cuLaunchKernel            func(fn uintptr, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedBytes uint32, stream uintptr, params, extra unsafe.Pointer) cuResult
	cuGetErrorName            func(r cuResult, name **byte) cuResult
	cuGetErrorString          func(r cuResult, desc **byte) cuResult
}

func (d *driverAPI) symbols() []symbol {
	return []symbol{
		{"cuInit", &d.cuInit, true},
		{"cuDriverGetVersion", &d.cuDriverGetVersion, true},
		{"cuDeviceGetCount", &d.cuDeviceGetCount, true},
		{"cuDeviceGet", &d.cuDeviceGet, true},
		{"cuDeviceGetName", &d.cuDeviceGetName, true},
		{"cuDeviceGetAttribute", &d.cuDeviceGetAttribute, true},
		{"cuDeviceTotalMem_v2", &d.cuDeviceTotalMem, true},
		{"cuDevicePrimaryCtxRetain", &d.cuDevicePrimaryCtxRetain, true},
		{"cuDevicePrimaryCtxRelease_v2", &d.cuDevicePrimaryCtxRelease, true},
		{"cuCtxSetCurrent", &d.cuCtxSetCurrent, true},
		{"cuStreamCreate", &d.cuStreamCreate, true},
		{"cuStreamDestroy_v2", &d.cuStreamDestroy, true},
		{"cuStreamSynchronize", &d.cuStreamSynchronize, true},
		{"cuStreamWaitEvent", &d.cuStreamWaitEvent, true},
		{"cuEventCreate", &d.cuEventCreate, true},
		{"cuEventRecord", &d.cuEventRecord, true},
		{"cuEventSynchronize", &d.cuEventSynchronize, true},
		{"cuEventQuery", &d.cuEventQuery, true},
		{"cuEventElapsedTime", &d.cuEventElapsedTime, true},
		{"cuEventDestroy_v2", &d.cuEventDestroy, true},
		{"cuMemAlloc_v2", &d.cuMemAlloc, true},
		{"cuMemFree_v2", &d.cuMemFree, true},
		{"cuMemGetInfo_v2", &d.cuMemGetInfo, true},
		{"cuMemcpyHtoDAsync_v2", &d.cuMemcpyHtoDAsync, true},
		{"cuMemcpyDtoHAsync_v2", &d.cuMemcpyDtoHAsync, true},
		{"cuMemcpyDtoDAsync_v2", &d.cuMemcpyDtoDAsync, true},
		{"cuMemsetD8Async", &d.cuMemsetD8Async, true},
		{"cuMemsetD16Async", &d.cuMemsetD16Async, true},
		{"cuMemsetD32Async", &d.cuMemsetD32Async, true},
		{"cuModuleLoadData", &d.cuModuleLoadData, true},
		{"cuModuleUnload", &d.cuModuleUnload, true},
		{"cuModuleGetFunction", &d.cuModuleGetFunction, true},
		{"cuLaunchKernel", &d.cuLaunchKernel, true},
		{"cuGetErrorName", &d.cuGetErrorName, true},
		{"cuGetErrorString", &d.cuGetErrorString, true},
	}
}

// Driver API constants (cuda.h).
const (
	cudaSuccess           cuResult = 0
	cudaErrorStubLibrary  cuResult = 34 // the toolkit's link-time stub, not a driver
	cudaErrorNoDevice     cuResult = 100
	cudaErrorInvalidImage cuResult = 200
	cudaErrorNotReady     cuResult = 600 // cuEventQuery: the work before the event has not completed

	attrMultiprocessorCount = 16 // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
	attrComputeMajor        = 75 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
	attrComputeMinor        = 76 // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

	streamNonBlocking = 0x1 // CU_STREAM_NON_BLOCKING: no implicit sync with the legacy stream
	eventDefault      = 0x0
	eventNoTiming     = 0x2 // CU_EVENT_DISABLE_TIMING
)

// cublasAPI is the part of cuBLAS that memtrain uses.
type cublasAPI struct {
	cublasCreate     func(handle *uintptr) cublasStatus
	cublasDestroy    func(handle uintptr) cublasStatus
	cublasSetStream  func(handle, stream uintptr) cublasStatus
	cublasGetVersion func(handle uintptr, version *int32) cublasStatus
	// cublasSetWorkspace gives the handle its workspace: device memory
	// for the GEMMs' split-K partial sums and the like. Without it
	// cuBLAS takes its own from cudaMalloc behind the caching allocator's
	// back (and, in graphs or with several streams, may serialise).
	cublasSetWorkspace func(handle uintptr, workspace devptr, bytes uint64) cublasStatus
	// cublasGemmStridedBatchedEx computes, for each of batch problems,
	// C = alpha·op(A)·op(B) + beta·C in column-major order.
	cublasGemmStridedBatchedEx func(handle uintptr, transA, transB int32, m, n, k int32, alpha unsafe.Pointer,
		a devptr, aType int32, lda int32, strideA int64,
		b devptr, bType int32, ldb int32, strideB int64,
		beta unsafe.Pointer,
		c devptr, cType int32, ldc int32, strideC int64,
		batch int32, compute int32, algo int32) cublasStatus
}

func (c *cublasAPI) symbols() []symbol {
	return []symbol{
		{"cublasCreate_v2", &c.cublasCreate, true},
		{"cublasDestroy_v2", &c.cublasDestroy, true},
		{"cublasSetStream_v2", &c.cublasSetStream, true},
		{"cublasGetVersion_v2", &c.cublasGetVersion, true},
		{"cublasSetWorkspace_v2", &c.cublasSetWorkspace, true},
		{"cublasGemmStridedBatchedEx", &c.cublasGemmStridedBatchedEx, true},
	}
}

// cuBLAS constants (cublas_api.h, library_types.h).
const (
	cublasOpN = 0
	cublasOpT = 1

	cudaR32F  = 0  // CUDA_R_32F
	cudaR16BF = 14 // CUDA_R_16BF

	cublasCompute32F         = 68 // CUBLAS_COMPUTE_32F: float32 throughout
	cublasCompute32FFast16BF = 75 // CUBLAS_COMPUTE_32F_FAST_16BF: bf16 tensor cores, float32 accumulation
	cublasCompute32FFastTF32 = 77 // CUBLAS_COMPUTE_32F_FAST_TF32

	cublasGemmDefault = -1 // CUBLAS_GEMM_DEFAULT
)

// nvrtcAPI is the part of NVRTC that memtrain uses.
type nvrtcAPI struct {
	nvrtcVersion              func(major, minor *int32) nvrtcResult
	nvrtcGetNumSupportedArchs func(n *int32) nvrtcResult
	nvrtcGetSupportedArchs    func(archs *int32) nvrtcResult
	nvrtcCreateProgram        func(prog *uintptr, src, name string, numHeaders int32, headers, includeNames unsafe.Pointer) nvrtcResult
	nvrtcCompileProgram       func(prog uintptr, numOptions int32, options unsafe.Pointer) nvrtcResult
	nvrtcGetProgramLogSize    func(prog uintptr, size *uint64) nvrtcResult
	nvrtcGetProgramLog        func(prog uintptr, log *byte) nvrtcResult
	nvrtcGetCUBINSize         func(prog uintptr, size *uint64) nvrtcResult
	nvrtcGetCUBIN             func(prog uintptr, cubin *byte) nvrtcResult
	nvrtcGetPTXSize           func(prog uintptr, size *uint64) nvrtcResult
	nvrtcGetPTX               func(prog uintptr, ptx *byte) nvrtcResult
	nvrtcDestroyProgram       func(prog *uintptr) nvrtcResult
	nvrtcGetErrorString       func(r nvrtcResult) string
}

func (n *nvrtcAPI) symbols() []symbol {
	return []symbol{
		{"nvrtcVersion", &n.nvrtcVersion, true},
		// The supported-architecture list and CUBIN output came with
		// CUDA 11.2 and 11.1; without them memtrain asks for PTX.
		{"nvrtcGetNumSupportedArchs", &n.nvrtcGetNumSupportedArchs, false},
		{"nvrtcGetSupportedArchs", &n.nvrtcGetSupportedArchs, false},
		{"nvrtcCreateProgram", &n.nvrtcCreateProgram, true},
		{"nvrtcCompileProgram", &n.nvrtcCompileProgram, true},
		{"nvrtcGetProgramLogSize", &n.nvrtcGetProgramLogSize, true},
		{"nvrtcGetProgramLog", &n.nvrtcGetProgramLog, true},
		{"nvrtcGetCUBINSize", &n.nvrtcGetCUBINSize, false},
		{"nvrtcGetCUBIN", &n.nvrtcGetCUBIN, false},
		{"nvrtcGetPTXSize", &n.nvrtcGetPTXSize, true},
		{"nvrtcGetPTX", &n.nvrtcGetPTX, true},
		{"nvrtcDestroyProgram", &n.nvrtcDestroyProgram, true},
		{"nvrtcGetErrorString", &n.nvrtcGetErrorString, true},
	}
}

// A symbol is a C function to bind into a Go function variable.
type symbol struct {
	name     string
	fn       any // pointer to the function variable
	required bool
}

// bindAll binds every symbol of a loaded library. A missing required
// symbol is an error naming it and the library (a library too old for
// memtrain); a missing optional one leaves its variable nil.
func bindAll(handle uintptr, path string, syms []symbol) error {
	for _, s := range syms {
		sym, err := dlsym(handle, s.name)
		if err != nil || sym == 0 {
			if s.required {
				return fmt.Errorf("cuda: %s has no %s (too old a version?)", path, s.name)
			}
			continue
		}
		bind(s.fn, sym)
	}
	return nil
}

// libraries are the loaded CUDA libraries of one search configuration.
type libraries struct {
	cu     *driverAPI
	blas   *cublasAPI
	rtc    *nvrtcAPI
	paths  map[string]string // library → path loaded, for messages
	env    searchEnv
	nccl   *ncclAPI
	ncclMu sync.Mutex
	// ncclErr remembers a failed NCCL load, which is not retried.
	ncclErr error
}

var (
	librariesMu sync.Mutex
	loaded      = map[string]*libraries{}
	// loadErrs remembers failed searches: a search runs python3, and
	// its answer does not change while the process runs.
	loadErrs = map[string]error{}
)

// loadLibraries loads the driver, cuBLAS and NVRTC, once per process for
// each libDir ("" is the usual search; a folder restricts the search to
// it, as tests do with fake libraries). NCCL loads later, on first use.
func loadLibraries(libDir string) (*libraries, error) {
	librariesMu.Lock()
	defer librariesMu.Unlock()
	if l := loaded[libDir]; l != nil {
		return l, nil
	}
	if err := loadErrs[libDir]; err != nil {
		return nil, err
	}
	if !canLoad {
		_, err := dlopen("")
		return nil, err
	}
	env := systemEnv()
	if libDir != "" {
		env = restrictedEnv(libDir)
	}
	l := &libraries{cu: &driverAPI{}, blas: &cublasAPI{}, rtc: &nvrtcAPI{}, paths: map[string]string{}, env: env}
	for _, x := range []struct {
		lib  library
		syms []symbol
	}{
		{libCUDA, l.cu.symbols()},
		{libNVRTC, l.rtc.symbols()},
		{libCUBLAS, l.blas.symbols()},
	} {
		h, path, err := loadLibrary(x.lib, env)
		if err == nil {
			err = bindAll(h, path, x.syms)
		}
		if err != nil {
			loadErrs[libDir] = err
			return nil, err
		}
		l.paths[x.lib.name] = path
	}
	loaded[libDir] = l
	return l, nil
}

// pathsNow is a copy of the libraries loaded so far, by name.
func (l *libraries) pathsNow() map[string]string {
	l.ncclMu.Lock()
	defer l.ncclMu.Unlock()
	return maps.Clone(l.paths)
}

// restrictedEnv searches dir alone, and never the dynamic loader's path:
// what tests need to load fake libraries and nothing else.
func restrictedEnv(dir string) searchEnv {
	env := systemEnv()
	env.only = []searchPlace{{label: dir, dirs: []string{dir}}}
	env.loaderDefault = false
	return env
}

// cString reads a NUL-terminated C string.
func cString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}
