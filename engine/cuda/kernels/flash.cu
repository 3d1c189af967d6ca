// flash.cu: causal grouped-query attention on tensor cores for bf16 q, k,
// v (and out, dOut and the gradients) with head size 64 or 128:
// FlashAttention-2's forward and its one-pass backward, built on the warp
// collectives of warp.cuh (mma.sync m16n8k16 bf16 → float32, ldmatrix,
// cp.async). The float32 path and other head sizes use attention.cu.
//
// Rows are packed as attention.cu packs them: the query heads of a
// key/value head's group form one sequence of rows of the pair (b, kv) —
// packed row p is query head kv·G + p mod G at position p / G — so that a
// block's rows of every head of the group share each key/value tile it
// loads (rather than a block per head re-reading the tiles G times), and
// the backward's block of keys sums dK and dV over the whole group in its
// registers, with no reduction across blocks. Shared memory rows are padded by FM_PAD elements, so that the
// eight rows of an ldmatrix matrix fall in different banks.
//
// Query t sees the keys (t − W, t] of a sliding window W; plain causal
// attention is W = T, whose window holds every key up to t, so that its
// tiles, masks and sums are exactly the causal ones. Key tiles wholly
// before a block's windows are never visited: the work is O(T·W).
#include "common.cuh"
#include "warp.cuh"

// Blocks of four warps. The forward takes FM_ROWS packed query rows a
// block (16 a warp) and key/value tiles of FM_KEYS keys (more keys for
// head size 64 keep more registers than ptxas gives sm_90 without a
// spill); the backward FB_KEYS keys a block (16 a warp) and
// query tiles of FB_QTILE_ELEMS elements (32 rows of 64, 16 of 128).
#define FM_THREADS 128
#define FM_ROWS 64
#define FM_KEYS 32
#define FM_PAD 8
#define FB_KEYS 64
#define FB_QTILE_ELEMS 2048

// zero16 clears 16 bytes of shared memory: a row chunk past the sequence's
// end, which is never read from global memory (masked scores ignore K
// there, but V's rows are multiplied by zero probabilities and must not
// hold NaN).
__device__ __forceinline__ void zero16(bf16* p) {
  unsigned* u = (unsigned*)p;
  u[0] = 0u;
  u[1] = 0u;
  u[2] = 0u;
  u[3] = 0u;
}

// fm_row_offset is the element offset of packed row p of the pair (b, kv)
// in a [B, T, H, D] tensor.
__device__ __forceinline__ i64 fm_row_offset(i64 b, int kv, i64 p, int T, int H, int G, int D) {
  i64 t = p / G;
  int h = kv * G + (int)(p % G);
  return ((b * T + t) * H + h) * (i64)D;
}

// fm_stat_index is packed row p's index in a [B, H, T] statistic (lse, δ).
__device__ __forceinline__ i64 fm_stat_index(i64 b, int kv, i64 p, int T, int H, int G) {
  i64 t = p / G;
  int h = kv * G + (int)(p % G);
  return (b * H + h) * (i64)T + t;
}

// fm_load_packed starts the copies of n packed rows p0 … of the pair (b,
// kv), D elements each, from a [B, T, H, D] tensor into shared memory (row
// stride ld); rows from `rows` on are zeros. Every thread of the block
// calls it.
template <int D>
__device__ __forceinline__ void fm_load_packed(bf16* dst, int ld, int n, const bf16* src, i64 b, int kv, i64 p0,
                                               i64 rows, int T, int H, int G) {
  const int chunks = D / 8;
  for (int i = threadIdx.x; i < n * chunks; i += FM_THREADS) {
    int r = i / chunks, c = i % chunks;
    bf16* d = dst + r * ld + c * 8;
    if (p0 + r < rows) {
      cp_async16(d, src + fm_row_offset(b, kv, p0 + r, T, H, G, D) + c * 8);
    } else {
      zero16(d);
    }
  }
}

