// warp.cuh: the warp-collective primitives of the tensor-core kernels
// (flash.cu): bf16 mma.sync m16n8k16 with float32 accumulators, ldmatrix
// from shared memory, 16-byte cp.async copies from global to shared memory
// in commit groups, and an acquire/release counter between blocks.
//
// Compiled by NVRTC, each is one PTX instruction (inline asm), for sm_80
// and newer; older architectures compile a trap in its place (the host
// sends them no bf16 tensor-core work: attention.go). Compiled as C++ by
// the emulator (testdata/fakecuda), each calls an exact emulation with the
// PTX ISA's fragment layouts ("Matrix Fragments for mma.m16n8k16",
// ldmatrix): a real warp collective there, with every lane's operands
// exchanged through the warp, so kernels that assume another layout fail
// there as they would on a GPU.
//
// Fragment layouts (lane = 4·groupID + threadID_in_group, g = groupID, c =
// 2·threadID_in_group), each 32-bit register holding two bf16 (the lower
// column in the low half):
//
//	A (16×16, row-major)  a[0] = A[g][c..c+1]    a[1] = A[g+8][c..c+1]
//	                      a[2] = A[g][c+8..c+9]  a[3] = A[g+8][c+8..c+9]
//	B (16×8, k × n)       b[0] = B[c..c+1][g]    b[1] = B[c+8..c+9][g]
//	C, D (16×8, float)    d[0..1] = D[g][c..c+1] d[2..3] = D[g+8][c..c+1]
//
// ldmatrix .xN: lanes 8i..8i+7 give the addresses of the rows of 8×8
// matrix i; lane l receives in register i row l/4, elements 2(l%4) and
// 2(l%4)+1 of matrix i (.trans: column l/4, rows 2(l%4) and 2(l%4)+1).
#ifndef MEMTRAIN_WARP_CUH
#define MEMTRAIN_WARP_CUH

#include "common.cuh"

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define MT_GPU 1
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MT_SM80 1
#endif
#endif

// MT_TRAP stands for an instruction this architecture lacks.
#if defined(MT_GPU) && !defined(MT_SM80)
#define MT_TRAP() asm volatile("trap;")
#endif

// __align__ is NVRTC's; clang's CUDA front end without the CUDA headers
// (TestKernelsCompileWithClang) and the emulator's C++ spell it so.
#ifndef __align__
#define __align__(n) __attribute__((aligned(n)))
#endif

#ifdef MT_GPU
// smem_u32 is p's address in the shared window, as the .shared state
// space instructions take it.
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  unsigned r;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(r) : "l"(p));
  return r;
}
#endif

// pack_bf16x2 rounds lo and hi to bf16 (f32_to_bf16: to nearest even) and
// packs them into one register, lo in the low half: an A or B fragment
// register from float values.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
  return (unsigned)f32_to_bf16(lo) | ((unsigned)f32_to_bf16(hi) << 16);
}

// mma_bf16 is d = a·b + d for one 16×8×16 tile: A and B bf16, C and D
// float32 (the layouts above). The hardware's order and width of the
// internal sums is not specified; the emulation sums the exact products
// into d in k order in float32, so results may differ in the last bits.
__device__ __forceinline__ void mma_bf16(float* d, const unsigned* a, const unsigned* b) {
#if defined(MT_SM80)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#elif defined(MT_GPU)
  MT_TRAP();
#else
  emu_mma_bf16(d, a, b);
#endif
}

// ldmatrix_xN loads N 8×8 bf16 matrices from shared memory into r[0..N-1];
// row is this lane's row address (16-byte aligned; lanes from 8N on give
// none that is used). The _t forms transpose each matrix.
#if defined(MT_SM80)
#define MT_LDMATRIX(name, shape, n, regs, ...)                                      \
  __device__ __forceinline__ void name(unsigned* r, const void* row) {              \
    asm volatile("ldmatrix.sync.aligned.m8n8." shape ".shared.b16 " regs ", [%" #n "];" \
                 : __VA_ARGS__                                                      \
                 : "r"(smem_u32(row)));                                             \
  }
