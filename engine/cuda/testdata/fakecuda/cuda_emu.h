// cuda_emu.h: what the kernels in engine/cuda/kernels need from CUDA, for
// compiling them as plain C++ and running them on the CPU in the fake
// libraries of fakecuda.cpp. Each GPU thread of a block is a fiber (a
// stack of its own, switched cooperatively on one OS thread); barriers
// (__syncthreads, and the warp-wide exchange of __shfl_xor_sync) switch
// to the next fiber until every thread they wait for has arrived. Blocks
// run one after another.
#ifndef MEMTRAIN_CUDA_EMU_H
#define MEMTRAIN_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Shared memory is one copy per kernel for every block: blocks run one at
// a time, and kernel launches are serialised.
#define __shared__ static

struct emu_dim3 {
  unsigned x, y, z;
};

// The scheduler sets these before switching to a fiber.
extern emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

// Barriers: every thread of the block, or of the calling thread's warp.
void __syncthreads();
void emu_warp_exchange(uint64_t* value, int lane_mask, unsigned mask);

// The warp collectives and asynchronous copies of kernels/warp.cuh, each
// emulated exactly as the PTX ISA specifies it (fakecuda.cpp says how).
void emu_mma_bf16(float* d, const unsigned* a, const unsigned* b);
void emu_ldmatrix(unsigned* r, const void* row, int n, bool trans);
void emu_cp_async16(void* dst, const void* src);
void emu_cp_async_commit();
void emu_cp_async_wait(int n);
void emu_counter_wait(const int* p, int want);
void emu_counter_release(int* p, int v);

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  uint64_t bits = 0;
  memcpy(&bits, &v, sizeof(T));
  emu_warp_exchange(&bits, lane_mask, mask);
  T r;
  memcpy(&r, &bits, sizeof(T));
  return r;
}

inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}

// The _rn intrinsics are the plain IEEE operations; fakecuda is compiled
// with -ffp-contract=off, so the compiler fuses nothing.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dsub_rn(double a, double b) { return a - b; }

#endif  // MEMTRAIN_CUDA_EMU_H
