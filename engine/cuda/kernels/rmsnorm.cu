// rmsnorm.cu: RMSNorm and its backward, with HuggingFace's rounding: the
// row is normalised and rounded to float32 before the weight multiplies it.
//
// The reductions are float32 (no float64 on these paths): each thread
// sums its share of the row (VEC consecutive elements, then the next VEC
// a block further on) with compensation (kahan_add), and block_sum adds
// the threads' sums in a fixed tree. A thread's share depends on H alone,
// so the result is reproducible and the same for F32 and BF16 tensors of
// the same values. Against the CPU backend's float64 sums, a sum of
// squares of H terms (all positive) is off by at most about
// (1 + 2 + log2(RMSNORM_THREADS) + 1)·u = 13u ≈ 7.7e-7 of itself
// (u = 2⁻²⁴) whatever H — each square's rounding, a compensated share's
// 2u (which does not grow with the share's length, H/RMSNORM_THREADS up
// to 32 terms for H = 16384), the tree's 9 levels and the share's final
// s − c, 1u each — so rstd by at most half that plus its own rounding,
// about 4.5e-7: within the conformance suite's tolElem (1e-6). A plain
// float32 sum of H = 16384 terms in this order would allow (32 + 9)u ≈
// 2.4e-6. The backward's dot product Σ w·g·x is off by the same bound
// relative to Σ|w·g·x|, plus each product's two roundings, within its
// √H·tolSum.
#include "common.cuh"

// RMSNORM_THREADS is the most threads a block of rmsnorm, add_rmsnorm and
// rmsnorm_backward_dx has (the host's rmsnormThreads). A block has one
// thread a VEC elements of the row, up to this.
#define RMSNORM_THREADS 512

// rmsnorm_row normalises row blockIdx.x of x [N, h] into out and stores
// its rstd: out = x·rstd ⊙ w with rstd = 1/sqrt(mean(x²) + eps). When
// res is not null, it first adds res into x (x += res, rounded to x's
// dtype), and normalises the sum as stored: add_rmsnorm. out may be x:
// each thread rewrites only the elements it read, after the reduction
// has read them all.
__device__ __forceinline__ void rmsnorm_row(void* out, int odt, void* rstd, int rdt, void* x, int xdt,
                                            const void* res, int resdt, const void* w, int wdt, int h, float eps) {
  i64 base = (i64)blockIdx.x * h, end = base + h;
  bool vec = h % VEC == 0 && vec_at(x, xdt, base) && vec_at(out, odt, base) && vec_at(w, wdt, 0) &&
             (res == 0 || vec_at(res, resdt, base));
  float s = 0, c = 0;
  for (int j = threadIdx.x * VEC; j < h; j += blockDim.x * VEC) {
    float v[VEC];
    load8(v, x, xdt, base + j, end, vec);
    if (res != 0) {
      float r[VEC];
      load8(r, res, resdt, base + j, end, vec);
      MT_UNROLL
      for (int k = 0; k < VEC; k++) {
        v[k] = __fadd_rn(v[k], r[k]);
        // The sum as x stores it: a BF16 x normalises its rounded value.
        if (xdt == DT_BF16) {
          v[k] = bf16_to_f32(f32_to_bf16(v[k]));
        }
      }
      store8(x, xdt, base + j, end, v, vec);
    }
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      kahan_add(s, c, __fmul_rn(v[k], v[k]));
    }
  }
  float ss = block_sum(__fsub_rn(s, c));
  // One scalar a row: float64 costs nothing here, and rounds once.
  float r = (float)(1.0 / sqrt((double)ss / h + (double)eps));
  if (threadIdx.x == 0) {
    store(rstd, rdt, blockIdx.x, r);
  }
  for (int j = threadIdx.x * VEC; j < h; j += blockDim.x * VEC) {
    // The elements this thread read (or wrote) above.
    float v[VEC], g[VEC];
    load8(v, x, xdt, base + j, end, vec);
    load8(g, w, wdt, j, h, vec);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      v[k] = __fmul_rn(__fmul_rn(v[k], r), g[k]);
    }
    store8(out, odt, base + j, end, v, vec);
  }
}

// rmsnorm computes out[i] = x[i]·rstd[i] ⊙ w with
// rstd[i] = 1/sqrt(mean(x[i]²) + eps). One block per row. out may be x.
extern "C" __global__ void __launch_bounds__(RMSNORM_THREADS) rmsnorm(void* out, int odt, void* rstd, int rdt, const void* x, int xdt, const void* w, int wdt,
                                   int h, float eps) {
  rmsnorm_row(out, odt, rstd, rdt, (void*)x, xdt, 0, DT_F32, w, wdt, h, eps);
}

