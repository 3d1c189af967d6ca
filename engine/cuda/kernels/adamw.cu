// adamw.cu: the fused AdamW update, in the CPU backend's (and PyTorch's)
// order of float32 roundings. The scalar coefficients come from the host,
// computed there in float64 and rounded once.
#include "common.cuh"

// adamw_element is one element's update (the formula below) of
// parameter p with gradient g and moments m and v, in place, shared by
// adamw and adamw_multi.
__device__ __forceinline__ void adamw_element(float& p, float g, float& m, float& v, float decay, float beta1,
                                              float one_minus_beta1, float beta2, float one_minus_beta2,
                                              float step_size, float bc2_sqrt, float eps) {
  p = __fmul_rn(p, decay);
  m = __fadd_rn(__fmul_rn(m, beta1), __fmul_rn(one_minus_beta1, g));
  v = __fadd_rn(__fmul_rn(v, beta2), __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
  float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), bc2_sqrt), eps);
  p = __fadd_rn(p, __fdiv_rn(__fmul_rn(step_size, m), denom));
}

// adamw updates param, m and v in place from grad:
//
//	p  = p·decay
//	m  = m·β1 + (1−β1)·g
//	v  = v·β2 + ((1−β2)·g)·g
//	p += (stepSize·m) / (√v / √(1−β2^t) + eps)
//
// with stepSize = −lr/(1−β1^t) and decay = 1 − lr·wd.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) adamw(void* param, int pdt, const void* grad, int gdt, void* m, int mdt, void* v, int vdt, i64 n,
                                 float decay, float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
                                 float step_size, float bc2_sqrt, float eps) {
  bool vec = vec_at(param, pdt, 0) && vec_at(grad, gdt, 0) && vec_at(m, mdt, 0) && vec_at(v, vdt, 0);
  for (i64 c = global_thread(); c < (n + VEC - 1) / VEC; c += grid_threads()) {
    i64 i = c * VEC;
    bool full = vec && i + VEC <= n;
    float p[VEC], g[VEC], mi[VEC], vi[VEC];
    load8(p, param, pdt, i, n, full);
    load8(g, grad, gdt, i, n, full);
    load8(mi, m, mdt, i, n, full);
    load8(vi, v, vdt, i, n, full);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      adamw_element(p[k], g[k], mi[k], vi[k], decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size,
                    bc2_sqrt, eps);
    }
    store8(param, pdt, i, n, p, full);
    store8(m, mdt, i, n, mi, full);
    store8(v, vdt, i, n, vi, full);
  }
}

// Compact state (engine.AdamWTensors.Low, Round, Int8): each function
// below is its engine/ counterpart, integer for integer and rounding for
// rounding, so that the GPU's step is the CPU backend's bit for bit.

// split_f32 is engine.SplitF32: x's magnitude rounded to nearest, ties
// away from zero, and the 16-bit residual.
__device__ __forceinline__ void split_f32(float x, bf16& hi, bf16& lo) {
  unsigned u = __float_as_uint(x);
  unsigned sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) {  // NaN
    hi = (bf16)(sign | 0x7fc0u);
    lo = 0;
    return;
  }
  unsigned h = (a + 0x8000u) >> 16;
  hi = (bf16)(sign | h);
  lo = (bf16)(a - (h << 16));
}

// join_f32 is engine.JoinF32.
__device__ __forceinline__ float join_f32(bf16 hi, bf16 lo) {
  unsigned sign = ((unsigned)hi & 0x8000u) << 16, h = (unsigned)hi & 0x7fffu;
  if (h > 0x7f80u) {
    return __uint_as_float(sign | h << 16);
  }
  return __uint_as_float(sign | (unsigned)((int)(h << 16) + (int)(short)lo));
}

// mix64 is SplitMix64's output function (engine.mix64).
__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// round_key is engine.RoundBits' chain before the element's index: the
// same for every element of a moment of a tensor at a step, so a thread
// computes it once a chunk; round_bits finishes it for one element.
__device__ __forceinline__ unsigned long long round_key(unsigned long long seed, int step, unsigned tensor, int moment) {
  unsigned long long h = mix64(seed ^ 0x9e3779b97f4a7c15ull);
  h = mix64(h ^ (unsigned long long)step << 2 ^ (unsigned long long)moment);
  return mix64(h ^ (unsigned long long)tensor << 32);
}

