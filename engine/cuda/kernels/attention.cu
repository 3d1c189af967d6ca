// attention.cu: causal self-attention without the T×T probabilities
// (forward and backward, FlashAttention-2 style) and attention against a
// key/value cache for decoding.
#include "common.cuh"

// Causal self-attention, FlashAttention-2 style: the forward keeps a
// running maximum, sum and output per query row over tiles of keys and
// stores only each row's log-sum-exp; the backward recomputes the
// probabilities tile by tile. Query t sees the keys (t − W, t] of a
// sliding window W (W = T for plain causal attention, whose window holds
// every key up to t). Only tiles on or below the diagonal and within
// reach of a row's window are visited, and the query heads of a key/value head's group are packed
// into one set of rows — packed row p of the pair (b, kv) is query head
// kv·G + p mod G at position p / G — so that they share every key/value
// tile. Every sum runs in a fixed order (no atomics): the results are
// reproducible.
//
// A block of FA_THREADS threads holds accumulators for R rows of D
// (R·D ≤ FA_THREADS·FA_ACC, R ≤ FA_ROWS; the host picks R from D), and
// computes a tile's (row, key) dot products through shared memory, D in
// chunks of FA_DC.
#define FA_THREADS 128
#define FA_TILE 32
#define FA_DC 32
#define FA_ROWS 16
#define FA_ACC 16
#define FA_PAIRS 4  // FA_ROWS · FA_TILE / FA_THREADS

// fa_sees reports whether the query at position t sees key j: j in
// (t − W, t], that is 0 ≤ t − j < W, one unsigned comparison (as cheap as
// the causal test alone, and the backward kernels' registers stay as
// they were).
__device__ __forceinline__ bool fa_sees(int j, int t, int W) { return (unsigned)(t - j) < (unsigned)W; }

// fa_first_key is the first key of the first FA_TILE-aligned key tile
// that the rows from position t0 on reach: the tile of t0 − W + 1.
__device__ __forceinline__ int fa_first_key(int t0, int W) { return imax(0, t0 - W + 1) / FA_TILE * FA_TILE; }

// fa_dots sets, for the (a, b) pairs this thread owns (pair e·FA_THREADS
// + threadIdx.x of na × nb, a = pair / nb, b = pair % nb, na·nb ≤
// FA_PAIRS·FA_THREADS), acc[e] = Σ_d A[aoff[a] + d]·B[boff[b] + d], the
// rows staged through shared memory (as, bs) FA_DC columns at a time, d
// summed in order. aoff and boff are shared arrays of element offsets.
// Every thread of the block calls it: it starts with a barrier, so the
// caller may rewrite as, bs and the offsets' previous contents before.
__device__ __forceinline__ void fa_dots(float* acc, const void* A, int adt, const i64* aoff, int na, const void* B, int bdt,
                        const i64* boff, int nb, int D, float (*as)[FA_DC + 1], float (*bs)[FA_DC + 1]) {
  MT_UNROLL
  for (int e = 0; e < FA_PAIRS; e++) {
    acc[e] = 0.0f;
  }
  for (int d0 = 0; d0 < D; d0 += FA_DC) {
    int dc = imin(FA_DC, D - d0);
    __syncthreads();
    for (int i = threadIdx.x; i < FA_TILE * FA_DC; i += FA_THREADS) {
      int r = i / FA_DC, d = i % FA_DC;
      as[r][d] = r < na && d < dc ? load(A, adt, aoff[r] + d0 + d) : 0.0f;
      bs[r][d] = r < nb && d < dc ? load(B, bdt, boff[r] + d0 + d) : 0.0f;
    }
    __syncthreads();
    MT_UNROLL
    for (int e = 0; e < FA_PAIRS; e++) {
      int pair = e * FA_THREADS + threadIdx.x;
      if (pair < na * nb) {
        int a = pair / nb, b = pair % nb;
        float s = acc[e];
        for (int d = 0; d < dc; d++) {
          s += as[a][d] * bs[b][d];
        }
        acc[e] = s;
      }
    }
  }
}

