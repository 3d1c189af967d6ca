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

// adamw_multi is AdamW over many tensors in one launch, clipped and
// checked on the device (engine.Backend.AdamWStep). table holds
// ADAMW_FIELDS i64 a tensor: the addresses of param, grad, m and v, the
// length, the element types (a byte each: param's lowest, then grad, m, v
// and the copy's), the weight decay's float bits, the index of the
// tensor's first chunk of ADAMW_CHUNK elements in the concatenation of
// every tensor's chunks, and the address of the parameter's copy (0 for
// none): a mixed-precision model's bf16 weights, which get the updated
// parameter rounded in the same pass (engine.AdamWTensors.Copy).
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
#define ADAMW_FIELDS 9

__device__ __forceinline__ bool finite_f32(float x) {
  return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}

extern "C" __global__ void __launch_bounds__(ADAMW_THREADS)
    adamw_multi(const i64* table, int ntensors, i64 nchunks, const float* ctl, float max_norm, float lr, float beta1,
                float one_minus_beta1, float beta2, float one_minus_beta2, float step_size, float bc2_sqrt, float eps) {
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
    const i64* t = table + (i64)table_entry(table, ntensors, ADAMW_FIELDS, 7, c) * ADAMW_FIELDS;
    void* param = (void*)t[0];
    void* grad = (void*)t[1];
    void* m = (void*)t[2];
    void* v = (void*)t[3];
    i64 n = t[4];
    i64 dts = t[5];
    int pdt = (int)(dts & 0xff), gdt = (int)((dts >> 8) & 0xff), mdt = (int)((dts >> 16) & 0xff),
        vdt = (int)((dts >> 24) & 0xff), cdt = (int)((dts >> 32) & 0xff);
    void* copy = (void*)t[8];
    float wd = __int_as_float((int)t[6]);
    float decay = (float)__dsub_rn(1.0, __dmul_rn((double)lr, (double)wd));
    i64 start = (c - t[7]) * ADAMW_CHUNK, end = min64(n, start + ADAMW_CHUNK);
    // A chunk starts a multiple of ADAMW_CHUNK elements in: aligned
    // when its tensors' first elements are.
    bool vec = vec_at(param, pdt, 0) && vec_at(grad, gdt, 0) && vec_at(m, mdt, 0) && vec_at(v, vdt, 0) &&
               (!copy || vec_at(copy, cdt, 0));
    for (i64 i = start + threadIdx.x * VEC; i < end; i += blockDim.x * VEC) {
      bool full = vec && i + VEC <= end;
      float p[VEC], g[VEC], mi[VEC], vi[VEC];
      load8(p, param, pdt, i, end, full);
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
        adamw_element(p[k], g[k], mi[k], vi[k], decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size,
                      bc2_sqrt, eps);
      }
      store8(param, pdt, i, end, p, full);
      store8(m, mdt, i, end, mi, full);
      store8(v, vdt, i, end, vi, full);
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