__device__ __forceinline__ unsigned round_bits(unsigned long long key, i64 index) {
  return (unsigned)(mix64(key ^ (unsigned long long)index) >> 48);
}

// round_stochastic is engine.RoundStochastic: x to a bfloat16, up with
// the probability of its fraction of a step given 16 random bits r;
// infinities and NaNs to nearest even.
__device__ __forceinline__ bf16 round_stochastic(float x, unsigned r) {
  unsigned u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u) {
    return (bf16)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  return (bf16)((u + r) >> 16);
}

// element_index is engine.ElementIndex.Global: the index in the whole
// parameter (cols columns) of the part's element i, the part starting
// flat0 elements into a shard of columns col0…col0+w−1 from row row0.
__device__ __forceinline__ i64 element_index(i64 i, i64 flat0, i64 row0, i64 cols, i64 col0, i64 w) {
  i64 f = flat0 + i;
  return (row0 + f / w) * cols + col0 + f % w;
}

// go_max is Go's max of two float32s, which engine.Int8Scale takes: a NaN
// wins, and +0 is above −0 (fmaxf ignores NaNs).
__device__ __forceinline__ float go_max(float a, float b) {
  if (a != a) {
    return a;
  }
  if (b != b) {
    return b;
  }
  if (a == b) {
    return (__float_as_uint(a) >> 31) ? b : a;
  }
  return a > b ? a : b;
}

// warp_go_max is go_max over the warp's lanes, every lane getting it;
// go_max is commutative and associative, so the order is immaterial.
__device__ __forceinline__ float warp_go_max(float v) {
  for (int o = 16; o > 0; o >>= 1) {
    v = go_max(v, __shfl_xor_sync(0xffffffffu, v, o));
  }
  return v;
}

// int8_scale_of is x's contribution to the scale of a piece of moment k
// (engine.Int8Scale): |x| for m, ⁴√x for v.
__device__ __forceinline__ float int8_scale_of(int k, float x) {
  return k == 0 ? fabsf(x) : __fsqrt_rn(__fsqrt_rn(x));
}

// go_clamp is Go's max(lo, min(hi, q)) of float64s.
__device__ __forceinline__ double go_clamp(double q, double lo, double hi) {
  if (q != q) {
    return q;
  }
  return q < lo ? lo : (q > hi ? hi : q);
}

// encode_int8 is engine.EncodeInt8: x's code in a piece of moment k with
// scale s, rounded up with the probability of its fraction of a code
// given 16 random bits r (0x8000: to nearest). The floor is taken in
// float64, as the host's: y + r/65536 is rounded there once.
__device__ __forceinline__ unsigned char encode_int8(int k, float x, float s, unsigned r) {
  if (s == 0.0f) {
    return k == 0 ? 0x80 : 0;
  }
  double frac = (double)r / 65536.0;  // exact
  if (k == 0) {
    float y = __fmul_rn(__fdiv_rn(x, s), 127.0f);
    return (unsigned char)((int)go_clamp(floor(__dadd_rn((double)y, frac)), -127.0, 127.0) + 128);
  }
  float y = __fmul_rn(__fdiv_rn(__fsqrt_rn(__fsqrt_rn(x)), s), 255.0f);
  return (unsigned char)(int)go_clamp(floor(__dadd_rn((double)y, frac)), 0.0, 255.0);
}

// decode_int8 is engine.DecodeInt8.
__device__ __forceinline__ float decode_int8(int k, unsigned char q, float s) {
  if (k == 0) {
    return __fmul_rn(s, __fdiv_rn((float)((int)q - 128), 127.0f));
  }
  float u = __fmul_rn(s, __fdiv_rn((float)q, 255.0f));
  float u2 = __fmul_rn(u, u);
  return __fmul_rn(u2, u2);
}

// INT8_BLOCK is engine.Int8Block: a piece has at most as many elements,
// two for each lane of the warp that encodes it.
#define INT8_BLOCK 64