// fa_rows fills the shared offsets and positions of the packed rows
// [p0, p0 + nr) of the pair (b, kv): qoff the element offset of each row
// in q [B, T, H, D], qpos its position, and sidx its index in a [B, H, T]
// statistic. Called by every thread; rows past nr are left alone.
__device__ void fa_rows(i64* qoff, int* qpos, i64* sidx, i64 b, int kv, i64 p0, int nr, int T, int H, int G, int D) {
  int r = threadIdx.x;
  if (r < nr) {
    i64 p = p0 + r;
    int t = (int)(p / G), h = kv * G + (int)(p % G);
    qoff[r] = ((b * T + t) * H + h) * (i64)D;
    qpos[r] = t;
    sidx[r] = (b * H + h) * (i64)T + t;
  }
}

// flash_attention is the forward: block blockIdx.x takes the pair (b, kv)
// = divmod(blockIdx.x / tiles, KV) and its packed rows [p0, p0 + R), tiles
// = ⌈T·G/R⌉. For each key tile from the first its first row's window
// reaches up to the block's last position it computes S = q·kᵀ·scale,
// then per row (a warp per row, a lane per key) m' = max(m, rowmax S),
// P = e^(S − m') (zero outside the row's window), l = l·e^(m−m') + rowsum
// P, and o = o·e^(m−m') + P·v. It writes out = o/l and lse = m + log l
// (F32 [B, H, T]).
extern "C" __global__ void __launch_bounds__(FA_THREADS)
    flash_attention(void* out, int odt, float* lse, const void* q, int qdt, const void* k, int kdt, const void* v,
                    int vdt, int T, int H, int KV, int D, int R, int W, float scale) {
  __shared__ float as[FA_TILE][FA_DC + 1], bs[FA_TILE][FA_DC + 1];
  __shared__ float ps[FA_ROWS][FA_TILE];
  __shared__ i64 qoff[FA_ROWS], sidx[FA_ROWS], koff[FA_TILE];
  __shared__ int qpos[FA_ROWS];
  __shared__ float m_s[FA_ROWS], l_s[FA_ROWS], alpha_s[FA_ROWS];
  int G = H / KV;
  i64 rows = (i64)T * G;
  i64 tiles = (rows + R - 1) / R;
  i64 pair = blockIdx.x / tiles, p0 = (blockIdx.x % tiles) * R;
  i64 b = pair / KV;
  int kv = (int)(pair % KV);
  int nr = (int)min64(R, rows - p0);
  fa_rows(qoff, qpos, sidx, b, kv, p0, nr, T, H, G, D);
  if ((int)threadIdx.x < FA_ROWS) {
    m_s[threadIdx.x] = -MT_INF;
    l_s[threadIdx.x] = 0.0f;
  }
  i64 kvbase = b * T * KV * D + (i64)kv * D, ldk = (i64)KV * D;
  int last = (int)((p0 + nr - 1) / G);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float o[FA_ACC];
  MT_UNROLL
  for (int e = 0; e < FA_ACC; e++) {
    o[e] = 0.0f;
  }
  for (int k0 = fa_first_key((int)(p0 / G), W); k0 <= last; k0 += FA_TILE) {
    int nk = imin(FA_TILE, last + 1 - k0);
    __syncthreads();  // the previous tile's P·v has read koff and ps
    if ((int)threadIdx.x < nk) {
      koff[threadIdx.x] = kvbase + (k0 + (i64)threadIdx.x) * ldk;
    }
    float s[FA_PAIRS];
    fa_dots(s, q, qdt, qoff, nr, k, kdt, koff, nk, D, as, bs);
    MT_UNROLL
    for (int e = 0; e < FA_PAIRS; e++) {
      int pi = e * FA_THREADS + threadIdx.x;
      if (pi < nr * nk) {
        ps[pi / nk][pi % nk] = s[e] * scale;
      }
    }
    __syncthreads();
    for (int r = warp; r < nr; r += FA_THREADS / 32) {
      bool seen = lane < nk && fa_sees(k0 + lane, qpos[r], W);
      float x = seen ? ps[r][lane] : -MT_INF;
      float m = m_s[r];
      float mn = fmaxf(m, warp_max(x));
      float p = seen ? expf(x - mn) : 0.0f;
      float sum = warp_sum(p);
      ps[r][lane] = p;
      if (lane == 0) {
        // The first tile a row sees a key in finds m = −∞: alpha = 0 on
        // a zero o. Before it (a window's first tiles may hold none of
        // the row's keys) m' is −∞ too: alpha 1 on the zero o and l.
        float alpha = mn == -MT_INF ? 1.0f : expf(m - mn);
        alpha_s[r] = alpha;
        l_s[r] = l_s[r] * alpha + sum;
        m_s[r] = mn;
      }
    }
    __syncthreads();
    MT_UNROLL
    for (int e = 0; e < FA_ACC; e++) {
      int idx = e * FA_THREADS + threadIdx.x;
      if (idx < nr * D) {
        int r = idx / D, d = idx % D;
        float acc = o[e] * alpha_s[r];
        for (int j = 0; j < nk; j++) {
          acc += ps[r][j] * load(v, vdt, koff[j] + d);
        }
        o[e] = acc;
      }
    }
  }
  MT_UNROLL
  for (int e = 0; e < FA_ACC; e++) {
    int idx = e * FA_THREADS + threadIdx.x;
    if (idx < nr * D) {
      int r = idx / D, d = idx % D;
      store(out, odt, qoff[r] + d, o[e] / l_s[r]);
    }
  }
  if ((int)threadIdx.x < nr) {
    int r = threadIdx.x;
    lse[sidx[r]] = (float)((double)m_s[r] + log((double)l_s[r]));
  }
}

