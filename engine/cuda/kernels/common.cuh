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
#define DT_I8 3  // AdamW's 8-bit moments' codes (adamw.cu)

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
__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

// Vector access. The memory-bound kernels move VEC elements a thread at a
// time: one 16-byte access for bf16, two for f32 — the widest a thread
// can load in one instruction, which a scalar 2- or 4-byte load reaches
// only at a fraction of the memory's bandwidth. A thread's VEC elements
// are consecutive, and which thread gets which elements does not depend
// on the dtype or on whether the access is vectorised, so a reduction
// sums in the same order either way (a BF16 tensor's statistics are the
// F32 one's of the same values, bit for bit).
#define VEC 8

// mt_v16 is 16 bytes moved in one access (ld.global.v4 / st.global.v4).
// It is declared here rather than taken from CUDA's uint4, which the
// emulator's C++ does not have.
struct __attribute__((aligned(16))) mt_v16 {
  unsigned u[4];
};

// vec_at reports whether element i of a tensor of type dt at p starts a
// 16-byte-aligned address: whether VEC elements from i may be moved by
// load8 and store8 with vector accesses. The kernels ask it once per row
// or tensor, the same answer for the whole block.
__device__ __forceinline__ bool vec_at(const void* p, int dt, i64 i) {
  return (((unsigned long long)p + (unsigned long long)i * (dt == DT_BF16 ? 2ull : 4ull)) & 15ull) == 0;
}

// load8 reads elements [i, i+VEC) of a tensor of type dt as float into v:
// with 16-byte loads when vec (the caller has checked vec_at and that all
// VEC elements lie below n), else one by one, the elements at or past n
// as 0.
__device__ __forceinline__ void load8(float* v, const void* p, int dt, i64 i, i64 n, bool vec) {
  if (vec && dt == DT_BF16) {
    mt_v16 w = *(const mt_v16*)((const bf16*)p + i);
    MT_UNROLL
    for (int k = 0; k < 4; k++) {
      v[2 * k] = __uint_as_float(w.u[k] << 16);
      v[2 * k + 1] = __uint_as_float(w.u[k] & 0xffff0000u);
    }
    return;
  }
  if (vec) {
    mt_v16 a = *(const mt_v16*)((const float*)p + i), b = *(const mt_v16*)((const float*)p + i + 4);
    MT_UNROLL
    for (int k = 0; k < 4; k++) {
      v[k] = __uint_as_float(a.u[k]);
      v[4 + k] = __uint_as_float(b.u[k]);
    }
    return;
  }
  MT_UNROLL
  for (int k = 0; k < VEC; k++) {
    v[k] = i + k < n ? load(p, dt, i + k) : 0.0f;
  }
}

// store8 writes v into elements [i, i+VEC) of a tensor of type dt,
// rounded to it, as load8 reads them: the elements at or past n are not
// written.
__device__ __forceinline__ void store8(void* p, int dt, i64 i, i64 n, const float* v, bool vec) {
  if (vec && dt == DT_BF16) {
    mt_v16 w;
    MT_UNROLL
    for (int k = 0; k < 4; k++) {
      w.u[k] = (unsigned)f32_to_bf16(v[2 * k]) | (unsigned)f32_to_bf16(v[2 * k + 1]) << 16;
    }
    *(mt_v16*)((bf16*)p + i) = w;
    return;
  }
  if (vec) {
    mt_v16 a, b;
    MT_UNROLL
    for (int k = 0; k < 4; k++) {
      a.u[k] = __float_as_uint(v[k]);
      b.u[k] = __float_as_uint(v[4 + k]);
    }
    *(mt_v16*)((float*)p + i) = a;
    *(mt_v16*)((float*)p + i + 4) = b;
    return;
  }
  MT_UNROLL
  for (int k = 0; k < VEC; k++) {
    if (i + k < n) {
      store(p, dt, i + k, v[k]);
    }
  }
}

// kahan_add adds x into the compensated float32 sum (s, c), whose value
// is s − c: the error of a sum of k terms stays within about 2u·Σ|x|
// (u = 2⁻²⁴) instead of growing as k·u. The reductions of the
// memory-bound kernels sum in float32 with it, each thread's share in a
// fixed order, then block_sum's fixed tree: reproducible, and as close to
// the CPU backend's float64 sums as the tests ask (see rmsnorm.cu). The
// _rn operations keep the compiler from fusing or reordering them.
__device__ __forceinline__ void kahan_add(float& s, float& c, float x) {
  float y = __fsub_rn(x, c);
  float t = __fadd_rn(s, y);
  c = __fsub_rn(__fsub_rn(t, s), y);
  s = t;
}

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
