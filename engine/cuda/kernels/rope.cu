// rope.cu: rotary position embedding, HuggingFace's rotate-half layout.
#include "common.cuh"

// rope_table writes the angles' cosines and sines for rows positions:
// row i of table [rows, 2, half] holds cos θ then sin θ for j < half, with
// θ = p·invFreq[j] rounded to float32 as HuggingFace computes it and p
// the row's position: pos[i], or i itself when pos is null (a table
// indexed by position). cos and sin are taken in float64 of that float32
// value and rounded, as the CPU backend does: the accurate sincos runs
// once a (position, frequency), not once a (token, head, frequency).
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) rope_table(float* table, const int* pos, const void* inv_freq, int fdt, int rows, int half) {
  for (i64 k = global_thread(); k < (i64)rows * half; k += grid_threads()) {
    i64 i = k / half;
    int j = (int)(k % half);
    float p = (float)(pos != 0 ? pos[i] : (int)i);
    float theta = __fmul_rn(p, load(inv_freq, fdt, j));
    double s, c;
    sincos((double)theta, &s, &c);
    table[i * 2 * half + j] = (float)c;
    table[i * 2 * half + half + j] = (float)s;
  }
}

// rope rotates x [N, heads, 2·half] in place by sign·θ, cos θ and sin θ
// read from table (rope_table's): row pos[row] of it when by_pos, else
// row row. For j < half:
//
//	x'[j]      = x[j]·cos θ − x[j+half]·sin θ
//	x'[j+half] = x[j+half]·cos θ + x[j]·sin θ
//
// sign = −1 is the backward pass: the rotation's transpose is its inverse
// (and x·(−s) rounds to −(x·s): exact). One block per row (token);
// threads over the (head, VEC frequencies) pairs, with 16-byte accesses
// when half is a multiple of VEC and the row is aligned.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) rope(void* x, int dt, const int* pos, const float* table, int by_pos, int heads, int half,
                                float sign) {
  i64 row = blockIdx.x;
  const float* cs = table + (i64)(by_pos ? pos[row] : row) * 2 * half;
  const float* sn = cs + half;
  int per = (half + VEC - 1) / VEC;  // chunks of VEC frequencies a head
  bool vec = half % VEC == 0 && vec_at(x, dt, row * heads * 2 * half) && vec_at(cs, DT_F32, 0);
  for (int k = threadIdx.x; k < heads * per; k += blockDim.x) {
    int hd = k / per, j = (k % per) * VEC;
    i64 base = (row * heads + hd) * (i64)(2 * half);
    float x0[VEC], x1[VEC], c[VEC], s[VEC];
    load8(x0, x, dt, base + j, base + half, vec);
    load8(x1, x, dt, base + half + j, base + 2 * half, vec);
    load8(c, cs, DT_F32, j, half, vec);
    load8(s, sn, DT_F32, j, half, vec);
    MT_UNROLL
    for (int q = 0; q < VEC; q++) {
      float sq = sign * s[q];
      float y0 = __fsub_rn(__fmul_rn(x0[q], c[q]), __fmul_rn(x1[q], sq));
      x1[q] = __fadd_rn(__fmul_rn(x1[q], c[q]), __fmul_rn(x0[q], sq));
      x0[q] = y0;
    }
    store8(x, dt, base + j, base + half, x0, vec);
    store8(x, dt, base + half + j, base + 2 * half, x1, vec);
  }
}