// attention_row_dot writes delta[(b·H + h)·T + t] = Σ_d dout·out over row
// (b·T + t)·H + h of [B, T, H, D]: the backward's rowsum(dO ∘ O). A warp
// per row, lanes over d, a butterfly sum.
extern "C" __global__ void __launch_bounds__(FA_THREADS)
    attention_row_dot(float* delta, const void* dout, int ddt, const void* out, int odt, i64 nrows, int T, int H,
                      int D) {
  int lane = threadIdx.x & 31;
  i64 row = (i64)blockIdx.x * (FA_THREADS / 32) + (threadIdx.x >> 5);
  float s = 0.0f;
  if (row < nrows) {
    for (int d = lane; d < D; d += 32) {
      s += load(dout, ddt, row * D + d) * load(out, odt, row * D + d);
    }
  }
  s = warp_sum(s);
  if (row < nrows && lane == 0) {
    i64 h = row % H, t = row / H % T, b = row / ((i64)H * T);
    delta[(b * H + h) * T + t] = s;
  }
}

// flash_attention_backward_dkv writes dk and dv of R keys: block
// blockIdx.x takes the pair (b, kv) = divmod(blockIdx.x / tiles, KV), tiles
// = ⌈T/R⌉, and keys [k0, k0 + R). It walks the pair's packed query rows
// from position k0 to the last whose window reaches the block's last key,
// FA_TILE at a time, recomputing P = e^(q·kᵀ·scale − lse) and dS = P ⊙
// (dout·vᵀ − delta), and sums dv += Pᵀ·dout and dk += dSᵀ·q·scale over
// the rows in order. dk and dv are overwritten.
extern "C" __global__ void __launch_bounds__(FA_THREADS)
    flash_attention_backward_dkv(void* dk, int dkt, void* dv, int dvt, const void* dout, int ddt, const void* q,
                                 int qdt, const void* k, int kdt, const void* v, int vdt, const float* lse,
                                 const float* delta, int T, int H, int KV, int D, int R, int W, float scale) {
  __shared__ float as[FA_TILE][FA_DC + 1], bs[FA_TILE][FA_DC + 1];
  __shared__ float ps[FA_TILE][FA_ROWS], dss[FA_TILE][FA_ROWS];
  __shared__ i64 qoff[FA_TILE], sidx[FA_TILE], koff[FA_ROWS];
  __shared__ int qpos[FA_TILE];
  int G = H / KV;
  i64 tiles = (T + R - 1) / R;
  i64 pair = blockIdx.x / tiles;
  int k0 = (int)(blockIdx.x % tiles) * R;
  i64 b = pair / KV;
  int kv = (int)(pair % KV);
  int nk = imin(R, T - k0);
  i64 kvbase = b * T * KV * D + (i64)kv * D, ldk = (i64)KV * D;
  if ((int)threadIdx.x < nk) {
    koff[threadIdx.x] = kvbase + (k0 + (i64)threadIdx.x) * ldk;
  }
  float dka[FA_ACC], dva[FA_ACC];
  MT_UNROLL
  for (int e = 0; e < FA_ACC; e++) {
    dka[e] = 0.0f;
    dva[e] = 0.0f;
  }
  // Query t sees key k0 + nk − 1 iff t < k0 + nk − 1 + W: the rows of
  // later positions see none of the block's keys.
  i64 rows = (i64)imin(T, k0 + nk - 1 + W) * G;
  for (i64 p0 = (i64)k0 * G; p0 < rows; p0 += FA_TILE) {
    int nq = (int)min64(FA_TILE, rows - p0);
    __syncthreads();  // the previous rows' sums have read qoff, ps and dss
    fa_rows(qoff, qpos, sidx, b, kv, p0, nq, T, H, G, D);
    float s[FA_PAIRS], dp[FA_PAIRS];
    fa_dots(s, q, qdt, qoff, nq, k, kdt, koff, nk, D, as, bs);
    fa_dots(dp, dout, ddt, qoff, nq, v, vdt, koff, nk, D, as, bs);
    MT_UNROLL
    for (int e = 0; e < FA_PAIRS; e++) {
      int pi = e * FA_THREADS + threadIdx.x;
      if (pi < nq * nk) {
        int r = pi / nk, j = pi % nk;
        float p = fa_sees(k0 + j, qpos[r], W) ? expf(s[e] * scale - lse[sidx[r]]) : 0.0f;
        ps[r][j] = p;
        dss[r][j] = p * (dp[e] - delta[sidx[r]]);
      }
    }
    __syncthreads();
    MT_UNROLL
    for (int e = 0; e < FA_ACC; e++) {
      int idx = e * FA_THREADS + threadIdx.x;
      if (idx < nk * D) {
        int j = idx / D, d = idx % D;
        float a = dka[e], c = dva[e];
        for (int r = 0; r < nq; r++) {
          c += ps[r][j] * load(dout, ddt, qoff[r] + d);
          a += dss[r][j] * load(q, qdt, qoff[r] + d);
        }
        dka[e] = a;
        dva[e] = c;
      }
    }
  }
  MT_UNROLL
  for (int e = 0; e < FA_ACC; e++) {
    int idx = e * FA_THREADS + threadIdx.x;
    if (idx < nk * D) {
      int j = idx / D, d = idx % D;
      store(dk, dkt, koff[j] + d, dka[e] * scale);
      store(dv, dvt, koff[j] + d, dva[e]);
    }
  }
}

