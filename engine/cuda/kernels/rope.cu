// rope.cu: rotary position embedding, HuggingFace's rotate-half layout.
#include "common.cuh"

// rope rotates x [N, heads, 2·half] in place by sign·θ, θ = pos·invFreq[j]
// rounded to float32 as HuggingFace computes it; cos and sin are taken in
// float64 of that float32 value and rounded. For j < half:
//
//	x'[j]      = x[j]·cos θ − x[j+half]·sin θ
//	x'[j+half] = x[j+half]·cos θ + x[j]·sin θ
//
// sign = −1 is the backward pass: the rotation's transpose is its inverse.
// One block per row (token); threads over the (head, j) pairs.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) rope(void* x, int dt, const int* pos, const void* inv_freq, int fdt, int heads, int half,
                                float sign) {
  i64 row = blockIdx.x;
  float p = (float)pos[row];
  for (int k = threadIdx.x; k < heads * half; k += blockDim.x) {
    int hd = k / half, j = k % half;
    float theta = __fmul_rn(p, load(inv_freq, fdt, j));
    double s, c;
    sincos((double)theta, &s, &c);
    float cs = (float)c, sn = (float)(sign * s);
    i64 base = (row * heads + hd) * (i64)(2 * half);
    float x0 = load(x, dt, base + j), x1 = load(x, dt, base + j + half);
    store(x, dt, base + j, __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn)));
    store(x, dt, base + j + half, __fadd_rn(__fmul_rn(x1, cs), __fmul_rn(x0, sn)));
  }
}
