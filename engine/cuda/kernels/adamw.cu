// adamw.cu: the fused AdamW update, in the CPU backend's (and PyTorch's)
// order of float32 roundings. The scalar coefficients come from the host,
// computed there in float64 and rounded once.
#include "common.cuh"

// adamw updates param, m and v in place from grad:
//
//	p  = p·decay
//	m  = m·β1 + (1−β1)·g
//	v  = v·β2 + ((1−β2)·g)·g
//	p += (stepSize·m) / (√v / √(1−β2^t) + eps)
//
// with stepSize = −lr/(1−β1^t) and decay = 1 − lr·wd.
extern "C" __global__ void adamw(void* param, int pdt, const void* grad, int gdt, void* m, int mdt, void* v, int vdt, i64 n,
                                 float decay, float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
                                 float step_size, float bc2_sqrt, float eps) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    float g = load(grad, gdt, i);
    float p = __fmul_rn(load(param, pdt, i), decay);
    float mi = __fadd_rn(__fmul_rn(load(m, mdt, i), beta1), __fmul_rn(one_minus_beta1, g));
    float vi = __fadd_rn(__fmul_rn(load(v, vdt, i), beta2), __fmul_rn(__fmul_rn(one_minus_beta2, g), g));
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), bc2_sqrt), eps);
    store(param, pdt, i, __fadd_rn(p, __fdiv_rn(__fmul_rn(step_size, mi), denom)));
    store(m, mdt, i, mi);
    store(v, vdt, i, vi);
  }
}
