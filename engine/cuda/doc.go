// Package cuda is the engine's GPU backend: engine.Backend on an NVIDIA GPU,
// without cgo. It is built everywhere; it loads the CUDA libraries when New
// is called, and fails with one line saying what it looked for and where
// when they or a GPU are missing (errors.Is(err, ErrNoCUDA)).
//
// # Libraries
//
// The driver (libcuda.so.1), cuBLAS (libcublas with its libcublasLt) and
// NVRTC (libnvrtc with its builtins) are opened with purego and bound into
// Go function variables whose signatures spell out the C prototypes
// (api.go); NCCL (libnccl.so.2) is opened on first use. The search (libs.go)
// tries $MEMTRAIN_CUDA_LIB_DIR, $LD_LIBRARY_PATH, $CUDA_HOME/lib64 and
// $CUDA_PATH/lib64, the system's folders (/usr/lib/x86_64-linux-gnu,
// /usr/local/cuda/lib64, …), the nvidia/*/lib folders of pip-installed
// NVIDIA packages (those PyTorch brings) in every Python environment it can
// find, and finally the dynamic loader's own path, preferring versioned
// sonames (libcublas.so.12, libnvrtc.so.12, libnccl.so.2).
//
// # Threads and streams
//
// CUDA binds a context to an OS thread, so each Backend owns one goroutine
// locked to its thread, where the device's primary context is current (the
// one the CUDA runtime inside cuBLAS and NCCL uses too); every method hands
// its driver calls to it and waits. Kernels, cuBLAS calls and copies are
// issued in order on one stream and run asynchronously; Download and
// Synchronize wait for them, and nothing else does (Free does not). A failing driver call panics with a
// *DriverError naming the call (the interface has no error results),
// except in Synchronize, which returns it.
//
// # Memory
//
// Tensors and scratch buffers are blocks of a caching allocator
// (allocator.go): a request is rounded up to a size class (512 bytes up
// to 8 KiB, then sixteen classes to each power of two, less than 1/16
// wasted), and a freed block goes to a free list and is reused by the
// next request of its class with no driver call and no synchronisation.
// That is safe because all the backend's work runs in order on its one
// stream; a collective on another stream holds the blocks it may use
// behind an event until it has completed. A full device empties the
// cache once before Alloc panics; EmptyCache empties it on demand,
// Reserved reports what it holds. So in steady state a training step
// makes no cuMemAlloc or cuMemFree, and its host synchronisations are the
// host's reads of results. Counters (counters.go) counts those driver
// calls per backend, at the bindings; the fake libraries count them too,
// and the tests compare. Alloc zero-fills (a memset); Empty does not,
// for the workspace's activations, which their kernels write whole.
// Options.Poison (or $MEMTRAIN_POISON=1) fills Empty tensors with NaN
// instead, new and reused blocks alike, and the fake libraries fill new
// memory so: the tests catch a kernel reading what nothing wrote.
//
// # Kernels
//
// The kernels are CUDA C in kernels/*.cu (llm.c style: one file per layer,
// the backward beside the forward), embedded in the binary and compiled by
// NVRTC for the GPU's compute capability: machine code (sm_XX) when NVRTC
// knows the architecture, else PTX for the newest one it knows below it.
// The result is cached in $MEMTRAIN_CUDA_CACHE or os.UserCacheDir()/memtrain/cuda
// under a hash of the source, the headers, the options, the target and
// NVRTC's version. One kernel serves every mix of F32 and BF16 tensors: the
// element types are kernel arguments (common.cuh's load and store). Every
// launch is checked against the kernel's parameter list, read from the
// sources at start-up, before it reaches the driver.
//
// Attention of BF16 tensors with heads of 64 or 128 on sm_80 and newer
// runs on tensor cores (kernels/flash.cu): FlashAttention-2's forward —
// Q in mma fragments, K/V tiles double-buffered into shared memory by
// cp.async, ldmatrix, an online softmax in registers — and its backward
// in one pass, dK and dV in registers and dQ summed per query tile in
// key-tile order through acquire/release counters in global memory, so
// with no atomics and bit-identical run to run. They are built on
// kernels/warp.cuh, one header of warp-collective primitives (mma.sync
// m16n8k16 bf16 into float32, ldmatrix, cp.async, the counters), inline
// PTX on a GPU and an exact emulation with PTX's fragment layouts in the
// stand-in. They round P and dS to bf16 as products' operands, as
// FlashAttention-2 does; float32 attention and other head sizes keep
// kernels/attention.cu, on the CUDA cores.
//
// The arithmetic follows the CPU backend, which is the specification:
// reductions in float64 where the CPU's are, products rounded before sums
// (the _rn intrinsics, which the compiler never fuses), the same order of
// roundings in AdamW, RMSNorm and RoPE — but for the sums of the hot
// paths, RMSNorm's, its backward's and cross-entropy's sum of
// exponentials, which are float32 where the CPU's are float64: each
// thread's share compensated (Kahan), then a fixed tree, within about 15
// units of float32's rounding of the sum whatever its length (the bounds
// are in rmsnorm.cu and crossentropy.cu); SumSquares, a gradient norm's,
// stays float64. RoPE takes cos and sin from a table that rope_table
// computes once a (position, frequency), in float64 rounded, not once a
// head. No kernel uses atomics: reductions over rows are split into
// chunks fixed by the shape (dw, SumSquares and SumSquaresMulti) and the
// embedding's backward sorts the tokens by id on the host, so every
// result is reproducible bit for bit.
//
// The memory-bound kernels (elementwise, SwiGLU, RMSNorm, RoPE,
// cross-entropy, embedding and its backward, AdamW) move 16 bytes a
// thread at a time — eight bf16, or four f32 twice (common.cuh's load8
// and store8) — when their operands are 16-byte aligned and the row
// length a multiple of eight, element by element otherwise (a view at an
// odd offset, a tail); which thread takes which elements is the same
// either way, so the two paths agree bit for bit (vector_test.go, which
// also checks that the real NVRTC emits 128-bit accesses). Each declares
// the bytes it moves and its flops beside its launcher (traffic.go).
//
// # Precision
//
// Tensors are F32, BF16, I32 or I8 (8-bit moments' codes) on the device.
// The model keeps weights, gradients, AdamW moments and activations in
// float32 unless it asks for less: bf16 activations and weight copies, and
// compact AdamW state (engine.MasterSplitter: split masters, bf16 or 8-bit
// moments, updated by AdamWStep bit for bit as the CPU backend); matrix products of
// float32 tensors run at the precision Options.GEMM (or $MEMTRAIN_CUDA_GEMM)
// names: bf16 (the default: bf16 tensor cores with float32 accumulation,
// cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF, i.e. mixed precision with float32
// master weights), tf32, or f32 (exact, as the CPU; the conformance suite's
// setting). BF16 tensors multiply on tensor cores into F32 or BF16. A
// float32 A by a BF16 B (a frozen weight kept in its checkpoint's dtype),
// which cuBLAS does not multiply, is the float32 product at that precision
// with B widened, exactly, into a float32 scratch buffer that the backend
// keeps (kernel widen_bf16_matrix).
//
// # Collectives
//
// NewNCCLGroup (one process driving several GPUs, ncclCommInitAll) and
// NewNCCL (one rank per process, from an NCCLUniqueID the job distributes,
// e.g. over MPI) return comm.Comm communicators. Each runs all its
// collectives, blocking and non-blocking, on a communication stream of its
// own, which waits for an event recorded on the backend's stream before
// each one; the backend's stream waits for the event recorded after it at
// once (blocking) or in Request.Wait (non-blocking), so neither holds the
// host, and the events are reused. They implement comm.Grouper with NCCL's
// group calls (ncclGroupStart/End), with which engine/llama all-reduces the
// gradients in buckets. A rank issues the operations of all its
// communicators in program order: NCCL requires every rank to issue them
// in one consistent order, which the tests check on the fake libraries'
// log of each rank's collectives (nccl_order_test.go). Nothing frees
// device memory or synchronises the host while a collective may be in
// flight, except Barrier and Close, which must wait.
//
// # Testing without a GPU
//
// testdata/fakecuda is a stand-in for libcuda, cuBLAS, NVRTC and NCCL that
// runs on the CPU: the same kernel sources compiled as C++, each GPU thread
// a fiber, behind the real C API; its NCCL logs every collective issued;
// its warp collectives (shuffles, and warp.cuh's mma.sync and ldmatrix)
// exchange every lane's operands and compute each lane's results by the PTX
// ISA's layouts, a switch permutes mma's layout for a test that the kernels
// depend on it, and cp.async copies land only when waited for. The tests
// build it with g++ and run the conformance suite, a Llama training step
// against the CPU backend, bf16 paths and the communicator suite through
// the backend's real bindings. The tests named TestGPU… run the same checks
// on a real GPU and skip, saying why, where there is none;
// scripts/gpu-check.sh runs them, with benchmarks against PyTorch, on a GPU
// machine.
package cuda