MT_LDMATRIX(ldmatrix_x1, "x1", 1, "{%0}", "=r"(r[0]))
MT_LDMATRIX(ldmatrix_x2, "x2", 2, "{%0,%1}", "=r"(r[0]), "=r"(r[1]))
MT_LDMATRIX(ldmatrix_x4, "x4", 4, "{%0,%1,%2,%3}", "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]))
MT_LDMATRIX(ldmatrix_x1_t, "x1.trans", 1, "{%0}", "=r"(r[0]))
MT_LDMATRIX(ldmatrix_x2_t, "x2.trans", 2, "{%0,%1}", "=r"(r[0]), "=r"(r[1]))
MT_LDMATRIX(ldmatrix_x4_t, "x4.trans", 4, "{%0,%1,%2,%3}", "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]))
#undef MT_LDMATRIX
#else
#if defined(MT_GPU)
#define MT_LDMATRIX(name, n, trans) \
  __device__ __forceinline__ void name(unsigned* r, const void* row) { MT_TRAP(); }
#else
#define MT_LDMATRIX(name, n, trans) \
  __device__ __forceinline__ void name(unsigned* r, const void* row) { emu_ldmatrix(r, row, n, trans); }
#endif
MT_LDMATRIX(ldmatrix_x1, 1, false)
MT_LDMATRIX(ldmatrix_x2, 2, false)
MT_LDMATRIX(ldmatrix_x4, 4, false)
MT_LDMATRIX(ldmatrix_x1_t, 1, true)
MT_LDMATRIX(ldmatrix_x2_t, 2, true)
MT_LDMATRIX(ldmatrix_x4_t, 4, true)
#undef MT_LDMATRIX
#endif

// cp_async16 starts a copy of 16 bytes from global memory at src to
// shared memory at dst (both 16-byte aligned), bypassing L1; cp_async_commit
// closes the copies this thread started since the last commit into a
// group, and cp_async_wait<N> waits until at most N of this thread's
// groups are still in flight. Other threads see the data after a barrier
// that follows the wait. (The emulation performs a group's copies when a
// wait retires it, so reading before the wait reads stale data there too.)
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
#if defined(MT_SM80)
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
#elif defined(MT_GPU)
  MT_TRAP();
#else
  emu_cp_async16(dst, src);
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(MT_SM80)
  asm volatile("cp.async.commit_group;" ::: "memory");
#elif defined(MT_GPU)
  MT_TRAP();
#else
  emu_cp_async_commit();
#endif
}

template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(MT_SM80)
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#elif defined(MT_GPU)
  MT_TRAP();
#else
  emu_cp_async_wait(N);
#endif
}

// counter_wait spins until the counter at p, which other blocks raise
// with counter_release, is at least want (an acquire at GPU scope: what
// they wrote before raising it is visible after). One thread of a block
// calls it, followed by a barrier. It relies on blocks being started in
// index order, so that the blocks it waits for, of lower index, are
// running or done. The emulator runs blocks one at a time in that order:
// a wait it finds unsatisfied could never be satisfied, and it fails the
// launch instead of hanging.
__device__ __forceinline__ void counter_wait(const int* p, int want) {
#if defined(MT_SM80)
  for (;;) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    if (v >= want) {
      break;
    }
  }
#elif defined(MT_GPU)
  MT_TRAP();
#else
  emu_counter_wait(p, want);
#endif
}

// counter_release sets the counter at p to v after every write this
// thread has made, and (after a barrier) its block's, is visible at GPU
// scope.
__device__ __forceinline__ void counter_release(int* p, int v) {
#if defined(MT_SM80)
  asm volatile("fence.acq_rel.gpu;\n\tst.release.gpu.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#elif defined(MT_GPU)
  MT_TRAP();
#else
  emu_counter_release(p, v);
#endif
}

#endif  // MEMTRAIN_WARP_CUH