// encode_piece_warp encodes a piece's values of moment k into codes and
// returns the piece's scale (every lane gets it): the lane's elements
// j = 0, 1 (lo + lane + 32·j) with valid[j] set hold x[j], coded into
// *at[j], rounded stochastically by round_bits(key, index[j]) or, when
// nearest, to nearest (r = 0x8000).
__device__ __forceinline__ float encode_piece_warp(int k, const float* x, const bool* valid, unsigned char* const* at,
                                                  bool nearest, unsigned long long key, const i64* index) {
  float s = 0.0f;  // Int8Scale's start
  for (int j = 0; j < 2; j++) {
    if (valid[j]) {
      s = go_max(s, int8_scale_of(k, x[j]));
    }
  }
  s = warp_go_max(s);
  for (int j = 0; j < 2; j++) {
    if (valid[j]) {
      *at[j] = encode_int8(k, x[j], s, nearest ? 0x8000u : round_bits(key, index[j]));
    }
  }
  return s;
}

// int8_piece is engine.Int8Pieces' piece p of a part of n elements that
// starts flat0 elements into a shard of columns col0…col0+w−1: its
// elements [lo, hi). The part's elements run a shard's row at a time;
// each run is cut where the whole parameter's column crosses a multiple
// of INT8_BLOCK. The first run starts mid-row when flat0 does; every
// later one at col0, the last possibly short (its pieces a prefix of a
// full row's).
__device__ __forceinline__ void int8_piece(i64 p, i64 n, i64 flat0, i64 col0, i64 w, i64& lo, i64& hi) {
  i64 f0 = flat0 % w, c = col0 + f0, l0 = min64(n, w - f0);
  i64 p0 = (c + l0 - 1) / INT8_BLOCK - c / INT8_BLOCK + 1;  // the first run's pieces
  i64 base = 0, start = c, run = l0;                         // the run of piece p
  if (p >= p0) {
    i64 q = p - p0, per_row = (col0 + w - 1) / INT8_BLOCK - col0 / INT8_BLOCK + 1;
    base = l0 + q / per_row * w;
    start = col0;
    run = min64(w, n - base);
    p = q % per_row;
  }
  i64 first = start / INT8_BLOCK;
  lo = base + (p == 0 ? 0 : (first + p) * INT8_BLOCK - start);
  hi = base + min64(run, (first + p + 1) * INT8_BLOCK - start);
}

// load8_u16 and store8_u16 are load8 and store8 for 16-bit words moved
// as they are: a split master's halves, stochastically rounded moments.
__device__ __forceinline__ void load8_u16(bf16* v, const void* p, i64 i, i64 n, bool vec) {
  if (vec) {
    mt_v16 w = *(const mt_v16*)((const bf16*)p + i);
    MT_UNROLL
    for (int k = 0; k < 4; k++) {
      v[2 * k] = (bf16)(w.u[k] & 0xffffu);
      v[2 * k + 1] = (bf16)(w.u[k] >> 16);
    }
    return;
  }
  MT_UNROLL
  for (int k = 0; k < VEC; k++) {
    v[k] = i + k < n ? ((const bf16*)p)[i + k] : (bf16)0;
  }
}

__device__ __forceinline__ void store8_u16(void* p, i64 i, i64 n, const bf16* v, bool vec) {
  if (vec) {
    mt_v16 w;
    MT_UNROLL
    for (int k = 0; k < 4; k++) {
      w.u[k] = (unsigned)v[2 * k] | (unsigned)v[2 * k + 1] << 16;
    }
    *(mt_v16*)((bf16*)p + i) = w;
    return;
  }
  MT_UNROLL
  for (int k = 0; k < VEC; k++) {
    if (i + k < n) {
      ((bf16*)p)[i + k] = v[k];
    }
  }
}