// flash_attention_backward_dq writes dq of R packed rows, blocks laid out
// as flash_attention's: for each key tile it visits (those of the
// forward) it recomputes P and dS as flash_attention_backward_dkv does and
// sums dq += dS·k·scale over the keys in order. dq is overwritten.
extern "C" __global__ void __launch_bounds__(FA_THREADS)
    flash_attention_backward_dq(void* dq, int dqt, const void* dout, int ddt, const void* q, int qdt, const void* k,
                                int kdt, const void* v, int vdt, const float* lse, const float* delta, int T, int H,
                                int KV, int D, int R, int W, float scale) {
  __shared__ float as[FA_TILE][FA_DC + 1], bs[FA_TILE][FA_DC + 1];
  __shared__ float dss[FA_ROWS][FA_TILE];
  __shared__ i64 qoff[FA_ROWS], sidx[FA_ROWS], koff[FA_TILE];
  __shared__ int qpos[FA_ROWS];
  int G = H / KV;
  i64 rows = (i64)T * G;
  i64 tiles = (rows + R - 1) / R;
  i64 pair = blockIdx.x / tiles, p0 = (blockIdx.x % tiles) * R;
  i64 b = pair / KV;
  int kv = (int)(pair % KV);
  int nr = (int)min64(R, rows - p0);
  fa_rows(qoff, qpos, sidx, b, kv, p0, nr, T, H, G, D);
  i64 kvbase = b * T * KV * D + (i64)kv * D, ldk = (i64)KV * D;
  int last = (int)((p0 + nr - 1) / G);
  float acc[FA_ACC];
  MT_UNROLL
  for (int e = 0; e < FA_ACC; e++) {
    acc[e] = 0.0f;
  }
  for (int k0 = fa_first_key((int)(p0 / G), W); k0 <= last; k0 += FA_TILE) {
    int nk = imin(FA_TILE, last + 1 - k0);
    __syncthreads();  // the previous tile's sums have read koff and dss
    if ((int)threadIdx.x < nk) {
      koff[threadIdx.x] = kvbase + (k0 + (i64)threadIdx.x) * ldk;
    }
    float s[FA_PAIRS], dp[FA_PAIRS];
    fa_dots(s, q, qdt, qoff, nr, k, kdt, koff, nk, D, as, bs);
    fa_dots(dp, dout, ddt, qoff, nr, v, vdt, koff, nk, D, as, bs);
    MT_UNROLL
    for (int e = 0; e < FA_PAIRS; e++) {
      int pi = e * FA_THREADS + threadIdx.x;
      if (pi < nr * nk) {
        int r = pi / nk, j = pi % nk;
        float p = fa_sees(k0 + j, qpos[r], W) ? expf(s[e] * scale - lse[sidx[r]]) : 0.0f;
        dss[r][j] = p * (dp[e] - delta[sidx[r]]);
      }
    }
    __syncthreads();
    MT_UNROLL
    for (int e = 0; e < FA_ACC; e++) {
      int idx = e * FA_THREADS + threadIdx.x;
      if (idx < nr * D) {
        int r = idx / D, d = idx % D;
        float a = acc[e];
        for (int j = 0; j < nk; j++) {
          a += dss[r][j] * load(k, kdt, koff[j] + d);
        }
        acc[e] = a;
      }
    }
  }
  MT_UNROLL
  for (int e = 0; e < FA_ACC; e++) {
    int idx = e * FA_THREADS + threadIdx.x;
    if (idx < nr * D) {
      int r = idx / D, d = idx % D;
      store(dq, dqt, qoff[r] + d, acc[e] * scale);
    }
  }
}

