// elementwise.cu: casts, sums and scalings of whole tensors. Each runs as a
// grid-stride loop (any grid size covers any n) and rounds each result once
// to float32 with the _rn intrinsics, which the compiler never fuses into
// multiply-adds: the results are the CPU backend's, bit for bit.
#include "common.cuh"

// The elementwise kernels below take VEC elements a thread at a time
// (grid-stride over chunks of VEC), with 16-byte accesses when every
// operand is 16-byte aligned (vec_at of element 0: a chunk starts VEC
// elements, 16 or 32 bytes, after the last) and the chunk is whole; the
// last, partial chunk and unaligned views go element by element. Each
// element's arithmetic is the same on either path.

// vec_chunks is the number of VEC-element chunks of n elements.
__device__ __forceinline__ i64 vec_chunks(i64 n) { return (n + VEC - 1) / VEC; }

// cast converts n elements between F32 and BF16 (either direction, or a
// plain copy when the types agree).
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) cast(void* dst, int ddt, const void* src, int sdt, i64 n) {
  bool vec = vec_at(dst, ddt, 0) && vec_at(src, sdt, 0);
  for (i64 c = global_thread(); c < vec_chunks(n); c += grid_threads()) {
    i64 i = c * VEC;
    bool full = vec && i + VEC <= n;
    float v[VEC];
    load8(v, src, sdt, i, n, full);
    store8(dst, ddt, i, n, v, full);
  }
}

// add computes dst = a + b; dst may be a or b.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) add(void* dst, int ddt, const void* a, int adt, const void* b, int bdt, i64 n) {
  bool vec = vec_at(dst, ddt, 0) && vec_at(a, adt, 0) && vec_at(b, bdt, 0);
  for (i64 c = global_thread(); c < vec_chunks(n); c += grid_threads()) {
    i64 i = c * VEC;
    bool full = vec && i + VEC <= n;
    float x[VEC], y[VEC];
    load8(x, a, adt, i, n, full);
    load8(y, b, bdt, i, n, full);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      x[k] = __fadd_rn(x[k], y[k]);
    }
    store8(dst, ddt, i, n, x, full);
  }
}

// axpy computes dst += alpha·x, the product rounded before the sum.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) axpy(void* dst, int ddt, float alpha, const void* x, int xdt, i64 n) {
  bool vec = vec_at(dst, ddt, 0) && vec_at(x, xdt, 0);
  for (i64 c = global_thread(); c < vec_chunks(n); c += grid_threads()) {
    i64 i = c * VEC;
    bool full = vec && i + VEC <= n;
    float d[VEC], v[VEC];
    load8(d, dst, ddt, i, n, full);
    load8(v, x, xdt, i, n, full);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      d[k] = __fadd_rn(d[k], __fmul_rn(alpha, v[k]));
    }
    store8(dst, ddt, i, n, d, full);
  }
}

// scale computes x *= alpha.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) scale(void* x, int dt, float alpha, i64 n) {
  bool vec = vec_at(x, dt, 0);
  for (i64 c = global_thread(); c < vec_chunks(n); c += grid_threads()) {
    i64 i = c * VEC;
    bool full = vec && i + VEC <= n;
    float v[VEC];
    load8(v, x, dt, i, n, full);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      v[k] = __fmul_rn(v[k], alpha);
    }
    store8(x, dt, i, n, v, full);
  }
}

// scale_matrix computes C = beta·C for batch row-major rows×cols matrices
// with row stride ld, stride elements apart: a GEMM with K = 0. With
// beta = 0 it writes zeros, so that NaNs in C do not leak (as BLAS).
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) scale_matrix(void* c, int dt, float beta, int batch, int rows, int cols, i64 ld, i64 stride) {
  i64 n = (i64)batch * rows * cols;
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    i64 b = i / ((i64)rows * cols), r = i / cols % rows, col = i % cols;
    i64 at = b * stride + r * ld + col;
    store(c, dt, at, beta == 0.0f ? 0.0f : __fmul_rn(beta, load(c, dt, at)));
  }
}

// WIDEN_THREADS is widen_bf16_matrix's block (the host's widenThreads).
#define WIDEN_THREADS 256

