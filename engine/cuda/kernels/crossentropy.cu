// crossentropy.cu: the weighted cross-entropy fused with its gradient, and
// the argmax of greedy decoding.
#include "common.cuh"

// cross_entropy computes, for row blockIdx.x of logits [N, V] with target
// t and weight w,
//
//	losses[row] = −w·log softmax(x)[t]
//	dlogits[row] = scale·w·(softmax(x) − onehot(t))   (when dlogits ≠ 0)
//
// as the CPU backend does: the row's maximum m is subtracted, the
// exponentials e_j = e^(x_j−m) are float32, the logarithm is taken in
// float64 of x_t − m exactly, and the gradient is e_j·c with c =
// scale·w/Σe rounded to float32, except at the target, whose p_t − 1
// would cancel: it is computed in float64 (one element a row). Σe is
// summed in float32 where the CPU sums in float64: each thread's share
// (VEC consecutive logits, then the next VEC a block further on) with
// compensation (kahan_add), then block_sum's fixed tree — reproducible,
// and within about (2 + 2 + log2(CE_THREADS) + 1)·u = 15u ≈ 9e-7 of the
// exact sum of the exact exponentials whatever V (all terms positive;
// u = 2⁻²⁴: expf's 2 ulp a term, a share's 2u, the tree's 10 levels, the
// share's s − c), which moves the loss by at most that much absolutely
// and each gradient by that much relatively, within the conformance
// suite's tolElem (1e-6); the CPU's float64 sum of its float32
// exponentials is off by their 1 ulp. Rows of weight 0 get a zero loss and
// gradient whatever their target; a target outside [0, V) on a weighted
// row gives NaN. dlogits may be logits: every thread reads x_t before the
// first barrier, and rewrites only its own elements after it.
// CE_THREADS is the most threads a cross_entropy block has (its launch
// bounds; the host's crossEntropyThreads).
#define CE_THREADS 1024

extern "C" __global__ void __launch_bounds__(CE_THREADS) cross_entropy(void* losses, int ldt, void* dlogits, int ddt, const void* logits, int xdt,
                                         const int* targets, const void* weights, int wdt, int V, float scale) {
  i64 row = blockIdx.x, base = row * V, end = base + V;
  float w = load(weights, wdt, row);
  int t = targets[row];
  bool vec = V % VEC == 0 && vec_at(logits, xdt, base) && (dlogits == 0 || vec_at(dlogits, ddt, base));
  if (w == 0.0f || t < 0 || t >= V) {
    // The whole block takes this branch: no barrier is skipped by some
    // threads only.
    float fill = w == 0.0f ? 0.0f : MT_NAN;
    if (threadIdx.x == 0) {
      store(losses, ldt, row, fill);
    }
    if (dlogits != 0) {
      float f[VEC];
      MT_UNROLL
      for (int k = 0; k < VEC; k++) {
        f[k] = fill;
      }
      for (int j = threadIdx.x * VEC; j < V; j += blockDim.x * VEC) {
        store8(dlogits, ddt, base + j, end, f, vec);
      }
    }
    return;
  }
  float xt = load(logits, xdt, base + t);
  float m = -MT_INF;
  for (int j = threadIdx.x * VEC; j < V; j += blockDim.x * VEC) {
    float v[VEC];
    load8(v, logits, xdt, base + j, end, vec);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      // load8's padding past V is 0, which must not raise the maximum.
      if (j + k < V) {
        m = fmaxf(m, v[k]);
      }
    }
  }
  m = block_max(m);
  float s = 0, c = 0;
  for (int j = threadIdx.x * VEC; j < V; j += blockDim.x * VEC) {
    float v[VEC];
    load8(v, logits, xdt, base + j, end, vec);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      if (j + k < V) {
        kahan_add(s, c, expf(v[k] - m));
      }
    }
  }
  double sum = block_sum(__fsub_rn(s, c));
  double zt = (double)xt - (double)m;
  if (threadIdx.x == 0) {
    store(losses, ldt, row, (float)((double)w * (log(sum) - zt)));
  }
  if (dlogits == 0) {
    return;
  }
  double cd = (double)scale * (double)w / sum;
  float cf = (float)cd;
  for (int j = threadIdx.x * VEC; j < V; j += blockDim.x * VEC) {
    float v[VEC];
    load8(v, logits, xdt, base + j, end, vec);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      v[k] = __fmul_rn(expf(v[k] - m), cf);
      if (j + k == t) {
        v[k] = (float)(exp(zt) * cd - (double)scale * (double)w);
      }
    }
    store8(dlogits, ddt, base + j, end, v, vec);
  }
}

// ARGMAX_THREADS is argmax's block size; its shared arrays hold one entry
// per thread.
#define ARGMAX_THREADS 256

// better reports whether candidate (v, i) beats (bv, bi) for argmax: a NaN
// beats every number, and the lowest index wins among NaNs and among equal
// numbers. An index of −1 is no candidate at all.
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
  if (i < 0) {
    return false;
  }
  if (bi < 0) {
    return true;
  }
  bool vn = v != v, bn = bv != bv;
  if (vn != bn) {
    return vn;
  }
  if (vn || v == bv) {
    return i < bi;
  }
  return v > bv;
}

// argmax writes into out[row] the index of the largest element of row
// blockIdx.x of logits [N, V]: the lowest index on ties, the first NaN if
// there is one (as torch.argmax). Each thread scans a strided share of the
// row, then a tree in shared memory picks among the threads, in a fixed
// order. Launched with ARGMAX_THREADS threads.
extern "C" __global__ void __launch_bounds__(ARGMAX_THREADS) argmax(int* out, const void* logits, int dt, int V) {
  __shared__ float best_v[ARGMAX_THREADS];
  __shared__ int best_i[ARGMAX_THREADS];
  i64 base = (i64)blockIdx.x * V;
  float bv = 0;
  int bi = -1;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    float v = load(logits, dt, base + j);
    if (better(v, j, bv, bi)) {
      bv = v;
      bi = j;
    }
  }
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if ((int)threadIdx.x < half) {
      int o = threadIdx.x + half;
      if (better(best_v[o], best_i[o], best_v[threadIdx.x], best_i[threadIdx.x])) {
        best_v[threadIdx.x] = best_v[o];
        best_i[threadIdx.x] = best_i[o];
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    out[blockIdx.x] = best_i[0];
  }
}
