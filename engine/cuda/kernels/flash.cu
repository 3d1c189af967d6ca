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
// loads. Shared memory rows are padded by FM_PAD elements, so that the
// eight rows of an ldmatrix matrix fall in different banks.
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
// ldmatrix). Then, for each key tile up to the block's last position,
// the next tile's K and V are copied in (cp.async, double-buffered) while
// this one's are used: S = Q·Kᵀ on tensor cores, the scale, the causal
// mask (keys after a row's position, or past T: −∞), the online softmax
// in registers (each lane holds two rows' values; a row's maximum and sum
// over the four lanes of a quad, by shuffles), P rounded to bf16 as the A
// operand of O += P·V. out = O / l (bf16), lse = m + log l (float32 [B,
// H, T]). Tiles past the block's last position are never visited.
template <int D>
__device__ __forceinline__ void flash_mma_forward(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                                                  int T, int H, int KV, float scale) {
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

  float m0 = -MT_INF, m1 = -MT_INF, l0 = 0.0f, l1 = 0.0f;
  float o[DT][4];
  MT_UNROLL
  for (int dt = 0; dt < DT; dt++) {
    o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
  }
  fm_load_keys<D>(ks, LD, BC, kb, ldkv, 0, T);
  fm_load_keys<D>(vs, LD, BC, vb, ldkv, 0, T);
  cp_async_commit();
  for (int j = 0; j < ntiles; j++) {
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

    // The online softmax: every row sees key 0 in the first tile, so its
    // maximum is finite from then on, and a row whose keys in this tile
    // are all masked keeps it (alpha 1, p 0).
    int k0 = j * BC;
    float mx0 = m0, mx1 = m1;
    MT_UNROLL
    for (int nt = 0; nt < NT; nt++) {
      MT_UNROLL
      for (int e = 0; e < 4; e++) {
        int key = k0 + nt * 8 + 2 * (lane & 3) + (e & 1);
        int t = e < 2 ? t0 : t1;
        float x = key <= t && key < T ? s[nt][e] * scale : -MT_INF;
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
    float a0 = expf(m0 - mx0), a1 = expf(m1 - mx1);  // 0 on the first tile
    m0 = mx0;
    m1 = mx1;
    l0 *= a0;
    l1 *= a1;
    MT_UNROLL
    for (int nt = 0; nt < NT; nt++) {
      s[nt][0] = expf(s[nt][0] - m0);
      s[nt][1] = expf(s[nt][1] - m0);
      s[nt][2] = expf(s[nt][2] - m1);
      s[nt][3] = expf(s[nt][3] - m1);
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
                          float scale) {
  flash_mma_forward<64>(out, lse, q, k, v, T, H, KV, scale);
}

extern "C" __global__ void __launch_bounds__(FM_THREADS)
    flash_mma_forward_d128(bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int T, int H, int KV,
                           float scale) {
  flash_mma_forward<128>(out, lse, q, k, v, T, H, KV, scale);
}