// widen_bf16_matrix widens batch row-major rows×cols bf16 matrices, with
// row stride ld and stride elements apart, into dst packed: element (r, c)
// of matrix b at (b·rows + r)·cols + c. Exact: a GEMM's float32 A times a
// bf16 B is the float32 product with dst, which cuBLAS multiplies.
extern "C" __global__ void __launch_bounds__(WIDEN_THREADS)
    widen_bf16_matrix(float* dst, const void* src, int batch, int rows, int cols, i64 ld, i64 stride) {
  i64 n = (i64)batch * rows * cols;
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    i64 b = i / ((i64)rows * cols), r = i / cols % rows, col = i % cols;
    dst[i] = bf16_to_f32(((const bf16*)src)[b * stride + r * ld + col]);
  }
}

// SUMSQ_BLOCK is the number of elements each partial sum of sum_squares
// covers. It is fixed, not derived from the grid, so the result does not
// depend on the device; it is the CPU backend's block length too.
#define SUMSQ_BLOCK 16384

// sum_squares_partial writes into partial[b] the sum of x² (of x, when
// squares is 0) over elements [b·SUMSQ_BLOCK, (b+1)·SUMSQ_BLOCK), in
// float64. One block per partial.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) sum_squares_partial(double* partial, const void* x, int dt, i64 n, int squares) {
  i64 lo = (i64)blockIdx.x * SUMSQ_BLOCK, hi = min64(n, lo + SUMSQ_BLOCK);
  double s = 0;
  for (i64 i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    double v = load(x, dt, i);
    s += squares ? v * v : v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = s;
  }
}

// sum_squares_final adds the partial sums in float64 and stores the total,
// rounded to float32, in dst[0]. One block.
// SUMSQ_THREADS is sum_squares_final's block (the host's sumSquaresThreads).
#define SUMSQ_THREADS 1024

extern "C" __global__ void __launch_bounds__(SUMSQ_THREADS) sum_squares_final(void* dst, int ddt, const double* partial, int parts) {
  double s = 0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) {
    s += partial[i];
  }
  s = block_sum(s);
  if (threadIdx.x == 0) {
    store(dst, ddt, 0, (float)s);
  }
}

// sum_squares_multi_partial and sum_squares_multi_final are
// sum_squares_partial and sum_squares_final over many tensors
// (engine.Backend.SumSquaresMulti), each tensor's result bit for bit
// theirs: the same blocks of SUMSQ_BLOCK elements, each summed by a block
// of the same threads in the same order, and each tensor's block sums
// added as sum_squares_final adds them. table holds SUMSQ_FIELDS i64 a
// tensor: its address, its length, its element type, and the index of its
// first block in the concatenation of every tensor's blocks (an empty
// tensor has one, of sum 0, as in sum_squares_partial). The partial
// kernel's blocks take the blocks in turn and find a block's tensor by
// bisection of the first-block indices, as adamw_multi finds its chunks'.
#define SUMSQ_FIELDS 4

extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS)
    sum_squares_multi_partial(double* partial, const i64* table, int ntensors, i64 nparts) {
  for (i64 c = blockIdx.x; c < nparts; c += gridDim.x) {
    const i64* t = table + (i64)table_entry(table, ntensors, SUMSQ_FIELDS, 3, c) * SUMSQ_FIELDS;
    const void* x = (const void*)t[0];
    i64 n = t[1];
    int dt = (int)t[2];
    i64 start = (c - t[3]) * SUMSQ_BLOCK, end = min64(n, start + SUMSQ_BLOCK);
    double s = 0;
    for (i64 i = start + threadIdx.x; i < end; i += blockDim.x) {
      double v = load(x, dt, i);
      s += v * v;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) {
      partial[c] = s;
    }
  }
}

// sum_squares_multi_final stores tensor blockIdx.x's total, rounded to
// float32, in dst[blockIdx.x]. One block a tensor.
extern "C" __global__ void __launch_bounds__(SUMSQ_THREADS)
    sum_squares_multi_final(void* dst, int ddt, const i64* table, const double* partial) {
  const i64* t = table + (i64)blockIdx.x * SUMSQ_FIELDS;
  i64 n = t[1], first = t[3];
  int parts = n == 0 ? 1 : (int)((n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK);
  double s = 0;
  for (int i = threadIdx.x; i < parts; i += blockDim.x) {
    s += partial[first + i];
  }
  s = block_sum(s);
  if (threadIdx.x == 0) {
    store(dst, ddt, blockIdx.x, (float)s);
  }
}
