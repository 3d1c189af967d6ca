// attention.cu: the softmax steps of causal attention (the products around
// them are cuBLAS GEMMs, issued by attention.go) and attention against a
// key/value cache for decoding.
#include "common.cuh"

// causal_softmax replaces each row of scores [rows, T] by its softmax over
// the keys j ≤ i, where i = row mod T is the row's query position, and
// zeroes the masked rest. One block per row. The maximum is subtracted
// first; each thread keeps the exponentials of its own elements in place
// and scales them by the reciprocal of the block's sum.
extern "C" __global__ void causal_softmax(void* p, int dt, int T) {
  i64 base = (i64)blockIdx.x * T;
  int i = (int)((i64)blockIdx.x % T);
  float m = -MT_INF;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    m = fmaxf(m, load(p, dt, base + j));
  }
  m = block_max(m);
  float sum = 0;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    float e = expf(load(p, dt, base + j) - m);
    store(p, dt, base + j, e);
    sum += e;
  }
  sum = block_sum(sum);
  float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < T; j += blockDim.x) {
    store(p, dt, base + j, j <= i ? __fmul_rn(load(p, dt, base + j), inv) : 0.0f);
  }
}

// causal_softmax_backward turns rows of dP into dS in place, given the
// probabilities P: dS_j = P_j·(dP_j − Σ_k P_k·dP_k) for j ≤ i, zero beyond
// the diagonal. ds holds matrices of T×T rows back to back; matrix m of ds
// goes with the matrix p_stride elements into p (the probabilities of one
// query head in [B, heads, T, T]). One block per row.
extern "C" __global__ void causal_softmax_backward(void* ds, int sdt, const void* p, int pdt, int T, i64 p_stride) {
  i64 r = blockIdx.x;
  i64 mat = r / T;
  int i = (int)(r % T);
  i64 dbase = r * T, pbase = mat * p_stride + (i64)i * T;
  float dot = 0;
  for (int j = threadIdx.x; j <= i; j += blockDim.x) {
    dot += load(p, pdt, pbase + j) * load(ds, sdt, dbase + j);
  }
  dot = block_sum(dot);
  for (int j = threadIdx.x; j < T; j += blockDim.x) {
    float v = 0.0f;
    if (j <= i) {
      v = __fmul_rn(load(p, pdt, pbase + j), __fsub_rn(load(ds, sdt, dbase + j), dot));
    }
    store(ds, sdt, dbase + j, v);
  }
}

// attention_kv is decoding attention against a cache. Block item0 +
// blockIdx.x is query (b, i, h) of q [B, n, H, D]; it sits at position
// start[b]+i and attends to keys 0..L−1 of kc [B, Tmax, KV, D], L =
// start[b]+i+1, through key/value head h/(H/KV). scores holds Tmax floats
// per block of this launch.
//
// Each warp takes every (blockDim/32)-th key and computes its score as a
// dot product over D (lanes over D, a butterfly sum); then the block
// softmaxes the L scores, and thread d sums p_j·v[j][d] over the keys in
// order. Cache rows from L on are never read.
extern "C" __global__ void attention_kv(void* out, int odt, const void* q, int qdt, const void* kc, int kdt, const void* vc,
                                        int vdt, const int* start, float* scores, i64 item0, int n, int H, int KV, int D,
                                        int Tmax, float scale) {
  i64 item = item0 + blockIdx.x;
  int h = (int)(item % H);
  int i = (int)(item / H % n);
  i64 b = item / ((i64)H * n);
  int kv = h / (H / KV);
  int L = start[b] + i + 1;
  float* sc = scores + (i64)blockIdx.x * Tmax;
  i64 qoff = item * D;  // ((b·n + i)·H + h)·D
  i64 kvld = (i64)KV * D;
  i64 kvoff = b * Tmax * kvld + (i64)kv * D;

  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int j0 = 0; j0 < L; j0 += warps) {
    // Every lane of a warp runs the loop the same number of times, so the
    // butterfly sum sees the whole warp.
    int j = j0 + warp;
    float s = 0;
    if (j < L) {
      for (int d = lane; d < D; d += 32) {
        s += load(q, qdt, qoff + d) * load(kc, kdt, kvoff + j * kvld + d);
      }
    }
    s = warp_sum(s);
    if (j < L && lane == 0) {
      sc[j] = s * scale;
    }
  }
  __syncthreads();

  float m = -MT_INF;
  for (int j = threadIdx.x; j < L; j += blockDim.x) {
    m = fmaxf(m, sc[j]);
  }
  m = block_max(m);
  float sum = 0;
  for (int j = threadIdx.x; j < L; j += blockDim.x) {
    float e = expf(sc[j] - m);
    sc[j] = e;
    sum += e;
  }
  sum = block_sum(sum);
  float inv = 1.0f / sum;
  __syncthreads();

  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int j = 0; j < L; j++) {
      acc += __fmul_rn(sc[j], inv) * load(vc, vdt, kvoff + j * kvld + d);
    }
    store(out, odt, qoff + d, acc);
  }
}
