// common.cuh: types, element access and block reductions shared by every
// kernel. The kernels are compiled at run time by NVRTC, without the CUDA
// headers, so this file declares what they need itself. It is also
// compiled as plain C++ by the tests' emulator (engine/cuda/testdata), so
// it uses nothing beyond CUDA's built-in functions.
#ifndef MEMTRAIN_COMMON_CUH
#define MEMTRAIN_COMMON_CUH

typedef long long i64;
typedef unsigned short bf16;

// Element types, numbered as engine.DType numbers them (a test checks).
#define DT_F32 0
#define DT_BF16 1

// ELEMENT_THREADS is the block of the kernels launched with at most 256
// threads (the host's elementThreads and the launches' block1(256) and
// rowThreads(…, 256)): their __launch_bounds__, which the host checks at
// every launch (kernelBounds) and the NVRTC test against the compiled
// kernels' attributes.
#define ELEMENT_THREADS 256

// MT_UNROLL unrolls the loop after it fully when compiled for a GPU, so
// that the per-thread arrays it indexes (attention's accumulators) live
// in registers rather than in local memory, which a loop the compiler
// keeps rolled forces them into (the NVRTC test fails on a kernel with a
// stack frame). The emulator's C++ ignores it.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MT_UNROLL _Pragma("unroll")
#else
#define MT_UNROLL
#endif

#define MT_INF __int_as_float(0x7f800000)
#define MT_NAN __int_as_float(0x7fffffff)

// bf16 is the top half of a float32: widening is a shift, exact.
__device__ __forceinline__ float bf16_to_f32(bf16 h) {
  return __uint_as_float(((unsigned)h) << 16);
}

// f32_to_bf16 rounds to nearest, ties to even, as the host does
// (checkpoints.Float32ToBF16); NaN stays a (quiet) NaN.
__device__ __forceinline__ bf16 f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    return (bf16)((u >> 16) | 0x40u);
  }
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16)(u >> 16);
}

// load and store read and write element i of a tensor of element type dt
// (DT_F32 or DT_BF16) as float. The type is a kernel argument rather than
// a template parameter so that one kernel serves every mix of F32 and BF16
// tensors; the branch is the same for every thread, so it costs nothing
// next to the memory access.
__device__ __forceinline__ float load(const void* p, int dt, i64 i) {
  if (dt == DT_BF16) {
    return bf16_to_f32(((const bf16*)p)[i]);
  }
  return ((const float*)p)[i];
}

__device__ __forceinline__ void store(void* p, int dt, i64 i, float v) {
  if (dt == DT_BF16) {
    ((bf16*)p)[i] = f32_to_bf16(v);
  } else {
    ((float*)p)[i] = v;
  }
}

__device__ __forceinline__ i64 min64(i64 a, i64 b) { return a < b ? a : b; }

// table_entry is the multi-tensor kernels' lookup (adamw_multi's chunks,
// sum_squares_multi_partial's blocks): the last of the n entries of a
// table of fields i64 each whose first unit, column col, is ≤ c — the
// tensor that unit c of the concatenation of every tensor's units belongs
// to — by bisection.
__device__ __forceinline__ int table_entry(const i64* table, int n, int fields, int col, i64 c) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (table[(i64)mid * fields + col] <= c) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// The index of this thread in a one-dimensional grid, and the number of
// threads in it, for grid-stride loops.
__device__ __forceinline__ i64 global_thread() {
  return (i64)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ i64 grid_threads() {
  return (i64)gridDim.x * blockDim.x;
}

// warp_sum adds v over the 32 lanes of a warp and gives every lane the
// total. The butterfly order is fixed, so the result is reproducible.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, o);
  }
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

// block_sum adds v over the block and gives every thread the total. Every
// thread of the block must call it (blockDim.x a multiple of 32, at most
// 1024). The first barrier keeps a fast warp from overwriting the partial
// sums of a previous call before every warp has read them.
template <typename T>
__device__ T block_sum(T v) {
  __shared__ T partial[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) {
    partial[warp] = v;
  }
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? partial[lane] : (T)0;
  return warp_sum(v);
}

// block_max is block_sum for the maximum. NaNs are ignored, as fmaxf
// ignores them; the kernels that use it let a NaN show through their sums.
__device__ float block_max(float v) {
  __shared__ float partial[32];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) {
    partial[warp] = v;
  }
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? partial[lane] : -MT_INF;
  return warp_max(v);
}

#endif  // MEMTRAIN_COMMON_CUH