// attention_kv is decoding attention against a cache. Block item0 +
// blockIdx.x is query (b, i, h) of q [B, n, H, D]; it sits at position
// start[b]+i and attends to keys lo..L−1 of kc [B, Tmax, KV, D], L =
// start[b]+i+1, lo = max(0, L − W) for a sliding window W > 0 and 0 for
// W = 0, through key/value head h/(H/KV). scores holds Tmax floats per
// block of this launch, key j's at j.
//
// Each warp takes every (blockDim/32)-th key and computes its score as a
// dot product over D (lanes over D, a butterfly sum); then the block
// softmaxes the L scores, and thread d sums p_j·v[j][d] over the keys in
// order. Cache rows outside [lo, L) are never read.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) attention_kv(void* out, int odt, const void* q, int qdt, const void* kc, int kdt, const void* vc,
                                        int vdt, const int* start, float* scores, i64 item0, int n, int H, int KV, int D,
                                        int Tmax, int W, float scale) {
  i64 item = item0 + blockIdx.x;
  int h = (int)(item % H);
  int i = (int)(item / H % n);
  i64 b = item / ((i64)H * n);
  int kv = h / (H / KV);
  int L = start[b] + i + 1;
  int lo = W > 0 ? imax(0, L - W) : 0;
  float* sc = scores + (i64)blockIdx.x * Tmax;
  i64 qoff = item * D;  // ((b·n + i)·H + h)·D
  i64 kvld = (i64)KV * D;
  i64 kvoff = b * Tmax * kvld + (i64)kv * D;

  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int j0 = lo; j0 < L; j0 += warps) {
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
  for (int j = lo + threadIdx.x; j < L; j += blockDim.x) {
    m = fmaxf(m, sc[j]);
  }
  m = block_max(m);
  float sum = 0;
  for (int j = lo + threadIdx.x; j < L; j += blockDim.x) {
    float e = expf(sc[j] - m);
    sc[j] = e;
    sum += e;
  }
  sum = block_sum(sum);
  float inv = 1.0f / sum;
  __syncthreads();

  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0;
    for (int j = lo; j < L; j++) {
      acc += __fmul_rn(sc[j], inv) * load(vc, vdt, kvoff + j * kvld + d);
    }
    store(out, odt, qoff + d, acc);
  }
}