// adamw_multi is AdamW over many tensors in one launch, clipped and
// checked on the device (engine.Backend.AdamWStep). table holds
// ADAMW_FIELDS i64 a tensor (the T_ names below): the addresses of param,
// grad, m and v, the length, the element types (a byte each: param's
// lowest, then grad, m, v and the copy's), the weight decay's float bits,
// the index of the tensor's first chunk in the concatenation of every
// tensor's chunks, and the address of the parameter's copy (0 for none):
// a mixed-precision model's bf16 weights, which get the updated parameter
// rounded in the same pass (engine.AdamWTensors.Copy). Then the compact
// state's: the low halves of a split master (param 0: the master is
// join_f32 of the copy and them), 8-bit moments' scale tensors, and the
// stochastic rounding's key — seed, tensor key, the part's place in the
// whole parameter (engine.ElementIndex: Flat0, Row0, Cols, Col0, Col1) —
// and an 8-bit tensor's count of pieces. BF16 moments (m's type) are
// rounded stochastically; I8 ones are codes, a chunk being
// ADAMW_CHUNK / INT8_BLOCK pieces, each piece a warp's.
// ctl[0] is the squared global gradient norm and ctl[1] the loss: when
// either is not finite the kernel changes nothing, so the host need not
// look at them before the update. Each block takes chunks in turn and
// finds a chunk's tensor by bisection of the first-chunk indices.
//
// The arithmetic is adamw's, and the host's (engine/cpu): the clipping
// factor max_norm/(√n² + 1e-6) and the gradient times it in float32 (as
// torch.nn.utils.clip_grad_norm_, which leaves the clipped gradient in
// place, and so does this kernel), the decay 1 − lr·wd in float64 rounded
// once, as the host computes it for adamw.
#define ADAMW_THREADS 256
#define ADAMW_CHUNK 4096
#define ADAMW_FIELDS 20
#define T_PARAM 0
#define T_GRAD 1
#define T_M 2
#define T_V 3
#define T_N 4
#define T_DTYPES 5
#define T_DECAY 6
#define T_CHUNK0 7
#define T_COPY 8
#define T_LOW 9
#define T_MSCALE 10
#define T_VSCALE 11
#define T_SEED 12
#define T_TENSOR 13
#define T_FLAT0 14
#define T_ROW0 15
#define T_COLS 16
#define T_COL0 17
#define T_COL1 18
#define T_PIECES 19