// add_rmsnorm adds the residual into x (the residual stream), x += res,
// then normalises the sum as rmsnorm does: the two kernels Add and
// RMSNorm, in one pass over x (engine.Backend.AddRMSNorm). out may be x
// but not res.
extern "C" __global__ void __launch_bounds__(RMSNORM_THREADS) add_rmsnorm(void* out, int odt, void* rstd, int rdt, void* x, int xdt, const void* res, int resdt,
                                       const void* w, int wdt, int h, float eps) {
  rmsnorm_row(out, odt, rstd, rdt, x, xdt, res, resdt, w, wdt, h, eps);
}

// rmsnorm_backward_dx writes, for one row per block,
//
//	dx = r·(w⊙dOut) − x·r³/H·Σ_k w_k·dOut_k·x_k
//
// in float32, the dot product summed as the header says, each element
// with one fused multiply-add. dx may be dOut.
extern "C" __global__ void __launch_bounds__(RMSNORM_THREADS) rmsnorm_backward_dx(void* dx, int dxdt, const void* dout, int gdt, const void* x, int xdt,
                                               const void* w, int wdt, const void* rstd, int rdt, int h) {
  i64 base = (i64)blockIdx.x * h, end = base + h;
  bool vec = h % VEC == 0 && vec_at(dx, dxdt, base) && vec_at(dout, gdt, base) && vec_at(x, xdt, base) &&
             vec_at(w, wdt, 0);
  float s = 0, c = 0;
  for (int j = threadIdx.x * VEC; j < h; j += blockDim.x * VEC) {
    float wv[VEC], g[VEC], xv[VEC];
    load8(wv, w, wdt, j, h, vec);
    load8(g, dout, gdt, base + j, end, vec);
    load8(xv, x, xdt, base + j, end, vec);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      kahan_add(s, c, __fmul_rn(__fmul_rn(wv[k], g[k]), xv[k]));
    }
  }
  float dot = block_sum(__fsub_rn(s, c));
  float r = load(rstd, rdt, blockIdx.x);
  // Scalars of the row, once: float64 rounds r³·dot/H once.
  float coef = (float)((double)r * r * r * dot / h);
  for (int j = threadIdx.x * VEC; j < h; j += blockDim.x * VEC) {
    float wv[VEC], g[VEC], xv[VEC];
    load8(wv, w, wdt, j, h, vec);
    load8(g, dout, gdt, base + j, end, vec);
    load8(xv, x, xdt, base + j, end, vec);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      g[k] = fmaf(__fmul_rn(r, wv[k]), g[k], -__fmul_rn(coef, xv[k]));
    }
    store8(dx, dxdt, base + j, end, g, vec);
  }
}

// rmsnorm_backward_dw_partial sums dOut ⊙ x·r over a chunk of rows for
// each column, in float32 with compensation: block (bx, by) covers VEC
// columns a thread from column (bx·blockDim.x + tid)·VEC, and rows
// [by·rows_per_chunk, (by+1)·rows_per_chunk), each row's VEC elements
// loaded at once. The chunks are fixed by the row count alone, so the
// result does not depend on the device.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) rmsnorm_backward_dw_partial(float* partial, const void* dout, int gdt, const void* x, int xdt,
                                                       const void* rstd, int rdt, i64 n, int h, int rows_per_chunk) {
  int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (c0 >= h) {
    return;
  }
  bool vec = h % VEC == 0 && vec_at(dout, gdt, 0) && vec_at(x, xdt, 0) && vec_at(partial, DT_F32, 0);
  i64 r0 = (i64)blockIdx.y * rows_per_chunk, r1 = min64(n, r0 + rows_per_chunk);
  float s[VEC], c[VEC];
  MT_UNROLL
  for (int k = 0; k < VEC; k++) {
    s[k] = 0;
    c[k] = 0;
  }
  for (i64 i = r0; i < r1; i++) {
    float g[VEC], xv[VEC];
    load8(g, dout, gdt, i * h + c0, (i + 1) * h, vec);
    load8(xv, x, xdt, i * h + c0, (i + 1) * h, vec);
    float r = load(rstd, rdt, i);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      kahan_add(s[k], c[k], __fmul_rn(__fmul_rn(g[k], xv[k]), r));
    }
  }
  MT_UNROLL
  for (int k = 0; k < VEC; k++) {
    s[k] = __fsub_rn(s[k], c[k]);
  }
  store8(partial, DT_F32, (i64)blockIdx.y * h + c0, (i64)(blockIdx.y + 1) * h, s, vec);
}

// rmsnorm_backward_dw_final adds the chunks' partial sums of each column in
// chunk order, with compensation, and adds the total into dw. A thread a
// column: the partials of a warp's columns are consecutive.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) rmsnorm_backward_dw_final(void* dw, int wdt, const float* partial, int chunks, int h) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= h) {
    return;
  }
  float s = 0, e = 0;
  for (int k = 0; k < chunks; k++) {
    kahan_add(s, e, partial[(i64)k * h + c]);
  }
  store(dw, wdt, c, __fadd_rn(load(dw, wdt, c), __fsub_rn(s, e)));
}
