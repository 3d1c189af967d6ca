// rmsnorm.cu: RMSNorm and its backward, with HuggingFace's rounding: the
// row is normalised and rounded to float32 before the weight multiplies it.
#include "common.cuh"

// rmsnorm computes out[i] = x[i]·rstd[i] ⊙ w with
// rstd[i] = 1/sqrt(mean(x[i]²) + eps), the mean accumulated in float64.
// One block per row. out may be x: each thread rewrites only the elements
// it read, after the reduction has read them all.
// RMSNORM_THREADS is the most threads a block of rmsnorm and
// rmsnorm_backward_dx has (the host's rmsnormThreads).
#define RMSNORM_THREADS 512

extern "C" __global__ void __launch_bounds__(RMSNORM_THREADS) rmsnorm(void* out, int odt, void* rstd, int rdt, const void* x, int xdt, const void* w, int wdt,
                                   int h, float eps) {
  i64 base = (i64)blockIdx.x * h;
  double ss = 0;
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    double v = load(x, xdt, base + j);
    ss += v * v;
  }
  ss = block_sum(ss);
  float r = (float)(1.0 / sqrt(ss / h + (double)eps));
  if (threadIdx.x == 0) {
    store(rstd, rdt, blockIdx.x, r);
  }
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    store(out, odt, base + j, __fmul_rn(__fmul_rn(load(x, xdt, base + j), r), load(w, wdt, j)));
  }
}

// rmsnorm_backward_dx writes, for one row per block,
//
//	dx = r·(w⊙dOut) − x·r³/H·Σ_k w_k·dOut_k·x_k
//
// in float64, rounded once. dx may be dOut.
extern "C" __global__ void __launch_bounds__(RMSNORM_THREADS) rmsnorm_backward_dx(void* dx, int dxdt, const void* dout, int gdt, const void* x, int xdt,
                                               const void* w, int wdt, const void* rstd, int rdt, int h) {
  i64 base = (i64)blockIdx.x * h;
  double dot = 0;
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    dot += (double)load(w, wdt, j) * (double)load(dout, gdt, base + j) * (double)load(x, xdt, base + j);
  }
  dot = block_sum(dot);
  double r = load(rstd, rdt, blockIdx.x);
  double coef = r * r * r * dot / h;
  for (int j = threadIdx.x; j < h; j += blockDim.x) {
    double g = load(dout, gdt, base + j), xv = load(x, xdt, base + j);
    store(dx, dxdt, base + j, (float)(r * (double)load(w, wdt, j) * g - coef * xv));
  }
}

// rmsnorm_backward_dw_partial sums dOut ⊙ x·r over a chunk of rows for each
// column, in float64: block (bx, by) covers columns bx·blockDim.x + tid
// and rows [by·rows_per_chunk, (by+1)·rows_per_chunk). The chunks are
// fixed by the row count alone, so the result does not depend on the
// device.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) rmsnorm_backward_dw_partial(double* partial, const void* dout, int gdt, const void* x, int xdt,
                                                       const void* rstd, int rdt, i64 n, int h, int rows_per_chunk) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= h) {
    return;
  }
  i64 r0 = (i64)blockIdx.y * rows_per_chunk, r1 = min64(n, r0 + rows_per_chunk);
  double acc = 0;
  for (i64 i = r0; i < r1; i++) {
    acc += (double)load(dout, gdt, i * h + c) * (double)load(x, xdt, i * h + c) * (double)load(rstd, rdt, i);
  }
  partial[(i64)blockIdx.y * h + c] = acc;
}

// rmsnorm_backward_dw_final adds the chunks' partial sums of each column in
// chunk order, in float64, and adds the total (rounded) into dw.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) rmsnorm_backward_dw_final(void* dw, int wdt, const double* partial, int chunks, int h) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= h) {
    return;
  }
  double acc = 0;
  for (int k = 0; k < chunks; k++) {
    acc += partial[(i64)k * h + c];
  }
  store(dw, wdt, c, __fadd_rn(load(dw, wdt, c), (float)acc));
}