__device__ __forceinline__ bool finite_f32(float x) {
  return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

// adamw_coefs are one tensor's update's scalars.
struct adamw_coefs {
  float decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, bc2_sqrt, eps;
};

// adamw_int8_chunk updates the pieces of chunk c (of the tensor at t)
// whose moments are I8 codes: each warp takes a piece at a time, a lane
// its elements lo + lane and lo + lane + 32, and does on float32 what
// engine/cpu's adamWInt8 does: the master (joined when split) and the
// decoded moments through adamw_element, the master stored back (split,
// or with its copy), the moments encoded again stochastically with the
// pieces' new scales.
__device__ void adamw_int8_chunk(const i64* t, i64 c, float coef, int step, const adamw_coefs& a) {
  float* param = (float*)t[T_PARAM];
  float* grad = (float*)t[T_GRAD];
  unsigned char* mc = (unsigned char*)t[T_M];
  unsigned char* vc = (unsigned char*)t[T_V];
  bf16* copy = (bf16*)t[T_COPY];
  bf16* low = (bf16*)t[T_LOW];
  float* ms = (float*)t[T_MSCALE];
  float* vs = (float*)t[T_VSCALE];
  int cdt = (int)((t[T_DTYPES] >> 32) & 0xff);
  i64 n = t[T_N], flat0 = t[T_FLAT0], row0 = t[T_ROW0], cols = t[T_COLS], col0 = t[T_COL0], w = t[T_COL1] - col0;
  unsigned long long mkey = round_key((unsigned long long)t[T_SEED], step, (unsigned)t[T_TENSOR], 0);
  unsigned long long vkey = round_key((unsigned long long)t[T_SEED], step, (unsigned)t[T_TENSOR], 1);
  const i64 per_chunk = ADAMW_CHUNK / INT8_BLOCK;
  i64 first = (c - t[T_CHUNK0]) * per_chunk, end = min64(t[T_PIECES], first + per_chunk);
  int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (i64 p = first + (threadIdx.x >> 5); p < end; p += warps) {
    i64 lo, hi;
    int8_piece(p, n, flat0, col0, w, lo, hi);
    // A piece lies in one row of the whole parameter: its elements'
    // indices there are consecutive.
    i64 index0 = element_index(lo, flat0, row0, cols, col0, w);
    float m[2], v[2];
    bool valid[2];
    i64 idx[2];
    unsigned char* mat[2];
    unsigned char* vat[2];
    for (int j = 0; j < 2; j++) {
      i64 i = lo + lane + 32 * j;
      valid[j] = i < hi;
      idx[j] = index0 + lane + 32 * j;
      mat[j] = mc + i;
      vat[j] = vc + i;
      m[j] = v[j] = 0.0f;
      if (!valid[j]) {
        continue;
      }
      float x = low ? join_f32(copy[i], low[i]) : param[i];
      float g = grad[i];
      if (coef != 1.0f) {
        g = __fmul_rn(g, coef);
        grad[i] = g;
      }
      m[j] = decode_int8(0, mc[i], ms[p]);
      v[j] = decode_int8(1, vc[i], vs[p]);
      adamw_element(x, g, m[j], v[j], a.decay, a.beta1, a.one_minus_beta1, a.beta2, a.one_minus_beta2, a.step_size,
                    a.bc2_sqrt, a.eps);
      if (low) {
        split_f32(x, copy[i], low[i]);
      } else {
        param[i] = x;
        if (copy) {
          store(copy, cdt, i, x);
        }
      }
    }
    // Every lane has read the piece's old scales: the shuffles of
    // encode_piece_warp order those reads before lane 0's writes.
    float sm = encode_piece_warp(0, m, valid, mat, false, mkey, idx);
    float sv = encode_piece_warp(1, v, valid, vat, false, vkey, idx);
    if (lane == 0) {
      ms[p] = sm;
      vs[p] = sv;
    }
  }
}

extern "C" __global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_multi(const i64* table, int ntensors, i64 nchunks, const float* ctl, float max_norm, float lr, float beta1,
                float one_minus_beta1, float beta2, float one_minus_beta2, float step_size, float bc2_sqrt, float eps,
                int step) {
  float n2 = ctl[0];
  if (!finite_f32(n2) || !finite_f32(ctl[1])) {
    return;
  }
  float coef = 1.0f;
  if (max_norm > 0.0f) {
    float c = __fdiv_rn(max_norm, __fadd_rn(__fsqrt_rn(n2), 1e-6f));
    if (c < 1.0f) {
      coef = c;
    }
  }
  for (i64 c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const i64* t = table + (i64)table_entry(table, ntensors, ADAMW_FIELDS, T_CHUNK0, c) * ADAMW_FIELDS;
    void* param = (void*)t[T_PARAM];
    void* grad = (void*)t[T_GRAD];
    void* m = (void*)t[T_M];
    void* v = (void*)t[T_V];
    i64 n = t[T_N];
    i64 dts = t[T_DTYPES];
    int pdt = (int)(dts & 0xff), gdt = (int)((dts >> 8) & 0xff), mdt = (int)((dts >> 16) & 0xff),
        vdt = (int)((dts >> 24) & 0xff), cdt = (int)((dts >> 32) & 0xff);
    void* copy = (void*)t[T_COPY];
    void* low = (void*)t[T_LOW];
    float wd = __int_as_float((int)t[T_DECAY]);
    adamw_coefs a = {(float)__dsub_rn(1.0, __dmul_rn((double)lr, (double)wd)),
                     beta1,
                     one_minus_beta1,
                     beta2,
                     one_minus_beta2,
                     step_size,
                     bc2_sqrt,
                     eps};
    if (mdt == DT_I8) {
      adamw_int8_chunk(t, c, coef, step, a);
      continue;
    }
    // BF16 moments are rounded stochastically, keyed by each element's
    // index in the whole parameter.
    bool rounded = mdt == DT_BF16;
    unsigned long long mkey = 0, vkey = 0;
    i64 flat0 = t[T_FLAT0], row0 = t[T_ROW0], cols = t[T_COLS], col0 = t[T_COL0], w = t[T_COL1] - col0;
    if (rounded) {
      mkey = round_key((unsigned long long)t[T_SEED], step, (unsigned)t[T_TENSOR], 0);
      vkey = round_key((unsigned long long)t[T_SEED], step, (unsigned)t[T_TENSOR], 1);
    }
    i64 start = (c - t[T_CHUNK0]) * ADAMW_CHUNK, end = min64(n, start + ADAMW_CHUNK);
    // A chunk starts a multiple of ADAMW_CHUNK elements in: aligned
    // when its tensors' first elements are.
    bool vec = (low ? vec_at(low, DT_BF16, 0) : vec_at(param, pdt, 0)) && vec_at(grad, gdt, 0) && vec_at(m, mdt, 0) &&
               vec_at(v, vdt, 0) && (!copy || vec_at(copy, cdt, 0));
    for (i64 i = start + threadIdx.x * VEC; i < end; i += blockDim.x * VEC) {
      bool full = vec && i + VEC <= end;
      float p[VEC], g[VEC], mi[VEC], vi[VEC];
      bf16 hi[VEC], lo[VEC];
      if (low) {
        load8_u16(hi, copy, i, end, full);
        load8_u16(lo, low, i, end, full);
        MT_UNROLL
        for (int k = 0; k < VEC; k++) {
          p[k] = join_f32(hi[k], lo[k]);
        }
      } else {
        load8(p, param, pdt, i, end, full);
      }
      load8(g, grad, gdt, i, end, full);
      load8(mi, m, mdt, i, end, full);
      load8(vi, v, vdt, i, end, full);
      if (coef != 1.0f) {
        MT_UNROLL
        for (int k = 0; k < VEC; k++) {
          g[k] = __fmul_rn(g[k], coef);
        }
        store8(grad, gdt, i, end, g, full);
      }
      MT_UNROLL
      for (int k = 0; k < VEC; k++) {
        adamw_element(p[k], g[k], mi[k], vi[k], a.decay, a.beta1, a.one_minus_beta1, a.beta2, a.one_minus_beta2,
                      a.step_size, a.bc2_sqrt, a.eps);
      }
      if (rounded) {
        // The elements' indices in the whole parameter, from one
        // division: the next element is the next column, or the next
        // row's first.
        i64 f = flat0 + i, row = row0 + f / w, col = f % w;
        MT_UNROLL
        for (int k = 0; k < VEC; k++) {
          i64 x = row * cols + col0 + col;
          hi[k] = round_stochastic(mi[k], round_bits(mkey, x));
          lo[k] = round_stochastic(vi[k], round_bits(vkey, x));
          if (++col == w) {
            col = 0;
            row++;
          }
        }
        store8_u16(m, i, end, hi, full);
        store8_u16(v, i, end, lo, full);
      } else {
        store8(m, mdt, i, end, mi, full);
        store8(v, vdt, i, end, vi, full);
      }
      if (low) {
        MT_UNROLL
        for (int k = 0; k < VEC; k++) {
          split_f32(p[k], hi[k], lo[k]);
        }
        store8_u16(copy, i, end, hi, full);
        store8_u16(low, i, end, lo, full);
        continue;
      }
      store8(param, pdt, i, end, p, full);
      if (copy) {
        // The parameter as stored: rounded to its own dtype first, so
        // that the copy is the stored parameter converted, as a
        // separate cast would be.
        if (pdt == DT_BF16) {
          MT_UNROLL
          for (int k = 0; k < VEC; k++) {
            p[k] = bf16_to_f32(f32_to_bf16(p[k]));
          }
        }
        store8(copy, cdt, i, end, p, full);
      }
    }
  }
}

// split_master and join_master are engine.MasterSplitter's SplitMaster
// and JoinMaster: n elements of a float32 master to or from its halves.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) split_master(void* hi, void* lo, const float* x, i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    split_f32(x[i], ((bf16*)hi)[i], ((bf16*)lo)[i]);
  }
}

extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) join_master(float* x, const void* hi, const void* lo, i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    x[i] = join_f32(((const bf16*)hi)[i], ((const bf16*)lo)[i]);
  }
}

// int8_codec is MasterSplitter's DecodeMoment (encode 0) and
// EncodeMoment (encode 1) of moment k: the npieces pieces of x (F32)
// whose first elements are starts[0…npieces−1] (starts[npieces] the
// length), each of at most INT8_BLOCK elements and a warp's, decoded
// from or encoded to nearest into the codes and scales.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS)
    int8_codec(int encode, int k, float* x, unsigned char* codes, float* scales, const i64* starts, i64 npieces) {
  int lane = threadIdx.x & 31;
  i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
  for (i64 p = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); p < npieces; p += warps) {
    i64 lo = starts[p], hi = starts[p + 1];
    if (!encode) {
      for (i64 i = lo + lane; i < hi; i += 32) {
        x[i] = decode_int8(k, codes[i], scales[p]);
      }
      continue;
    }
    float y[2];
    bool valid[2];
    unsigned char* at[2];
    for (int j = 0; j < 2; j++) {
      i64 i = lo + lane + 32 * j;
      valid[j] = i < hi;
      y[j] = valid[j] ? x[i] : 0.0f;
      at[j] = codes + i;
    }
    float s = encode_piece_warp(k, y, valid, at, true, 0, 0);
    if (lane == 0) {
      scales[p] = s;
    }
  }
}
