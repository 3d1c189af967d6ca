// nvrtc_prelude.cuh: what NVRTC declares without any #include, for
// compiling engine/cuda/kernels with clang's CUDA front end where there is
// no CUDA toolkit (TestKernelsCompileWithClang): the built-in variables,
// and the intrinsics and math functions the kernels call, mapped to NVVM
// builtins and libdevice names as clang's own CUDA headers map them.
#include <__clang_cuda_builtin_vars.h>
#define __shared__ __attribute__((shared))
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
__device__ float __shfl_xor_sync(unsigned mask, float v, int lm) { return __nvvm_shfl_sync_bfly_f32(mask, v, lm, 0x1f); }
__device__ double __shfl_xor_sync(unsigned mask, double v, int lm) {
  long long x = __builtin_bit_cast(long long, v);
  int lo = __nvvm_shfl_sync_bfly_i32(mask, (int)x, lm, 0x1f), hi = __nvvm_shfl_sync_bfly_i32(mask, (int)(x >> 32), lm, 0x1f);
  return __builtin_bit_cast(double, ((long long)hi << 32) | (unsigned)lo);
}
__device__ float __int_as_float(int i) { return __builtin_bit_cast(float, i); }
__device__ float __uint_as_float(unsigned u) { return __builtin_bit_cast(float, u); }
__device__ unsigned __float_as_uint(float f) { return __builtin_bit_cast(unsigned, f); }
__device__ float __fadd_rn(float a, float b) { return __nvvm_add_rn_f(a, b); }
__device__ float __fsub_rn(float a, float b) { return __nvvm_add_rn_f(a, -b); }
__device__ float __fmul_rn(float a, float b) { return __nvvm_mul_rn_f(a, b); }
__device__ float __fdiv_rn(float a, float b) { return __nvvm_div_rn_f(a, b); }
__device__ float __fsqrt_rn(float a) { return __nvvm_sqrt_rn_f(a); }
extern "C" __device__ float __nv_expf(float);
extern "C" __device__ double __nv_exp(double);
extern "C" __device__ double __nv_log(double);
extern "C" __device__ double __nv_sqrt(double);
extern "C" __device__ void __nv_sincos(double, double*, double*);
extern "C" __device__ float __nv_fmaxf(float, float);
__device__ float expf(float x) { return __nv_expf(x); }
__device__ double exp(double x) { return __nv_exp(x); }
__device__ double log(double x) { return __nv_log(x); }
__device__ double sqrt(double x) { return __nv_sqrt(x); }
__device__ void sincos(double x, double* s, double* c) { __nv_sincos(x, s, c); }
__device__ float fmaxf(float a, float b) { return __nv_fmaxf(a, b); }