// fm_load_keys is fm_load_packed for n keys k0 … of a key/value head,
// whose key t starts at src + t·ld_src; keys from T on are zeros.
template <int D>
__device__ __forceinline__ void fm_load_keys(bf16* dst, int ld, int n, const bf16* src, i64 ld_src, int k0, int T) {
  const int chunks = D / 8;
  for (int i = threadIdx.x; i < n * chunks; i += FM_THREADS) {
    int r = i / chunks, c = i % chunks;
    bf16* d = dst + r * ld + c * 8;
    if (k0 + r < T) {
      cp_async16(d, src + (k0 + r) * ld_src + c * 8);
    } else {
      zero16(d);
    }
  }
}

// flash_mma_forward: block blockIdx.x takes the pair (b, kv) =
// divmod(blockIdx.x / tiles, KV), tiles = ⌈T·G/FM_ROWS⌉, and its packed
// rows [p0, p0 + FM_ROWS); warp w owns rows p0 + 16w … + 15. The block's Q
// rows go to registers as A fragments (through shared memory and
// ldmatrix). Then, for each key tile from the one its first row's window
// starts in up to the block's last position, the next tile's K and V are
// copied in (cp.async, double-buffered) while this one's are used: S =
// Q·Kᵀ on tensor cores, the scale, the mask (keys outside a row's
// window, or past T: −∞), the online softmax
// in registers (each lane holds two rows' values; a row's maximum and sum
// over the four lanes of a quad, by shuffles), P rounded to bf16 as the A
// operand of O += P·V. out = O / l (bf16), lse = m + log l (float32 [B,
// H, T]). Tiles past the block's last position, or before its first
// row's window, are never visited.
template <int D>
__device__ __forceinline__ void flash_mma_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                                                  int T, int H, int KV, int W, float scale) {
  const int BC = FM_KEYS, LD = D + FM_PAD, NT = BC / 8, DT = D / 8, KD = D / 16;
  __shared__ __align__(16) bf16 sm[4 * FM_KEYS * (D + FM_PAD)];  // K 0, K 1, V 0, V 1
  bf16* ks = sm;
  bf16* vs = sm + 2 * BC * LD;
  int G = H / KV;
  i64 rows = (i64)T * G;
  i64 tiles = (rows + FM_ROWS - 1) / FM_ROWS;
  i64 pair = blockIdx.x / tiles, p0 = (blockIdx.x % tiles) * FM_ROWS;
  i64 b = pair / KV;
  int kv = (int)(pair % KV);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  i64 ldkv = (i64)KV * D;
  const bf16* kb = k + b * T * ldkv + (i64)kv * D;
  const bf16* vb = v + b * T * ldkv + (i64)kv * D;

  // Q's rows, staged where the K/V buffers will be, into A fragments.
  fm_load_packed<D>(sm, LD, FM_ROWS, q, b, kv, p0, rows, T, H, G);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  unsigned qf[KD][4];
  MT_UNROLL
  for (int kk = 0; kk < KD; kk++) {
    ldmatrix_x4(qf[kk], sm + (warp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
  }
  __syncthreads();  // the staging area becomes the K/V buffers

  // This lane's two rows (g and g + 8 of its warp's 16) and positions; a
  // row past the end gets a position ≥ T and is not stored.
  i64 pr0 = p0 + warp * 16 + (lane >> 2), pr1 = pr0 + 8;
  int t0 = (int)min64(pr0 / G, T), t1 = (int)min64(pr1 / G, T);
  int last = (int)((min64(p0 + FM_ROWS, rows) - 1) / G);
  int ntiles = last / BC + 1;
  int jfirst = imax(0, (int)(p0 / G) - W + 1) / BC;

  float m0 = -MT_INF, m1 = -MT_INF, l0 = 0.0f, l1 = 0.0f;
  float o[DT][4];
  MT_UNROLL
  for (int dt = 0; dt < DT; dt++) {
    o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  }
  fm_load_keys<D>(ks + (jfirst & 1) * BC * LD, LD, BC, kb, ldkv, jfirst * BC, T);
  fm_load_keys<D>(vs + (jfirst & 1) * BC * LD, LD, BC, vb, ldkv, jfirst * BC, T);
  cp_async_commit();
  for (int j = jfirst; j < ntiles; j++) {
    if (j + 1 < ntiles) {
      int nb = (j + 1) & 1;
      fm_load_keys<D>(ks + nb * BC * LD, LD, BC, kb, ldkv, (j + 1) * BC, T);
      fm_load_keys<D>(vs + nb * BC * LD, LD, BC, vb, ldkv, (j + 1) * BC, T);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const bf16* kt = ks + (j & 1) * BC * LD;
    const bf16* vt = vs + (j & 1) * BC * LD;

    // S = Q·Kᵀ for the warp's 16 rows and the tile's keys.
    float s[NT][4];
    MT_UNROLL
    for (int nt = 0; nt < NT; nt++) {
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    }
    MT_UNROLL
    for (int kk = 0; kk < KD; kk++) {
      MT_UNROLL
      for (int n2 = 0; n2 < NT / 2; n2++) {
        unsigned bf[4];
        ldmatrix_x4(bf, kt + (n2 * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
        mma_bf16(s[2 * n2], qf[kk], bf);
        mma_bf16(s[2 * n2 + 1], qf[kk], bf + 2);
      }
    }

    // The online softmax: once a row has seen a key its maximum is
    // finite, and a row whose keys in this tile are all masked keeps it
    // (alpha 1, p 0). Before that (without a window every row sees key 0
    // in the first tile; with one, a row's window may start in a later
    // tile than its block's first) the maximum stays −∞, and the
    // exponentials take 0 in its place: alpha 1 and p 0 on the zero o
    // and l.
    int k0 = j * BC;
    float mx0 = m0, mx1 = m1;
    MT_UNROLL
    for (int nt = 0; nt < NT; nt++) {
      MT_UNROLL
      for (int e = 0; e < 4; e++) {
        int key = k0 + nt * 8 + 2 * (lane & 3) + (e & 1);
        int t = e < 2 ? t0 : t1;
        float x = key <= t && key > t - W && key < T ? s[nt][e] * scale : -MT_INF;
        s[nt][e] = x;
        if (e < 2) {
          mx0 = fmaxf(mx0, x);
        } else {
          mx1 = fmaxf(mx1, x);
        }
      }
    }
    MT_UNROLL
    for (int o2 = 1; o2 < 4; o2 <<= 1) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
    }
    // alpha is 0 on a row's first tile with a key.
    float a0 = mx0 == -MT_INF ? 1.0f : expf(m0 - mx0), a1 = mx1 == -MT_INF ? 1.0f : expf(m1 - mx1);
    m0 = mx0;
    m1 = mx1;
    float e0 = m0 == -MT_INF ? 0.0f : m0, e1 = m1 == -MT_INF ? 0.0f : m1;
    l0 *= a0;
    l1 *= a1;
    MT_UNROLL
    for (int nt = 0; nt < NT; nt++) {
      s[nt][0] = expf(s[nt][0] - e0);
      s[nt][1] = expf(s[nt][1] - e0);
      s[nt][2] = expf(s[nt][2] - e1);
      s[nt][3] = expf(s[nt][3] - e1);
      l0 += s[nt][0] + s[nt][1];
      l1 += s[nt][2] + s[nt][3];
    }
    MT_UNROLL
    for (int dt = 0; dt < DT; dt++) {
      o[dt][0] *= a0;
      o[dt][1] *= a0;
      o[dt][2] *= a1;
      o[dt][3] *= a1;
    }

    // O += P·V: P's accumulators of two key n-tiles are an A fragment.
    MT_UNROLL
    for (int kk = 0; kk < BC / 16; kk++) {
      unsigned pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                        pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                        pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
      MT_UNROLL
      for (int d2 = 0; d2 < DT / 2; d2++) {
        unsigned bf[4];
        ldmatrix_x4_t(bf, vt + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + d2 * 16 + (lane >> 4) * 8);
        mma_bf16(o[2 * d2], pa, bf);
        mma_bf16(o[2 * d2 + 1], pa, bf + 2);
      }
    }
    __syncthreads();  // the next iteration's copies overwrite this buffer
  }

  // Each lane summed its own columns of l; the quad's sum is the row's.
  MT_UNROLL
  for (int o2 = 1; o2 < 4; o2 <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
  }
  float inv0 = 1.0f / l0, inv1 = 1.0f / l1;
  int col = 2 * (lane & 3);
  if (pr0 < rows) {
    unsigned* dst = (unsigned*)(out + fm_row_offset(b, kv, pr0, T, H, G, D) + col);
    MT_UNROLL
    for (int dt = 0; dt < DT; dt++) {
      dst[dt * 4] = pack_bf16x2(o[dt][0] * inv0, o[dt][1] * inv0);
    }
    if ((lane & 3) == 0) {
      lse[fm_stat_index(b, kv, pr0, T, H, G)] = (float)((double)m0 + log((double)l0));
    }
  }
  if (pr1 < rows) {
    unsigned* dst = (unsigned*)(out + fm_row_offset(b, kv, pr1, T, H, G, D) + col);
    MT_UNROLL
    for (int dt = 0; dt < DT; dt++) {
      dst[dt * 4] = pack_bf16x2(o[dt][2] * inv1, o[dt][3] * inv1);
    }
    if ((lane & 3) == 0) {
      lse[fm_stat_index(b, kv, pr1, T, H, G)] = (float)((double)m1 + log((double)l1));
    }
  }
}

extern "C" __global__ void __launch_bounds__(FM_THREADS)
    flash_mma_forward_d64(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int T, int H, int KV,
                          int W, float scale) {
  flash_mma_forward<64>(out, lse, q, k, v, T, H, KV, W, scale);
}

extern "C" __global__ void __launch_bounds__(FM_THREADS)
    flash_mma_forward_d128(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int T, int H, int KV,
                           int W, float scale) {
  flash_mma_forward<128>(out, lse, q, k, v, T, H, KV, W, scale);
}

// flash_mma_backward is FlashAttention-2's backward in one pass. Block
// blockIdx.x = pair·ktiles + j (ktiles = ⌈T/FB_KEYS⌉) holds keys [k0, k0 +
// FB_KEYS), k0 = j·FB_KEYS, of the pair (b, kv) in shared memory; warp w
// owns keys k0 + 16w … + 15. It walks the pair's packed query rows in
// tiles of BQ = FB_QTILE_ELEMS/D from the first row that sees k0 to the
// last whose window reaches the block's last key, and for each tile I:
//
//	Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ           (the warp's keys × the tile's rows)
//	Pᵀ = e^(Sᵀ·scale − lse), 0 where a key is outside the row's window
//	dSᵀ = Pᵀ ⊙ (dPᵀ − δ)             (δ = rowsum(dO ⊙ O): attention_row_dot)
//	dV += Pᵀ·dO, dK += dSᵀ·Q         (in registers, over every tile)
//	dQ_I += dS·K                     (dS through shared memory, bf16)
//
// dQ is summed over the key tiles without atomics, in a fixed order. The
// key tiles that tile I's windows reach are the consecutive j0 … jlast:
// j0 the tile of its first position's oldest key (0 without a window),
// jlast that of its last position. Tile I's float32 accumulator (dq_acc,
// BQ × D per tile of each pair) takes block j's contribution only once
// blocks j0 … j−1 have added theirs — block j waits for the tile's counter
// (counters, zeroed by the host) to reach j − j0, adds, and raises it to
// j − j0 + 1 (acquire/release at GPU scope). Block j0 writes instead of
// adding, and the tile's last contributor, block jlast, converts the sum
// to bf16 into dq instead of storing it. Blocks of lower j have lower indices and are started
// first, so the blocks waited for are running or done: no deadlock. The
// cost is the accumulator's read and write per (key tile, query tile),
// BQ·D·8 bytes, mostly in L2, and the waits of a block for its
// predecessors, which run the same tiles a step ahead. The sums are in
// the same order every run: the results are bit-identical run to run.
// dK (×scale) and dV, summed over the group's heads, are written at the
// end.
template <int D>
__device__ __forceinline__ void flash_mma_backward(bf16* dq, bf16* dk, bf16* dv, float* dq_acc, int* counters,
                                                   const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                                   const float* lse, const float* delta, int T, int H, int KV,
                                                   int W, float scale) {
  const int BQ = FB_QTILE_ELEMS / D, LD = D + FM_PAD, KD = D / 16, DT = D / 8, NR = BQ / 8;
  const int LDS = FB_KEYS + FM_PAD;
  const int WC = 4 / (BQ / 16), QC = D / WC, QT = QC / 8;  // dQ: warps of rows × columns, QC columns a warp
  __shared__ __align__(16) bf16 ks[FB_KEYS * (D + FM_PAD)];
  __shared__ __align__(16) bf16 vs[FB_KEYS * (D + FM_PAD)];
  __shared__ __align__(16) bf16 qs[FB_QTILE_ELEMS / D * (D + FM_PAD)];
  __shared__ __align__(16) bf16 dos[FB_QTILE_ELEMS / D * (D + FM_PAD)];
  __shared__ __align__(16) bf16 dss[FB_QTILE_ELEMS / D * (FB_KEYS + FM_PAD)];
  __shared__ float lse_s[FB_QTILE_ELEMS / D], delta_s[FB_QTILE_ELEMS / D];
  __shared__ int pos_s[FB_QTILE_ELEMS / D];
  int G = H / KV;
  i64 rows = (i64)T * G;
  int ktiles = (T + FB_KEYS - 1) / FB_KEYS;
  i64 qtiles = (rows + BQ - 1) / BQ;
  i64 pair = blockIdx.x / ktiles;
  int j = (int)(blockIdx.x % ktiles);
  i64 b = pair / KV;
  int kv = (int)(pair % KV);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  i64 ldkv = (i64)KV * D, kvoff = b * T * ldkv + (i64)kv * D;
  int k0 = j * FB_KEYS;
  fm_load_keys<D>(ks, LD, FB_KEYS, k + kvoff, ldkv, k0, T);
  fm_load_keys<D>(vs, LD, FB_KEYS, v + kvoff, ldkv, k0, T);
  cp_async_commit();  // waited for with the first query tile's group

  float dka[DT][4], dva[DT][4];
  MT_UNROLL
  for (int dt = 0; dt < DT; dt++) {
    dka[dt][0] = dka[dt][1] = dka[dt][2] = dka[dt][3] = 0.0f;
    dva[dt][0] = dva[dt][1] = dva[dt][2] = dva[dt][3] = 0.0f;
  }
  // This lane's keys, rows g and g + 8 of the warp's in Sᵀ's layout.
  int key0 = k0 + warp * 16 + (lane >> 2), key1 = key0 + 8;
  int rb = warp / WC, cb = warp % WC;  // this warp's dQ rows and columns
  // The last position whose window reaches the block's last key, and the
  // query tiles past its rows.
  int tend = imin(T - 1, k0 + FB_KEYS - 1 + W - 1);
  i64 qend = (((i64)tend + 1) * G + BQ - 1) / BQ;
  for (i64 I = (i64)k0 * G / BQ; I < qend; I++) {
    i64 r0 = I * BQ;
    fm_load_packed<D>(qs, LD, BQ, q, b, kv, r0, rows, T, H, G);
    fm_load_packed<D>(dos, LD, BQ, dout, b, kv, r0, rows, T, H, G);
    cp_async_commit();
    if ((int)threadIdx.x < BQ) {
      i64 p = r0 + threadIdx.x;
      bool in = p < rows;
      i64 si = in ? fm_stat_index(b, kv, p, T, H, G) : 0;
      pos_s[threadIdx.x] = in ? (int)(p / G) : -1;
      lse_s[threadIdx.x] = in ? lse[si] : 0.0f;
      delta_s[threadIdx.x] = in ? delta[si] : 0.0f;
    }
    cp_async_wait<0>();
    __syncthreads();

    // Sᵀ and dPᵀ: A the warp's keys of K or V, B the tile's rows of Q or dO.
    float st[NR][4], dpt[NR][4];
    MT_UNROLL
    for (int nr = 0; nr < NR; nr++) {
      st[nr][0] = st[nr][1] = st[nr][2] = st[nr][3] = 0.0f;
      dpt[nr][0] = dpt[nr][1] = dpt[nr][2] = dpt[nr][3] = 0.0f;
    }
    MT_UNROLL
    for (int kk = 0; kk < KD; kk++) {
      unsigned ka[4], va[4];
      ldmatrix_x4(ka, ks + (warp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
      ldmatrix_x4(va, vs + (warp * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
      MT_UNROLL
      for (int n2 = 0; n2 < NR / 2; n2++) {
        unsigned qb[4], ob[4];
        int at = (n2 * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(qb, qs + at);
        ldmatrix_x4(ob, dos + at);
        mma_bf16(st[2 * n2], ka, qb);
        mma_bf16(st[2 * n2 + 1], ka, qb + 2);
        mma_bf16(dpt[2 * n2], va, ob);
        mma_bf16(dpt[2 * n2 + 1], va, ob + 2);
      }
    }
    // Pᵀ into st, dSᵀ into dpt and, transposed, into dss for dQ.
    MT_UNROLL
    for (int nr = 0; nr < NR; nr++) {
      MT_UNROLL
      for (int e = 0; e < 4; e++) {
        int row = nr * 8 + 2 * (lane & 3) + (e & 1);
        int key = e < 2 ? key0 : key1;
        int t = pos_s[row];
        float p = key <= t && key > t - W ? expf(st[nr][e] * scale - lse_s[row]) : 0.0f;
        float ds = p * (dpt[nr][e] - delta_s[row]);
        st[nr][e] = p;
        dpt[nr][e] = ds;
        dss[row * LDS + warp * 16 + (lane >> 2) + (e < 2 ? 0 : 8)] = f32_to_bf16(ds);
      }
    }
    // dV += Pᵀ·dO and dK += dSᵀ·Q: A from the accumulators (two row n-tiles
    // of 8 make a k-step of 16), B the rows of dO or Q transposed.
    MT_UNROLL
    for (int kr = 0; kr < BQ / 16; kr++) {
      unsigned pa[4] = {pack_bf16x2(st[2 * kr][0], st[2 * kr][1]), pack_bf16x2(st[2 * kr][2], st[2 * kr][3]),
                        pack_bf16x2(st[2 * kr + 1][0], st[2 * kr + 1][1]),
                        pack_bf16x2(st[2 * kr + 1][2], st[2 * kr + 1][3])};
      unsigned sa[4] = {pack_bf16x2(dpt[2 * kr][0], dpt[2 * kr][1]), pack_bf16x2(dpt[2 * kr][2], dpt[2 * kr][3]),
                        pack_bf16x2(dpt[2 * kr + 1][0], dpt[2 * kr + 1][1]),
                        pack_bf16x2(dpt[2 * kr + 1][2], dpt[2 * kr + 1][3])};
      MT_UNROLL
      for (int d2 = 0; d2 < DT / 2; d2++) {
        unsigned ob[4], qb[4];
        int at = (kr * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + d2 * 16 + (lane >> 4) * 8;
        ldmatrix_x4_t(ob, dos + at);
        ldmatrix_x4_t(qb, qs + at);
        mma_bf16(dva[2 * d2], pa, ob);
        mma_bf16(dva[2 * d2 + 1], pa, ob + 2);
        mma_bf16(dka[2 * d2], sa, qb);
        mma_bf16(dka[2 * d2 + 1], sa, qb + 2);
      }
    }
    __syncthreads();  // dS is whole in shared memory

    // This block's dQ of the tile: the warp's 16 rows and QC columns of
    // dS·K, A dS's rows, B the keys of K transposed.
    float dqp[QT][4];
    MT_UNROLL
    for (int c = 0; c < QT; c++) {
      dqp[c][0] = dqp[c][1] = dqp[c][2] = dqp[c][3] = 0.0f;
    }
    MT_UNROLL
    for (int kc = 0; kc < FB_KEYS / 16; kc++) {
      unsigned sa[4];
      ldmatrix_x4(sa, dss + (rb * 16 + (lane & 15)) * LDS + kc * 16 + (lane >> 4) * 8);
      MT_UNROLL
      for (int c2 = 0; c2 < QT / 2; c2++) {
        unsigned kb4[4];
        ldmatrix_x4_t(kb4, ks + (kc * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + cb * QC + c2 * 16 + (lane >> 4) * 8);
        mma_bf16(dqp[2 * c2], sa, kb4);
        mma_bf16(dqp[2 * c2 + 1], sa, kb4 + 2);
      }
    }
    // Add it to the tile's sum in key-tile order (see above).
    int jlast = (int)((min64(r0 + BQ, rows) - 1) / G) / FB_KEYS;
    int j0 = imax(0, (int)(r0 / G) - W + 1) / FB_KEYS;
    int* ctr = counters + pair * qtiles + I;
    float* acc = dq_acc + (pair * qtiles + I) * BQ * D;
    if (threadIdx.x == 0) {
      counter_wait(ctr, j - j0);
    }
    __syncthreads();
    MT_UNROLL
    for (int c = 0; c < QT; c++) {
      MT_UNROLL
      for (int half = 0; half < 2; half++) {
        int row = rb * 16 + (lane >> 2) + 8 * half, col = cb * QC + c * 8 + 2 * (lane & 3);
        float x0 = dqp[c][2 * half], x1 = dqp[c][2 * half + 1];
        float* a = acc + row * D + col;
        if (j > j0) {
          x0 += a[0];
          x1 += a[1];
        }
        if (j < jlast) {
          a[0] = x0;
          a[1] = x1;
        } else if (r0 + row < rows) {
          *(unsigned*)(dq + fm_row_offset(b, kv, r0 + row, T, H, G, D) + col) = pack_bf16x2(x0 * scale, x1 * scale);
        }
      }
    }
    __syncthreads();  // every thread's sum is written; the tile's buffers are free
    if (threadIdx.x == 0 && j < jlast) {
      counter_release(ctr, j - j0 + 1);
    }
  }

  int col = 2 * (lane & 3);
  if (key0 < T) {
    unsigned* pk = (unsigned*)(dk + kvoff + key0 * ldkv + col);
    unsigned* pv = (unsigned*)(dv + kvoff + key0 * ldkv + col);
    MT_UNROLL
    for (int dt = 0; dt < DT; dt++) {
      pk[dt * 4] = pack_bf16x2(dka[dt][0] * scale, dka[dt][1] * scale);
      pv[dt * 4] = pack_bf16x2(dva[dt][0], dva[dt][1]);
    }
  }
  if (key1 < T) {
    unsigned* pk = (unsigned*)(dk + kvoff + key1 * ldkv + col);
    unsigned* pv = (unsigned*)(dv + kvoff + key1 * ldkv + col);
    MT_UNROLL
    for (int dt = 0; dt < DT; dt++) {
      pk[dt * 4] = pack_bf16x2(dka[dt][2] * scale, dka[dt][3] * scale);
      pv[dt * 4] = pack_bf16x2(dva[dt][2], dva[dt][3]);
    }
  }
}

extern "C" __global__ void __launch_bounds__(FM_THREADS)
    flash_mma_backward_d64(bf16* dq, bf16* dk, bf16* dv, float* dq_acc, int* counters, const bf16* dout,
                           const bf16* q, const bf16* k, const bf16* v, const float* lse, const float* delta, int T,
                           int H, int KV, int W, float scale) {
  flash_mma_backward<64>(dq, dk, dv, dq_acc, counters, dout, q, k, v, lse, delta, T, H, KV, W, scale);
}

extern "C" __global__ void __launch_bounds__(FM_THREADS)
    flash_mma_backward_d128(bf16* dq, bf16* dk, bf16* dv, float* dq_acc, int* counters, const bf16* dout,
                            const bf16* q, const bf16* k, const bf16* v, const float* lse, const float* delta, int T,
                            int H, int KV, int W, float scale) {
  flash_mma_backward<128>(dq, dk, dv, dq_acc, counters, dout, q, k, v, lse, delta, T, H, KV, W, scale);
}
