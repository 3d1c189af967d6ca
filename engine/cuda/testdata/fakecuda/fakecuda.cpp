// fakecuda.cpp: a stand-in for libcuda, cuBLAS, NVRTC and NCCL that runs
// on the CPU, for testing engine/cuda on machines without a GPU.
//
// It exports the C functions the backend binds, with their real
// signatures, so the backend's Go code runs unchanged against it: the
// purego calls (a 23-argument cuBLAS call, a 128-byte struct passed by
// value to NCCL), the thread that owns the context, every launch's
// argument array. The kernels are the real sources of engine/cuda/kernels,
// compiled as C++ with cuda_emu.h and run block by block, each GPU thread a
// fiber. cuBLAS's strided batched GEMM is a plain loop; NCCL's collectives
// meet in memory, each rank calling from its own thread.
//
// It checks what the real libraries check and more: a context current on
// the calling thread, streams and handles of that context, memory ranges
// inside allocations (with a guard page after each one), cuBLAS's leading
// dimensions, kernel launch shapes, kernel pointer arguments, barriers
// that every thread reaches, warp shuffles with whole warps, and that the
// source given to NVRTC is the source this library was built from.
//
// Everything runs synchronously, when called: streams and events order
// nothing. x86-64 Linux only (the fibers switch stacks in assembly).

#include "cuda_emu.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#define EXPORT extern "C" __attribute__((visibility("default")))

// ---------------------------------------------------------------------------
// Errors

enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_FAILED = 719,
};

static std::mutex err_mu;
static std::string err_detail;  // the last failure's explanation

static int fail(int code, const std::string& why) {
  std::lock_guard<std::mutex> l(err_mu);
  err_detail = why;
  if (getenv("MEMTRAIN_FAKECUDA_TRACE")) {
    fprintf(stderr, "fakecuda: error %d: %s\n", code, why.c_str());
  }
  return code;
}

EXPORT int cuGetErrorName(int r, const char** s) {
  switch (r) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; break;
    case CUDA_ERROR_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_DEVICE: *s = "CUDA_ERROR_INVALID_DEVICE"; break;
    case CUDA_ERROR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; break;
    case CUDA_ERROR_NO_BINARY_FOR_GPU: *s = "CUDA_ERROR_NO_BINARY_FOR_GPU"; break;
    case CUDA_ERROR_INVALID_HANDLE: *s = "CUDA_ERROR_INVALID_HANDLE"; break;
    case CUDA_ERROR_NOT_FOUND: *s = "CUDA_ERROR_NOT_FOUND"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *s = "CUDA_ERROR_LAUNCH_FAILED"; break;
    default: *s = "CUDA_ERROR_UNKNOWN"; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// cuGetErrorString gives the last failure's explanation: the fake's
// messages say exactly what was wrong.
EXPORT int cuGetErrorString(int r, const char** s) {
  static thread_local std::string msg;
  std::lock_guard<std::mutex> l(err_mu);
  const char* name;
  cuGetErrorName(r, &name);
  msg = std::string("fakecuda: ") + err_detail;
  *s = msg.c_str();
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Devices, contexts, streams, events

static const int kDevices = 8;

struct Ctx {
  int dev;
  int refs;
};
static Ctx contexts[kDevices];
static thread_local Ctx* current;
static bool initialized;

// --- Counters (begin) -------------------------------------------------------
// The calls a training step should not make every step, counted per device
// as this library saw them, for the tests to compare with the backend's own
// counts (Backend.Counters): cuMemAlloc, cuMemFree, and the host
// synchronisations cuStreamSynchronize and cuEventSynchronize. Every call
// with a context current counts, successful or not.

enum { COUNT_ALLOCS, COUNT_FREES, COUNT_SYNCS, NUM_COUNTS };
static std::atomic<long long> counts[kDevices][NUM_COUNTS];

// count_call counts a call on the current context's device.
static void count_call(int what) {
  if (current) counts[current->dev][what]++;
}

// fakecuda_counters writes device dev's counts, in the order of the enum,
// into out[0..NUM_COUNTS-1]; it returns the number written, or -1 for a
// device that is not there.
EXPORT int fakecuda_counters(int dev, long long* out) {
  if (dev < 0 || dev >= kDevices) return -1;
  for (int i = 0; i < NUM_COUNTS; i++) out[i] = counts[dev][i].load();
  return NUM_COUNTS;
}
// --- Counters (end) ---------------------------------------------------------

struct Stream {
  Ctx* ctx;
};
struct Event {
  Ctx* ctx;
};
static std::mutex handles_mu;
static std::set<void*> streams, events, modules;

static bool known(std::set<void*>& set, void* h) {
  std::lock_guard<std::mutex> l(handles_mu);
  return set.count(h) != 0;
}

// need_ctx checks that the calling thread has a context current.
#define NEED_CTX()                                                                            \
  do {                                                                                        \
    if (!initialized) return fail(CUDA_ERROR_NOT_INITIALIZED, "cuInit was not called");       \
    if (!current) return fail(CUDA_ERROR_INVALID_CONTEXT, std::string(__func__) + ": no context is current on this thread"); \
  } while (0)

// stream_ok checks a stream handle: one of this context's (the legacy
// stream 0 is not used by the backend, and refused here).
static int stream_ok(void* s, const char* fn) {
  if (!s || !known(streams, s)) return fail(CUDA_ERROR_INVALID_HANDLE, std::string(fn) + ": unknown stream");
  if (static_cast<Stream*>(s)->ctx != current) {
    return fail(CUDA_ERROR_INVALID_CONTEXT, std::string(fn) + ": the stream belongs to another context");
  }
  return CUDA_SUCCESS;
}

EXPORT int cuInit(unsigned flags) {
  if (flags != 0) return fail(CUDA_ERROR_INVALID_VALUE, "cuInit: flags must be 0");
  initialized = true;
  return CUDA_SUCCESS;
}
EXPORT int cuDriverGetVersion(int* v) {
  *v = 12040;
  return CUDA_SUCCESS;
}
EXPORT int cuDeviceGetCount(int* n) {
  if (!initialized) return fail(CUDA_ERROR_NOT_INITIALIZED, "cuInit was not called");
  *n = kDevices;
  return CUDA_SUCCESS;
}
EXPORT int cuDeviceGet(int* dev, int ordinal) {
  if (!initialized) return fail(CUDA_ERROR_NOT_INITIALIZED, "cuInit was not called");
  if (ordinal < 0 || ordinal >= kDevices) return fail(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet: no such device");
  *dev = ordinal;
  return CUDA_SUCCESS;
}
EXPORT int cuDeviceGetName(char* name, int len, int dev) {
  if (dev < 0 || dev >= kDevices) return fail(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGetName: no such device");
  snprintf(name, len, "memtrain fake GPU %d (emulated on the CPU)", dev);
  return CUDA_SUCCESS;
}
EXPORT int cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (dev < 0 || dev >= kDevices) return fail(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGetAttribute: no such device");
  switch (attr) {
    case 16: *v = 4; break;   // multiprocessors
    case 75: *v = 9; break;   // compute capability 9.0
    case 76: *v = 0; break;
    default: return fail(CUDA_ERROR_INVALID_VALUE, "cuDeviceGetAttribute: attribute not emulated");
  }
  return CUDA_SUCCESS;
}
EXPORT int cuDeviceTotalMem_v2(size_t* bytes, int dev) {
  if (dev < 0 || dev >= kDevices) return fail(CUDA_ERROR_INVALID_DEVICE, "cuDeviceTotalMem: no such device");
  *bytes = size_t(16) << 30;
  return CUDA_SUCCESS;
}
EXPORT int cuDevicePrimaryCtxRetain(Ctx** ctx, int dev) {
  if (!initialized) return fail(CUDA_ERROR_NOT_INITIALIZED, "cuInit was not called");
  if (dev < 0 || dev >= kDevices) return fail(CUDA_ERROR_INVALID_DEVICE, "cuDevicePrimaryCtxRetain: no such device");
  std::lock_guard<std::mutex> l(handles_mu);
  contexts[dev].dev = dev;
  contexts[dev].refs++;
  *ctx = &contexts[dev];
  return CUDA_SUCCESS;
}
EXPORT int cuDevicePrimaryCtxRelease_v2(int dev) {
  if (dev < 0 || dev >= kDevices) return fail(CUDA_ERROR_INVALID_DEVICE, "cuDevicePrimaryCtxRelease: no such device");
  std::lock_guard<std::mutex> l(handles_mu);
  if (contexts[dev].refs <= 0) return fail(CUDA_ERROR_INVALID_CONTEXT, "cuDevicePrimaryCtxRelease: not retained");
  contexts[dev].refs--;
  return CUDA_SUCCESS;
}
EXPORT int cuCtxSetCurrent(Ctx* ctx) {
  if (ctx && (ctx < contexts || ctx >= contexts + kDevices || ctx->refs <= 0)) {
    return fail(CUDA_ERROR_INVALID_CONTEXT, "cuCtxSetCurrent: not a retained primary context");
  }
  current = ctx;
  return CUDA_SUCCESS;
}
EXPORT int cuStreamCreate(void** s, unsigned flags) {
  NEED_CTX();
  if (flags > 1) return fail(CUDA_ERROR_INVALID_VALUE, "cuStreamCreate: bad flags");
  Stream* st = new Stream{current};
  std::lock_guard<std::mutex> l(handles_mu);
  streams.insert(st);
  *s = st;
  return CUDA_SUCCESS;
}
EXPORT int cuStreamDestroy_v2(void* s) {
  NEED_CTX();
  if (int r = stream_ok(s, "cuStreamDestroy")) return r;
  std::lock_guard<std::mutex> l(handles_mu);
  streams.erase(s);
  delete static_cast<Stream*>(s);
  return CUDA_SUCCESS;
}
EXPORT int cuStreamSynchronize(void* s) {
  NEED_CTX();
  count_call(COUNT_SYNCS);
  return stream_ok(s, "cuStreamSynchronize");
}
EXPORT int cuStreamWaitEvent(void* s, void* e, unsigned flags) {
  NEED_CTX();
  if (int r = stream_ok(s, "cuStreamWaitEvent")) return r;
  if (!known(events, e)) return fail(CUDA_ERROR_INVALID_HANDLE, "cuStreamWaitEvent: unknown event");
  return flags == 0 ? CUDA_SUCCESS : fail(CUDA_ERROR_INVALID_VALUE, "cuStreamWaitEvent: flags");
}
EXPORT int cuEventCreate(void** e, unsigned flags) {
  NEED_CTX();
  Event* ev = new Event{current};
  std::lock_guard<std::mutex> l(handles_mu);
  events.insert(ev);
  *e = ev;
  return CUDA_SUCCESS;
}
EXPORT int cuEventRecord(void* e, void* s) {
  NEED_CTX();
  if (!known(events, e)) return fail(CUDA_ERROR_INVALID_HANDLE, "cuEventRecord: unknown event");
  return stream_ok(s, "cuEventRecord");
}
EXPORT int cuEventSynchronize(void* e) {
  NEED_CTX();
  count_call(COUNT_SYNCS);
  return known(events, e) ? CUDA_SUCCESS : fail(CUDA_ERROR_INVALID_HANDLE, "cuEventSynchronize: unknown event");
}
// cuEventQuery: the work before an event has always completed here, where
// everything runs when it is issued.
EXPORT int cuEventQuery(void* e) {
  NEED_CTX();
  return known(events, e) ? CUDA_SUCCESS : fail(CUDA_ERROR_INVALID_HANDLE, "cuEventQuery: unknown event");
}
EXPORT int cuEventElapsedTime(float* ms, void* a, void* b) {
  NEED_CTX();
  if (!known(events, a) || !known(events, b)) return fail(CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime: unknown event");
  *ms = 0;
  return CUDA_SUCCESS;
}
EXPORT int cuEventDestroy_v2(void* e) {
  NEED_CTX();
  std::lock_guard<std::mutex> l(handles_mu);
  if (!events.erase(e)) return fail(CUDA_ERROR_INVALID_HANDLE, "cuEventDestroy: unknown event");
  delete static_cast<Event*>(e);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Memory: every allocation ends at a guard page, so a kernel that runs
// past one crashes instead of reading a neighbour.

struct Alloc {
  uintptr_t base;    // the mapping
  size_t map_bytes;  // its size, guard page included
  size_t bytes;      // what was asked for
  Ctx* ctx;
};
static std::mutex mem_mu;
static std::map<uintptr_t, Alloc> allocs;  // by user address
static size_t allocated[kDevices];          // bytes asked for, by device

// free_limit is $MEMTRAIN_FAKECUDA_FREE: when set, the bytes a device has
// free before its first allocation (cuMemGetInfo reports what is left, and
// cuMemAlloc fails beyond it); when not, every device has 8 GiB free and
// allocations fail only when the host's memory does.
static bool free_limit(size_t* limit) {
  const char* s = getenv("MEMTRAIN_FAKECUDA_FREE");
  if (!s) return false;
  *limit = strtoull(s, nullptr, 10);
  return true;
}

// find_alloc returns the allocation holding address p, or null.
static const Alloc* find_alloc(uintptr_t p, uintptr_t* start) {
  std::lock_guard<std::mutex> l(mem_mu);
  auto it = allocs.upper_bound(p);
  if (it == allocs.begin()) return nullptr;
  --it;
  if (p >= it->first + it->second.bytes && !(p == it->first && it->second.bytes == 0)) return nullptr;
  *start = it->first;
  return &it->second;
}

// in_range reports whether [p, p+bytes) lies inside one allocation.
static bool in_range(uintptr_t p, size_t bytes) {
  uintptr_t start;
  const Alloc* a = find_alloc(p, &start);
  return a && p + bytes <= start + a->bytes;
}

static std::string hex(uintptr_t p) {
  char b[32];
  snprintf(b, sizeof b, "%#lx", (unsigned long)p);
  return b;
}

#define NEED_RANGE(p, n, fn)                                                                             \
  do {                                                                                                   \
    if (!in_range((uintptr_t)(p), (n)))                                                                  \
      return fail(CUDA_ERROR_INVALID_VALUE, std::string(fn) + ": " + std::to_string((size_t)(n)) +         \
                                                " bytes at " + hex((uintptr_t)(p)) + " are not inside one allocation"); \
  } while (0)

EXPORT int cuMemAlloc_v2(uintptr_t* p, size_t bytes) {
  NEED_CTX();
  count_call(COUNT_ALLOCS);
  if (bytes == 0) return fail(CUDA_ERROR_INVALID_VALUE, "cuMemAlloc: 0 bytes");
  size_t limit;
  if (free_limit(&limit)) {
    std::lock_guard<std::mutex> l(mem_mu);
    if (allocated[current->dev] + bytes > limit) {
      return fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: " + std::to_string(bytes) + " bytes asked for, " +
                                                std::to_string(limit - std::min(limit, allocated[current->dev])) +
                                                " free ($MEMTRAIN_FAKECUDA_FREE)");
    }
  }
  size_t page = sysconf(_SC_PAGESIZE);
  size_t rounded = (bytes + 15) / 16 * 16;
  size_t body = (rounded + page - 1) / page * page;
  void* m = mmap(nullptr, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return fail(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc: mmap failed");
  mprotect(static_cast<char*>(m) + body, page, PROT_NONE);
  uintptr_t user = (uintptr_t)m + body - rounded;
  // Not zero: Alloc must clear what it promises to. 0xff bytes are NaN
  // in F32 and BF16 (−1 in I32), so that a kernel reading memory nothing
  // wrote (an Empty tensor's) fails the tests that compare its results.
  memset((void*)user, 0xff, bytes);
  std::lock_guard<std::mutex> l(mem_mu);
  allocs[user] = Alloc{(uintptr_t)m, body + page, bytes, current};
  allocated[current->dev] += bytes;
  *p = user;
  return CUDA_SUCCESS;
}
EXPORT int cuMemFree_v2(uintptr_t p) {
  NEED_CTX();
  count_call(COUNT_FREES);
  std::lock_guard<std::mutex> l(mem_mu);
  auto it = allocs.find(p);
  if (it == allocs.end()) return fail(CUDA_ERROR_INVALID_VALUE, "cuMemFree: " + hex(p) + " is not an allocation");
  if (it->second.ctx != current) return fail(CUDA_ERROR_INVALID_CONTEXT, "cuMemFree: allocated in another context");
  munmap((void*)it->second.base, it->second.map_bytes);
  allocated[current->dev] -= it->second.bytes;
  allocs.erase(it);
  return CUDA_SUCCESS;
}
EXPORT int cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  NEED_CTX();
  // Every fake GPU has 16 GiB, of which 8 are free, or what is left of
  // $MEMTRAIN_FAKECUDA_FREE bytes (tests of memory checks; free_limit).
  *free_bytes = size_t(8) << 30;
  size_t limit;
  if (free_limit(&limit)) {
    std::lock_guard<std::mutex> l(mem_mu);
    *free_bytes = limit - std::min(limit, allocated[current->dev]);
  }
  *total = size_t(16) << 30;
  return CUDA_SUCCESS;
}
EXPORT int cuMemcpyHtoDAsync_v2(uintptr_t dst, const void* src, size_t n, void* s) {
  NEED_CTX();
  if (int r = stream_ok(s, "cuMemcpyHtoDAsync")) return r;
  NEED_RANGE(dst, n, "cuMemcpyHtoDAsync");
  if (n && !src) return fail(CUDA_ERROR_INVALID_VALUE, "cuMemcpyHtoDAsync: null source");
  memcpy((void*)dst, src, n);
  return CUDA_SUCCESS;
}
EXPORT int cuMemcpyDtoHAsync_v2(void* dst, uintptr_t src, size_t n, void* s) {
  NEED_CTX();
  if (int r = stream_ok(s, "cuMemcpyDtoHAsync")) return r;
  NEED_RANGE(src, n, "cuMemcpyDtoHAsync");
  if (n && !dst) return fail(CUDA_ERROR_INVALID_VALUE, "cuMemcpyDtoHAsync: null destination");
  memcpy(dst, (void*)src, n);
  return CUDA_SUCCESS;
}
EXPORT int cuMemcpyDtoDAsync_v2(uintptr_t dst, uintptr_t src, size_t n, void* s) {
  NEED_CTX();
  if (int r = stream_ok(s, "cuMemcpyDtoDAsync")) return r;
  NEED_RANGE(dst, n, "cuMemcpyDtoDAsync (destination)");
  NEED_RANGE(src, n, "cuMemcpyDtoDAsync (source)");
  if (dst < src + n && src < dst + n && dst != src) {
    // The real copy's result is undefined for overlapping ranges.
    return fail(CUDA_ERROR_INVALID_VALUE, "cuMemcpyDtoDAsync: overlapping ranges");
  }
  memcpy((void*)dst, (void*)src, n);
  return CUDA_SUCCESS;
}
EXPORT int cuMemsetD8Async(uintptr_t dst, unsigned char v, size_t n, void* s) {
  NEED_CTX();
  if (int r = stream_ok(s, "cuMemsetD8Async")) return r;
  NEED_RANGE(dst, n, "cuMemsetD8Async");
  memset((void*)dst, v, n);
  return CUDA_SUCCESS;
}
EXPORT int cuMemsetD16Async(uintptr_t dst, unsigned short v, size_t n, void* s) {
  NEED_CTX();
  if (int r = stream_ok(s, "cuMemsetD16Async")) return r;
  if (dst % 2) return fail(CUDA_ERROR_INVALID_VALUE, "cuMemsetD16Async: unaligned");
  NEED_RANGE(dst, 2 * n, "cuMemsetD16Async");
  for (size_t i = 0; i < n; i++) ((unsigned short*)dst)[i] = v;
  return CUDA_SUCCESS;
}
EXPORT int cuMemsetD32Async(uintptr_t dst, unsigned v, size_t n, void* s) {
  NEED_CTX();
  if (int r = stream_ok(s, "cuMemsetD32Async")) return r;
  if (dst % 4) return fail(CUDA_ERROR_INVALID_VALUE, "cuMemsetD32Async: unaligned");
  NEED_RANGE(dst, 4 * n, "cuMemsetD32Async");
  for (size_t i = 0; i < n; i++) ((unsigned*)dst)[i] = v;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------
// Fibers and the block scheduler

emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

extern "C" void emu_switch(void** save_sp, void* to_sp);
// emu_switch saves the callee-saved registers on the current stack, stores
// the stack pointer in *save_sp, switches to to_sp and restores the
// registers saved there: a cooperative switch between fibers.
asm(R"(
.text
.globl emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch, .-emu_switch
.section .note.GNU-stack,"",@progbits
.text
)");

enum FiberState { READY, WAIT_BLOCK, WAIT_WARP, DONE };

struct Fiber {
  void* sp;
  char* stack;
  FiberState state;
};

static const size_t kStackBytes = 64 << 10;
static const int kMaxThreads = 1024;
static Fiber fibers[kMaxThreads];
static void* scheduler_sp;
static int cur_fiber;
static int block_threads;
static const std::function<void()>* block_body;
static int block_arrived;
static uint64_t warp_values[kMaxThreads / 32][32];
static std::string kernel_error;  // set by a fiber that found misuse
static const char* kernel_name;

static void yield_to_scheduler() { emu_switch(&fibers[cur_fiber].sp, scheduler_sp); }

// kernel_fail records misuse found inside a kernel and abandons the block.
static void kernel_fail(const std::string& why) {
  if (kernel_error.empty()) {
    kernel_error = std::string("kernel ") + kernel_name + " block (" + std::to_string(blockIdx.x) + "," +
                   std::to_string(blockIdx.y) + "," + std::to_string(blockIdx.z) + ") thread " +
                   std::to_string(cur_fiber) + ": " + why;
  }
  for (;;) yield_to_scheduler();  // the scheduler never resumes a failed block
}

static void cp_async_check_exit();
static int warp_arrived[kMaxThreads / 32];
static const char* warp_op[kMaxThreads / 32];

static void fiber_main() {
  (*block_body)();
  cp_async_check_exit();
  // Lanes of this warp already waiting at a collective would wait forever.
  if (block_threads % 32 == 0 && warp_arrived[cur_fiber / 32] > 0) {
    kernel_fail(std::string(warp_op[cur_fiber / 32]) + " after lane " + std::to_string(cur_fiber % 32) + " returned");
  }
  fibers[cur_fiber].state = DONE;
  yield_to_scheduler();
  abort();
}

static void* fresh_stack(char* stack) {
  uintptr_t top = ((uintptr_t)(stack + kStackBytes)) & ~(uintptr_t)15;
  uint64_t* sp = (uint64_t*)top;
  *--sp = 0;                      // fiber_main's return address: it never returns
  *--sp = (uint64_t)&fiber_main;  // where emu_switch's ret goes
  for (int i = 0; i < 6; i++) *--sp = 0;  // rbp, rbx, r12–r15
  return sp;
}

void __syncthreads() {
  for (int t = 0; t < block_threads; t++) {
    if (fibers[t].state == DONE) kernel_fail("__syncthreads after thread " + std::to_string(t) + " returned");
  }
  fibers[cur_fiber].state = WAIT_BLOCK;
  if (++block_arrived == block_threads) {
    block_arrived = 0;
    for (int t = 0; t < block_threads; t++) {
      if (fibers[t].state == WAIT_BLOCK) fibers[t].state = READY;
    }
  }
  yield_to_scheduler();
}

// warp_barrier waits for the 32 lanes of the calling thread's warp at the
// collective what (a string constant naming it): every lane must reach the
// same collective, none may have returned.
static void warp_barrier(int w, const char* what) {
  for (int t = w * 32; t < w * 32 + 32; t++) {
    if (fibers[t].state == DONE) kernel_fail(std::string(what) + " after lane " + std::to_string(t % 32) + " returned");
  }
  if (warp_arrived[w] == 0) {
    warp_op[w] = what;
  } else if (warp_op[w] != what) {
    kernel_fail(std::string("lanes of warp ") + std::to_string(w) + " meet at different collectives: " + warp_op[w] + " and " + what);
  }
  fibers[cur_fiber].state = WAIT_WARP;
  if (++warp_arrived[w] == 32) {
    warp_arrived[w] = 0;
    for (int t = w * 32; t < w * 32 + 32; t++) {
      if (fibers[t].state == WAIT_WARP) fibers[t].state = READY;
    }
  }
  yield_to_scheduler();
}

// warp_lane checks that the calling thread's block is made of whole warps
// and returns its warp and lane.
static void warp_lane(const char* what, int* w, int* lane) {
  if (block_threads % 32 != 0) kernel_fail(std::string(what) + " in a block of " + std::to_string(block_threads) + " threads");
  *w = cur_fiber / 32;
  *lane = cur_fiber % 32;
}

void emu_warp_exchange(uint64_t* value, int lane_mask, unsigned mask) {
  static const char what[] = "warp shuffle";
  if (mask != 0xffffffffu) kernel_fail("warp shuffle with a partial mask");
  if (lane_mask < 0 || lane_mask > 31) kernel_fail("warp shuffle lane mask out of range");
  int w, lane;
  warp_lane(what, &w, &lane);
  warp_values[w][lane] = *value;
  warp_barrier(w, what);
  uint64_t v = warp_values[w][lane ^ lane_mask];
  warp_barrier(w, what);  // no lane overwrites its value before every lane has read
  *value = v;
}

// --- Tensor-core warp collectives (begin) ------------------------------------
// kernels/warp.cuh's mma.sync, ldmatrix, cp.async and block counters. The
// warp collectives are exchanges like the shuffle's: each lane leaves its
// operands in its warp's staging area, the warp meets, each lane computes
// its own results from every lane's operands by the PTX ISA's layouts, and
// the warp meets again before the area is reused.

static uint32_t mma_a[kMaxThreads / 32][32][4];
static uint32_t mma_b[kMaxThreads / 32][32][2];
static uintptr_t ldm_rows[kMaxThreads / 32][32];
static int ldm_shape[kMaxThreads / 32][32];  // each lane's 2n + trans

// mma_permute_requested is set by fakecuda_set_mma_permuted (a test's
// switch); each launch copies it into mma_permuted, which swaps the row
// halves of mma's A fragments: a[0], a[1] read as rows g+8, g, and a[2],
// a[3] likewise. Kernels written for the real layout then compute wrong
// products, which proves the tests depend on the layout.
static std::atomic<int> mma_permute_requested;
static bool mma_permuted;

EXPORT void fakecuda_set_mma_permuted(int on) { mma_permute_requested = on; }

// mma_count counts the mma.sync operations the kernels have run, one per
// warp and instruction (fakecuda_mma_count), for the tests that check
// which tiles a kernel visits.
static std::atomic<long long> mma_count;

EXPORT long long fakecuda_mma_count() { return mma_count.load(); }

static float bf16_bits(uint32_t reg, int half) { return __uint_as_float((half ? reg >> 16 : reg & 0xffffu) << 16); }

// emu_mma_bf16: D = A·B + C for m16n8k16 with bf16 A, B and float C, D.
// Each product of two bf16 numbers is exact in float32; each lane adds its
// element's 16 products to C in k order, in float32 (the hardware's order
// and internal width are unspecified: results may differ from a GPU's in
// the last bits, which the tests' tolerances allow for).
void emu_mma_bf16(float* d, const unsigned* a, const unsigned* b) {
  static const char what[] = "mma.sync";
  int w, lane;
  warp_lane(what, &w, &lane);
  for (int i = 0; i < 4; i++) mma_a[w][lane][i] = a[i];
  for (int i = 0; i < 2; i++) mma_b[w][lane][i] = b[i];
  warp_barrier(w, what);
  int g = lane / 4, c = 2 * (lane % 4);
  float out[4];
  for (int i = 0; i < 4; i++) {
    int row = g + 8 * (i / 2), col = c + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; k++) {
      int arow = mma_permuted ? row ^ 8 : row;
      // A[arow][k]: lane 4·(arow%8) + (k%8)/2, register (arow≥8) + 2·(k≥8).
      float x = bf16_bits(mma_a[w][4 * (arow % 8) + (k % 8) / 2][(arow >= 8) + 2 * (k >= 8)], k & 1);
      // B[k][col]: lane 4·col + (k%8)/2, register k≥8.
      float y = bf16_bits(mma_b[w][4 * col + (k % 8) / 2][k >= 8], k & 1);
      acc += x * y;
    }
    out[i] = acc;
  }
  warp_barrier(w, what);
  for (int i = 0; i < 4; i++) d[i] = out[i];
  if (lane == 0) mma_count++;
}

// in_device_memory reports whether p lies in an allocation of the device
// (global memory); shared memory is the kernels' static arrays, outside.
static bool in_device_memory(const void* p) {
  uintptr_t start;
  return find_alloc((uintptr_t)p, &start) != nullptr;
}

// emu_ldmatrix: lanes 8i..8i+7 give the rows of matrix i (16-byte
// aligned, in shared memory); lane l receives in r[i] row l/4, elements
// 2(l%4) and 2(l%4)+1 of matrix i, or with trans column l/4, rows 2(l%4)
// and 2(l%4)+1.
void emu_ldmatrix(unsigned* r, const void* row, int n, bool trans) {
  static const char what[] = "ldmatrix";
  int w, lane;
  warp_lane(what, &w, &lane);
  if (n != 1 && n != 2 && n != 4) kernel_fail("ldmatrix of " + std::to_string(n) + " matrices");
  if (lane < 8 * n) {
    if ((uintptr_t)row % 16 != 0) kernel_fail("ldmatrix row address " + hex((uintptr_t)row) + " is not 16-byte aligned");
    if (in_device_memory(row)) kernel_fail("ldmatrix row address " + hex((uintptr_t)row) + " is in global memory, not shared");
  }
  ldm_rows[w][lane] = (uintptr_t)row;
  ldm_shape[w][lane] = 2 * n + trans;
  warp_barrier(w, what);
  if (ldm_shape[w][0] != 2 * n + trans) kernel_fail("lanes of a warp at ldmatrix of different shapes");
  unsigned out[4];
  for (int i = 0; i < n; i++) {
    const uintptr_t* rows = ldm_rows[w] + 8 * i;
    uint16_t lo, hi;
    if (!trans) {
      const uint16_t* p = (const uint16_t*)rows[lane / 4];
      lo = p[2 * (lane % 4)];
      hi = p[2 * (lane % 4) + 1];
    } else {
      lo = ((const uint16_t*)rows[2 * (lane % 4)])[lane / 4];
      hi = ((const uint16_t*)rows[2 * (lane % 4) + 1])[lane / 4];
    }
    out[i] = unsigned(lo) | (unsigned(hi) << 16);
  }
  warp_barrier(w, what);
  for (int i = 0; i < n; i++) r[i] = out[i];
}

// cp.async: each thread's copies since its last commit, and its committed
// groups, oldest first. A group's copies are made when a wait retires it
// (never earlier), so a kernel that reads shared memory before waiting
// reads what was there before. A wait for more groups than are in flight,
// a wait with copies not committed (it would not wait for them), and a
// thread that returns with copies in flight are misuse.
struct CopyOp {
  void* dst;
  const void* src;
};
static std::vector<CopyOp> cp_open[kMaxThreads];
static std::vector<std::vector<CopyOp>> cp_groups[kMaxThreads];

void emu_cp_async16(void* dst, const void* src) {
  if ((uintptr_t)dst % 16 != 0 || (uintptr_t)src % 16 != 0) {
    kernel_fail("cp.async of 16 bytes from " + hex((uintptr_t)src) + " to " + hex((uintptr_t)dst) + ": not 16-byte aligned");
  }
  if (!in_range((uintptr_t)src, 16)) kernel_fail("cp.async source " + hex((uintptr_t)src) + ": 16 bytes not inside one allocation");
  if (in_device_memory(dst)) kernel_fail("cp.async destination " + hex((uintptr_t)dst) + " is in global memory, not shared");
  cp_open[cur_fiber].push_back(CopyOp{dst, src});
}

void emu_cp_async_commit() {
  cp_groups[cur_fiber].push_back(std::move(cp_open[cur_fiber]));
  cp_open[cur_fiber].clear();
}

void emu_cp_async_wait(int n) {
  auto& groups = cp_groups[cur_fiber];
  if (!cp_open[cur_fiber].empty()) kernel_fail("cp.async.wait_group with copies not committed to a group");
  if (n < 0 || n > (int)groups.size()) {
    kernel_fail("cp.async.wait_group " + std::to_string(n) + " with " + std::to_string(groups.size()) + " groups in flight");
  }
  while ((int)groups.size() > n) {
    for (const CopyOp& c : groups.front()) memcpy(c.dst, c.src, 16);
    groups.erase(groups.begin());
  }
}

static void cp_async_check_exit() {
  if (!cp_open[cur_fiber].empty() || !cp_groups[cur_fiber].empty()) {
    kernel_fail("returned with cp.async copies never waited for");
  }
}

static void cp_async_reset(int threads) {
  for (int t = 0; t < threads; t++) {
    cp_open[t].clear();
    cp_groups[t].clear();
  }
}

// emu_counter_wait: blocks run one at a time in index order here, so a
// counter that earlier blocks have not raised far enough will never be:
// on a GPU the block would spin forever, here the launch fails.
void emu_counter_wait(const int* p, int want) {
  if (!in_range((uintptr_t)p, 4)) kernel_fail("counter at " + hex((uintptr_t)p) + " is not in device memory");
  if (*p < want) {
    kernel_fail("waits for a counter at " + std::to_string(*p) + " to reach " + std::to_string(want) +
                ", which no earlier block raised: it would wait forever");
  }
}

void emu_counter_release(int* p, int v) {
  if (!in_range((uintptr_t)p, 4)) kernel_fail("counter at " + hex((uintptr_t)p) + " is not in device memory");
  *p = v;
}
// --- Tensor-core warp collectives (end) --------------------------------------

static std::vector<char*> stack_pool;

// run_block runs one block of the current launch to completion.
static bool run_block(int threads) {
  while ((int)stack_pool.size() < threads) stack_pool.push_back(static_cast<char*>(malloc(kStackBytes)));
  block_threads = threads;
  block_arrived = 0;
  memset(warp_arrived, 0, sizeof warp_arrived);
  cp_async_reset(threads);
  for (int t = 0; t < threads; t++) {
    fibers[t].stack = stack_pool[t];
    fibers[t].sp = fresh_stack(fibers[t].stack);
    fibers[t].state = READY;
  }
  int done = 0;
  while (done < threads && kernel_error.empty()) {
    bool progress = false;
    for (int t = 0; t < threads && kernel_error.empty(); t++) {
      if (fibers[t].state != READY) continue;
      cur_fiber = t;
      threadIdx.x = t % blockDim.x;
      threadIdx.y = t / blockDim.x % blockDim.y;
      threadIdx.z = t / (blockDim.x * blockDim.y);
      emu_switch(&scheduler_sp, fibers[t].sp);
      progress = true;
      if (fibers[t].state == DONE) done++;
    }
    if (!progress && done < threads && kernel_error.empty()) {
      kernel_error = std::string("kernel ") + kernel_name + ": deadlock: threads wait at barriers that cannot complete";
    }
  }
  return kernel_error.empty();
}

// ---------------------------------------------------------------------------
// Kernels: the table binds a launch's argument array to a kernel's
// parameters by their C++ types, exactly as the driver does by their sizes.

struct KernelEntry {
  const char* name;
  std::function<bool(void**, std::function<void()>&, std::string&)> bind;
};

template <typename T>
static bool arg_ok(const T& v, int i, std::string& err) {
  if constexpr (std::is_pointer<T>::value) {
    uintptr_t start;
    if (v != nullptr && !find_alloc((uintptr_t)v, &start)) {
      err = "argument " + std::to_string(i) + " (" + hex((uintptr_t)v) + ") points into no allocation";
      return false;
    }
  }
  return true;
}

template <typename... A, size_t... I>
static bool bind_args(void (*f)(A...), void** p, std::function<void()>& out, std::string& err, std::index_sequence<I...>) {
  std::tuple<std::decay_t<A>...> args(*static_cast<std::decay_t<A>*>(p[I])...);
  bool ok = true;
  ((ok = ok && arg_ok(std::get<I>(args), int(I), err)), ...);
  if (!ok) return false;
  out = [f, args]() { std::apply(f, args); };
  return true;
}

template <typename... A>
static KernelEntry kernel_entry(const char* name, void (*f)(A...)) {
  return KernelEntry{name, [f](void** p, std::function<void()>& out, std::string& err) {
                       if (sizeof...(A) > 0 && p == nullptr) {
                         err = "null argument array";
                         return false;
                       }
                       return bind_args(f, p, out, err, std::index_sequence_for<A...>{});
                     }};
}

// kernels_gen.inc, written by the test, includes every kernel source and
// defines kernel_table and kernel_table_size from kernel_entry.
#include "kernels_gen.inc"

struct Module {
  Ctx* ctx;
};

EXPORT int cuModuleLoadData(void** m, const void* image) {
  NEED_CTX();
  const char* img = static_cast<const char*>(image);
  const char* magic = "MEMTRAIN-FAKE-IMAGE ";
  if (!img || strncmp(img, magic, strlen(magic)) != 0) return fail(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: not an image from the fake NVRTC");
  int arch = 0;
  if (sscanf(img + strlen(magic), "sm_%d", &arch) != 1 && sscanf(img + strlen(magic), "compute_%d", &arch) != 1) {
    return fail(CUDA_ERROR_INVALID_IMAGE, "cuModuleLoadData: no target in the image");
  }
  if (arch > 90) return fail(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData: image for a newer GPU than sm_90");
  Module* mod = new Module{current};
  std::lock_guard<std::mutex> l(handles_mu);
  modules.insert(mod);
  *m = mod;
  return CUDA_SUCCESS;
}
EXPORT int cuModuleUnload(void* m) {
  NEED_CTX();
  std::lock_guard<std::mutex> l(handles_mu);
  if (!modules.erase(m)) return fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleUnload: unknown module");
  delete static_cast<Module*>(m);
  return CUDA_SUCCESS;
}
EXPORT int cuModuleGetFunction(const KernelEntry** f, void* m, const char* name) {
  NEED_CTX();
  if (!known(modules, m)) return fail(CUDA_ERROR_INVALID_HANDLE, "cuModuleGetFunction: unknown module");
  if (static_cast<Module*>(m)->ctx != current) return fail(CUDA_ERROR_INVALID_CONTEXT, "cuModuleGetFunction: module of another context");
  for (size_t i = 0; i < kernel_table_size; i++) {
    if (strcmp(kernel_table[i].name, name) == 0) {
      *f = &kernel_table[i];
      return CUDA_SUCCESS;
    }
  }
  return fail(CUDA_ERROR_NOT_FOUND, std::string("cuModuleGetFunction: no kernel ") + name);
}

static std::mutex launch_mu;  // kernels share the fibers and their __shared__ statics

EXPORT int cuLaunchKernel(const KernelEntry* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                          unsigned bz, unsigned shared, void* s, void** params, void** extra) {
  NEED_CTX();
  if (int r = stream_ok(s, "cuLaunchKernel")) return r;
  bool known_fn = false;
  for (size_t i = 0; i < kernel_table_size; i++) known_fn |= f == &kernel_table[i];
  if (!known_fn) return fail(CUDA_ERROR_INVALID_HANDLE, "cuLaunchKernel: unknown function");
  std::string where = std::string("cuLaunchKernel(") + f->name + "): ";
  if (extra) return fail(CUDA_ERROR_INVALID_VALUE, where + "extra is not used by memtrain");
  if (shared) return fail(CUDA_ERROR_INVALID_VALUE, where + "dynamic shared memory is not used by memtrain");
  unsigned long threads = (unsigned long)bx * by * bz;
  if (threads == 0 || threads > 1024) return fail(CUDA_ERROR_INVALID_VALUE, where + "block of " + std::to_string(threads) + " threads");
  if (gx == 0 || gy == 0 || gz == 0 || gx > 0x7fffffffu || gy > 65535 || gz > 65535) {
    return fail(CUDA_ERROR_INVALID_VALUE, where + "grid " + std::to_string(gx) + "×" + std::to_string(gy) + "×" + std::to_string(gz));
  }
  std::function<void()> body;
  std::string err;
  if (!f->bind(params, body, err)) return fail(CUDA_ERROR_INVALID_VALUE, where + err);
  std::lock_guard<std::mutex> l(launch_mu);
  if (getenv("MEMTRAIN_FAKECUDA_TRACE")) fprintf(stderr, "fakecuda: launch %s grid %u×%u×%u block %u×%u×%u\n", f->name, gx, gy, gz, bx, by, bz);
  kernel_name = f->name;
  kernel_error.clear();
  mma_permuted = mma_permute_requested.load() != 0;
  block_body = &body;
  gridDim = emu_dim3{gx, gy, gz};
  blockDim = emu_dim3{bx, by, bz};
  for (unsigned z = 0; z < gz; z++) {
    for (unsigned y = 0; y < gy; y++) {
      for (unsigned x = 0; x < gx; x++) {
        blockIdx = emu_dim3{x, y, z};
        if (!run_block(int(threads))) return fail(CUDA_ERROR_LAUNCH_FAILED, kernel_error);
      }
    }
  }
  return CUDA_SUCCESS;
}

// --- Warp primitive tests (begin) --------------------------------------------
// Entry points for engine/cuda's tests of the warp collectives
// (warp_test.go): each runs one warp of 32 fibers, as a one-block launch
// would, through the primitive under test, and returns CUDA_SUCCESS or
// CUDA_ERROR_LAUNCH_FAILED with the misuse found (cuGetErrorString).

static int run_test_warp(const char* name, const std::function<void()>& body) {
  std::lock_guard<std::mutex> l(launch_mu);
  kernel_name = name;
  kernel_error.clear();
  mma_permuted = mma_permute_requested.load() != 0;
  block_body = &body;
  gridDim = emu_dim3{1, 1, 1};
  blockDim = emu_dim3{32, 1, 1};
  blockIdx = emu_dim3{0, 0, 0};
  if (!run_block(32)) return fail(CUDA_ERROR_LAUNCH_FAILED, kernel_error);
  return CUDA_SUCCESS;
}

// test_smem stands for shared memory: 64 rows of 8 bf16.
alignas(16) static uint16_t test_smem[64 * 8];

// fakecuda_test_ldmatrix copies mem (64 rows of 8 bf16) into shared
// memory and runs ldmatrix .x{n} (.trans when trans) with lane l giving
// row rows[l]; out[4l+i] is lane l's register i (0 past n).
EXPORT int fakecuda_test_ldmatrix(int n, int trans, const uint16_t* mem, const int* rows, uint32_t* out) {
  memcpy(test_smem, mem, sizeof test_smem);
  return run_test_warp("fakecuda_test_ldmatrix", [&] {
    int lane = threadIdx.x;
    unsigned r[4] = {0, 0, 0, 0};
    emu_ldmatrix(r, test_smem + 8 * rows[lane], n, trans != 0);
    for (int i = 0; i < 4; i++) out[4 * lane + i] = r[i];
  });
}

// fakecuda_test_mma runs mma.sync m16n8k16 with lane l's fragments a[4l..],
// b[2l..] and c[4l..], its d into d[4l..].
EXPORT int fakecuda_test_mma(const uint32_t* a, const uint32_t* b, const float* c, float* d) {
  return run_test_warp("fakecuda_test_mma", [&] {
    int lane = threadIdx.x;
    float acc[4];
    for (int i = 0; i < 4; i++) acc[i] = c[4 * lane + i];
    emu_mma_bf16(acc, a + 4 * lane, b + 2 * lane);
    for (int i = 0; i < 4; i++) d[4 * lane + i] = acc[i];
  });
}

// fakecuda_test_misuse runs one misuse of the primitives, which must fail:
// 0 a lane returns before an mma, 1 half a warp at a shuffle and half at
// an mma, 2 cp.async.wait_group 1 with no group in flight, 3 a wait with
// copies not committed, 4 a thread that returns with a group in flight, 5
// lanes at ldmatrix .x4 and .x2.
EXPORT int fakecuda_test_misuse(int which) {
  return run_test_warp("fakecuda_test_misuse", [which] {
    int lane = threadIdx.x;
    unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float d[4] = {0, 0, 0, 0};
    switch (which) {
      case 0:
        if (lane == 31) return;
        emu_mma_bf16(d, a, b);
        break;
      case 1:
        if (lane < 16) {
          __shfl_xor_sync(0xffffffffu, 1.0f, 1);
        } else {
          emu_mma_bf16(d, a, b);
        }
        break;
      case 2:
        emu_cp_async_wait(1);
        break;
      case 3:
        cp_open[cur_fiber].push_back(CopyOp{test_smem, test_smem});
        emu_cp_async_wait(0);
        break;
      case 4:
        cp_open[cur_fiber].push_back(CopyOp{test_smem, test_smem});
        emu_cp_async_commit();
        break;
      case 5: {
        unsigned r[4];
        emu_ldmatrix(r, test_smem + 8 * (lane % 16), lane < 16 ? 4 : 2, false);
        break;
      }
    }
  });
}
// fakecuda_test_counter_wait runs one thread's counter_wait for the
// counter at p (device memory) to reach want.
EXPORT int fakecuda_test_counter_wait(const int* p, int want) {
  return run_test_warp("fakecuda_test_counter_wait", [p, want] {
    if (threadIdx.x == 0) emu_counter_wait(p, want);
  });
}
// --- Warp primitive tests (end) ----------------------------------------------

// ---------------------------------------------------------------------------
// cuBLAS: cublasGemmStridedBatchedEx as a loop, with cuBLAS's argument
// checks. Float32 inputs are rounded as the compute type says (bf16 or
// TF32 tensor cores), so a run in those modes has their precision.

enum { CUBLAS_OK = 0, CUBLAS_NOT_INITIALIZED = 1, CUBLAS_INVALID_VALUE = 7, CUBLAS_NOT_SUPPORTED = 15 };

struct Blas {
  Ctx* ctx;
  Stream* stream;
  // The workspace cublasSetWorkspace gave, checked to lie in one
  // allocation of the handle's context (the loop below needs none).
  void* workspace;
  size_t workspace_bytes;
};
static std::set<void*> blas_handles;

static float bf16_value(uint16_t h) { return __uint_as_float(unsigned(h) << 16); }
static uint16_t to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
static float to_tf32(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) >= 0x7f800000u) return f;
  u += 0xfffu + ((u >> 13) & 1u);
  return __uint_as_float(u & ~0x1fffu);
}

EXPORT int cublasCreate_v2(void** h) {
  if (!current) return fail(CUBLAS_NOT_INITIALIZED, "cublasCreate: no current context");
  Blas* b = new Blas{current, nullptr, nullptr, 0};
  std::lock_guard<std::mutex> l(handles_mu);
  blas_handles.insert(b);
  *h = b;
  return CUBLAS_OK;
}
EXPORT int cublasDestroy_v2(void* h) {
  std::lock_guard<std::mutex> l(handles_mu);
  if (!blas_handles.erase(h)) return CUBLAS_NOT_INITIALIZED;
  delete static_cast<Blas*>(h);
  return CUBLAS_OK;
}
EXPORT int cublasSetStream_v2(void* h, void* s) {
  if (!known(blas_handles, h)) return CUBLAS_NOT_INITIALIZED;
  if (!known(streams, s)) return CUBLAS_INVALID_VALUE;
  static_cast<Blas*>(h)->stream = static_cast<Stream*>(s);
  return CUBLAS_OK;
}
EXPORT int cublasSetWorkspace_v2(void* h, void* ws, size_t bytes) {
  if (!known(blas_handles, h)) return CUBLAS_NOT_INITIALIZED;
  if (bytes > 0 && !in_range((uintptr_t)ws, bytes)) return fail(CUBLAS_INVALID_VALUE, "cublasSetWorkspace: the workspace is not device memory");
  Blas* b = static_cast<Blas*>(h);
  b->workspace = ws;
  b->workspace_bytes = bytes;
  return CUBLAS_OK;
}
EXPORT int cublasGetVersion_v2(void* h, int* v) {
  if (!known(blas_handles, h)) return CUBLAS_NOT_INITIALIZED;
  *v = 120400;
  return CUBLAS_OK;
}

EXPORT int cublasGemmStridedBatchedEx(void* h, int transa, int transb, int m, int n, int k, const void* alpha,
                                      const void* A, int atype, int lda, long long stride_a, const void* B, int btype,
                                      int ldb, long long stride_b, const void* beta, void* C, int ctype, int ldc,
                                      long long stride_c, int batch, int compute, int algo) {
  if (!known(blas_handles, h)) return fail(CUBLAS_NOT_INITIALIZED, "cublasGemmStridedBatchedEx: unknown handle");
  Blas* bl = static_cast<Blas*>(h);
  if (bl->ctx != current) return fail(CUBLAS_NOT_INITIALIZED, "cublasGemmStridedBatchedEx: the handle's context is not current");
  if (!bl->stream || bl->stream->ctx != current) return fail(CUBLAS_INVALID_VALUE, "cublasGemmStridedBatchedEx: no stream of this context set");
  auto bad = [](const std::string& why) { return fail(CUBLAS_INVALID_VALUE, "cublasGemmStridedBatchedEx: " + why); };
  if ((transa != 0 && transa != 1) || (transb != 0 && transb != 1)) return bad("transpose flag");
  if (m < 0 || n < 0 || k < 0 || batch < 0) return bad("negative size");
  int arows = transa == 0 ? m : k, acols = transa == 0 ? k : m;
  int brows = transb == 0 ? k : n, bcols = transb == 0 ? n : k;
  if (lda < std::max(1, arows)) return bad("lda " + std::to_string(lda) + " < " + std::to_string(arows));
  if (ldb < std::max(1, brows)) return bad("ldb " + std::to_string(ldb) + " < " + std::to_string(brows));
  if (ldc < std::max(1, m)) return bad("ldc " + std::to_string(ldc) + " < " + std::to_string(m));
  if (algo != -1) return bad("algo");
  if (atype != btype) return fail(CUBLAS_NOT_SUPPORTED, "cublasGemmStridedBatchedEx: A and B types differ");
  if (atype == 0) {
    if (ctype != 0 || (compute != 68 && compute != 75 && compute != 77)) return fail(CUBLAS_NOT_SUPPORTED, "cublasGemmStridedBatchedEx: float32 type mix");
  } else if (atype == 14) {
    if ((ctype != 0 && ctype != 14) || compute != 68) return fail(CUBLAS_NOT_SUPPORTED, "cublasGemmStridedBatchedEx: bf16 type mix");
  } else {
    return fail(CUBLAS_NOT_SUPPORTED, "cublasGemmStridedBatchedEx: data type");
  }
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_OK;
  size_t asz = atype == 14 ? 2 : 4, csz = ctype == 14 ? 2 : 4;
  auto extent = [](int batch, long long stride, int rows, int cols, int ld) {
    return (size_t)((batch - 1) * stride + (long long)(cols - 1) * ld + rows);
  };
  if (k > 0) {
    if (!in_range((uintptr_t)A, extent(batch, stride_a, arows, acols, lda) * asz)) return bad("A outside its allocation");
    if (!in_range((uintptr_t)B, extent(batch, stride_b, brows, bcols, ldb) * asz)) return bad("B outside its allocation");
  }
  if (!in_range((uintptr_t)C, extent(batch, stride_c, m, n, ldc) * csz)) return bad("C outside its allocation");
  float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  auto in = [&](const void* p, long long i) -> double {
    float v = atype == 14 ? bf16_value(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
    if (compute == 75) v = bf16_value(to_bf16(v));
    if (compute == 77) v = to_tf32(v);
    return v;
  };
  for (int b = 0; b < batch; b++) {
    const char* Ab = static_cast<const char*>(A) + b * stride_a * (long long)asz;
    const char* Bb = static_cast<const char*>(B) + b * stride_b * (long long)asz;
    char* Cb = static_cast<char*>(C) + b * stride_c * (long long)csz;
    for (int j = 0; j < n; j++) {
      for (int i = 0; i < m; i++) {
        double acc = 0;
        for (int l = 0; l < k; l++) {
          double a = in(Ab, transa == 0 ? i + (long long)l * lda : l + (long long)i * lda);
          double bv = in(Bb, transb == 0 ? l + (long long)j * ldb : j + (long long)l * ldb);
          acc += a * bv;
        }
        long long at = i + (long long)j * ldc;
        double c = 0;
        if (be != 0) c = ctype == 14 ? bf16_value(((uint16_t*)Cb)[at]) : ((float*)Cb)[at];
        float r = float(al * acc + be * c);
        if (ctype == 14) {
          ((uint16_t*)Cb)[at] = to_bf16(r);
        } else {
          ((float*)Cb)[at] = r;
        }
      }
    }
  }
  return CUBLAS_OK;
}

// ---------------------------------------------------------------------------
// NVRTC: the kernels are compiled into this library already; "compiling"
// checks that the source is the one they were built from and the options,
// and gives an image naming the target.

enum { NVRTC_OK = 0, NVRTC_INVALID_INPUT = 3, NVRTC_INVALID_PROGRAM = 4, NVRTC_INVALID_OPTION = 5, NVRTC_COMPILATION = 6 };

struct Program {
  std::string src, log, image;
  bool compiled = false, cubin = false;
};
static std::set<void*> programs;

static uint64_t fnv1a(const char* s, size_t n) {
  uint64_t h = 14695981039346656037ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ull;
  }
  return h;
}

static const int kArchs[] = {50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90};

EXPORT int nvrtcVersion(int* major, int* minor) {
  *major = 12;
  *minor = 4;
  return NVRTC_OK;
}
EXPORT int nvrtcGetNumSupportedArchs(int* n) {
  *n = sizeof kArchs / sizeof kArchs[0];
  return NVRTC_OK;
}
EXPORT int nvrtcGetSupportedArchs(int* a) {
  memcpy(a, kArchs, sizeof kArchs);
  return NVRTC_OK;
}
EXPORT const char* nvrtcGetErrorString(int r) {
  switch (r) {
    case NVRTC_OK: return "NVRTC_SUCCESS";
    case NVRTC_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
    case NVRTC_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
    case NVRTC_INVALID_OPTION: return "NVRTC_ERROR_INVALID_OPTION";
    case NVRTC_COMPILATION: return "NVRTC_ERROR_COMPILATION";
  }
  return "NVRTC_ERROR_UNKNOWN";
}
EXPORT int nvrtcCreateProgram(void** p, const char* src, const char* name, int nheaders, const char* const* headers,
                              const char* const* names) {
  if (!p || !src) return NVRTC_INVALID_INPUT;
  Program* prog = new Program;
  prog->src = src;
  bool common = false;
  for (int i = 0; i < nheaders; i++) {
    if (strcmp(names[i], "common.cuh") == 0) {
      common = true;
      if (fnv1a(headers[i], strlen(headers[i])) != EXPECTED_HEADER_HASH) prog->log += "common.cuh differs from the one this library was built with. ";
    }
  }
  if (!common) prog->log += "no common.cuh among the headers. ";
  if (fnv1a(src, strlen(src)) != EXPECTED_SOURCE_HASH) prog->log += "the source differs from the one this library was built with. ";
  std::lock_guard<std::mutex> l(handles_mu);
  programs.insert(prog);
  *p = prog;
  return NVRTC_OK;
}
EXPORT int nvrtcCompileProgram(void* p, int nopts, const char* const* opts) {
  if (!known(programs, p)) return NVRTC_INVALID_PROGRAM;
  Program* prog = static_cast<Program*>(p);
  std::string target;
  for (int i = 0; i < nopts; i++) {
    const char* o = opts[i];
    const char* flag = "--gpu-architecture=";
    if (strncmp(o, flag, strlen(flag)) == 0) {
      target = o + strlen(flag);
    } else if (strcmp(o, "--fmad=false") == 0 || strcmp(o, "--fmad=true") == 0) {
      // The kernels here are compiled with -ffp-contract=off: never fused.
    } else {
      prog->log += std::string("unknown option ") + o + ". ";
      return NVRTC_INVALID_OPTION;
    }
  }
  if (target.rfind("sm_", 0) != 0 && target.rfind("compute_", 0) != 0) {
    prog->log += "no --gpu-architecture. ";
    return NVRTC_INVALID_OPTION;
  }
  if (!prog->log.empty()) return NVRTC_COMPILATION;
  prog->compiled = true;
  prog->cubin = target[0] == 's';
  prog->image = "MEMTRAIN-FAKE-IMAGE " + target;
  prog->image.push_back('\0');
  return NVRTC_OK;
}
EXPORT int nvrtcGetProgramLogSize(void* p, size_t* n) {
  if (!known(programs, p)) return NVRTC_INVALID_PROGRAM;
  *n = static_cast<Program*>(p)->log.size() + 1;
  return NVRTC_OK;
}
EXPORT int nvrtcGetProgramLog(void* p, char* out) {
  if (!known(programs, p)) return NVRTC_INVALID_PROGRAM;
  const std::string& log = static_cast<Program*>(p)->log;
  memcpy(out, log.c_str(), log.size() + 1);
  return NVRTC_OK;
}
static int image_of(void* p, bool cubin, size_t* n, char* out) {
  if (!known(programs, p)) return NVRTC_INVALID_PROGRAM;
  Program* prog = static_cast<Program*>(p);
  if (!prog->compiled || prog->cubin != cubin) return NVRTC_INVALID_INPUT;
  if (n) *n = prog->image.size();
  if (out) memcpy(out, prog->image.data(), prog->image.size());
  return NVRTC_OK;
}
EXPORT int nvrtcGetCUBINSize(void* p, size_t* n) { return image_of(p, true, n, nullptr); }
EXPORT int nvrtcGetCUBIN(void* p, char* out) { return image_of(p, true, nullptr, out); }
EXPORT int nvrtcGetPTXSize(void* p, size_t* n) { return image_of(p, false, n, nullptr); }
EXPORT int nvrtcGetPTX(void* p, char* out) { return image_of(p, false, nullptr, out); }
EXPORT int nvrtcDestroyProgram(void** p) {
  std::lock_guard<std::mutex> l(handles_mu);
  if (!p || !programs.erase(*p)) return NVRTC_INVALID_PROGRAM;
  delete static_cast<Program*>(*p);
  *p = nullptr;
  return NVRTC_OK;
}

// ---------------------------------------------------------------------------
// NCCL: a clique of ranks meets in memory. Each collective waits until
// every rank of the clique has posted its own; the last to arrive does the
// work for all and wakes the others. Between ncclGroupStart and
// ncclGroupEnd a thread's collectives are queued and meet in order at
// ncclGroupEnd (real NCCL launches a group's operations together; a test
// grouping several communicators in different orders on different ranks
// would hang here where NCCL might not, which memtrain never does).
//
// When fakecuda_nccl_log_start has been called, every collective and split
// is also logged as it is issued, per device (the calling thread's
// context): which communicator (a number shared by the clique's ranks), the
// operation, count, type, root, the thread's group and the stream, for
// tests that check the ranks' orders (fakecuda_nccl_log_read).

enum { NCCL_OK = 0, NCCL_INVALID_ARGUMENT = 4, NCCL_INVALID_USAGE = 5 };
enum { OP_ALLREDUCE, OP_REDUCESCATTER, OP_ALLGATHER, OP_BROADCAST, OP_SPLIT };

typedef struct {
  char internal[128];
} ncclUniqueId;

struct Clique;
struct NcclComm {
  Clique* clique;
  int rank;
  int dev;
};

struct Post {
  int op;
  const void* send;
  void* recv;
  size_t count;
  int dtype, root, color, key;
  Stream* stream;
};

static std::mutex clique_mu;
static uint64_t cliques_made;

struct Clique {
  uint64_t id;  // names the communicator in the log
  int n;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Post> posts;
  std::vector<int> results;
  std::vector<NcclComm*> split;  // each rank's new communicator
  int arrived = 0;
  uint64_t generation = 0;
  explicit Clique(int n) : n(n), posts(n), results(n), split(n) {
    std::lock_guard<std::mutex> l(clique_mu);
    id = ++cliques_made;
  }
};

static std::set<void*> nccl_comms;

static size_t nccl_size(int dtype) { return dtype == 9 ? 2 : 4; }
static double nccl_get(const void* p, int dtype, size_t i) {
  if (dtype == 9) return bf16_value(static_cast<const uint16_t*>(p)[i]);
  if (dtype == 2) return static_cast<const int32_t*>(p)[i];
  return static_cast<const float*>(p)[i];
}
static void nccl_put(void* p, int dtype, size_t i, double v) {
  if (dtype == 9) {
    static_cast<uint16_t*>(p)[i] = to_bf16(float(v));
  } else if (dtype == 2) {
    static_cast<int32_t*>(p)[i] = int32_t(v);
  } else {
    static_cast<float*>(p)[i] = float(v);
  }
}

// perform runs a collective once every rank has posted it (with the
// clique's lock held). It reports each rank's result.
static void perform(Clique* c) {
  const Post& p0 = c->posts[0];
  for (int r = 0; r < c->n; r++) {
    const Post& p = c->posts[r];
    c->results[r] = NCCL_OK;
    if (p.op != p0.op || (p.op != OP_SPLIT && (p.count != p0.count || p.dtype != p0.dtype || p.root != p0.root))) {
      for (int q = 0; q < c->n; q++) c->results[q] = fail(NCCL_INVALID_USAGE, "nccl: ranks called different collectives");
      return;
    }
  }
  int n = c->n;
  size_t cnt = p0.count;
  int dt = p0.dtype;
  if (p0.op == OP_SPLIT) {
    std::map<int, std::vector<std::pair<std::pair<int, int>, int>>> by_color;  // color → ((key, rank), rank)
    for (int r = 0; r < n; r++) {
      c->split[r] = nullptr;
      if (c->posts[r].color >= 0) by_color[c->posts[r].color].push_back({{c->posts[r].key, r}, r});
    }
    for (auto& kv : by_color) {
      std::sort(kv.second.begin(), kv.second.end());
      Clique* sub = new Clique(int(kv.second.size()));
      for (size_t i = 0; i < kv.second.size(); i++) {
        int r = kv.second[i].second;
        NcclComm* nc = new NcclComm{sub, int(i), 0};
        std::lock_guard<std::mutex> l(handles_mu);
        nccl_comms.insert(nc);
        c->split[r] = nc;
      }
    }
    return;
  }
  std::vector<double> sum;
  switch (p0.op) {
    case OP_ALLREDUCE:
      sum.assign(cnt, 0);
      for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < cnt; i++) sum[i] = double(float(sum[i] + nccl_get(c->posts[r].send, dt, i)));
      }
      for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < cnt; i++) nccl_put(c->posts[r].recv, dt, i, sum[i]);
      }
      break;
    case OP_REDUCESCATTER:  // count is per rank
      sum.assign(cnt * n, 0);
      for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < cnt * n; i++) sum[i] = double(float(sum[i] + nccl_get(c->posts[r].send, dt, i)));
      }
      for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < cnt; i++) nccl_put(c->posts[r].recv, dt, i, sum[r * cnt + i]);
      }
      break;
    case OP_ALLGATHER:  // count is per rank
      sum.assign(cnt * n, 0);
      for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < cnt; i++) sum[r * cnt + i] = nccl_get(c->posts[r].send, dt, i);
      }
      for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < cnt * n; i++) nccl_put(c->posts[r].recv, dt, i, sum[i]);
      }
      break;
    case OP_BROADCAST:
      sum.assign(cnt, 0);
      for (size_t i = 0; i < cnt; i++) sum[i] = nccl_get(c->posts[p0.root].send, dt, i);
      for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < cnt; i++) nccl_put(c->posts[r].recv, dt, i, sum[i]);
      }
      break;
  }
}

static const char* const op_names[] = {"all-reduce", "reduce-scatter", "all-gather", "broadcast", "split"};

// The log of issued collectives, per device.
struct LogEntry {
  uint64_t comm;
  int size, rank, op;
  size_t count;
  int dtype, root;
  uint64_t group;  // the thread's group, 0 outside one
  const void* stream;
};
static std::mutex log_mu;
static bool log_on;
static std::map<int, std::vector<LogEntry>> nccl_log;

// A thread's group: its depth, its number, and the collectives queued.
static thread_local int group_depth;
static thread_local uint64_t groups_started;
static thread_local std::vector<std::pair<NcclComm*, Post>> group_ops;

static void log_issue(NcclComm* comm, const Post& post) {
  std::lock_guard<std::mutex> l(log_mu);
  if (!log_on || !current) return;
  nccl_log[current->dev].push_back(LogEntry{comm->clique->id, comm->clique->n, comm->rank, post.op, post.count,
                                            post.dtype, post.root, group_depth > 0 ? groups_started : 0, post.stream});
}

// meet posts this rank's part of a collective and waits for the others.
static int meet(NcclComm* comm, const Post& post) {
  Clique* c = comm->clique;
  std::unique_lock<std::mutex> l(c->mu);
  uint64_t gen = c->generation;
  c->posts[comm->rank] = post;
  if (++c->arrived == c->n) {
    perform(c);
    c->arrived = 0;
    c->generation++;
    c->cv.notify_all();
  } else {
    c->cv.wait(l, [&] { return c->generation != gen; });
  }
  return c->results[comm->rank];
}

// issue logs a collective and meets the other ranks at once, or at
// ncclGroupEnd inside a group.
static int issue(NcclComm* comm, const Post& post) {
  log_issue(comm, post);
  if (group_depth > 0) {
    group_ops.push_back({comm, post});
    return NCCL_OK;
  }
  return meet(comm, post);
}

static int comm_ok(void* comm, void* stream, const char* fn) {
  if (!known(nccl_comms, comm)) return fail(NCCL_INVALID_ARGUMENT, std::string(fn) + ": unknown communicator");
  if (!current) return fail(NCCL_INVALID_USAGE, std::string(fn) + ": no context current on this thread");
  if (stream && (!known(streams, stream) || static_cast<Stream*>(stream)->ctx != current)) {
    return fail(NCCL_INVALID_ARGUMENT, std::string(fn) + ": stream not of the current context");
  }
  return NCCL_OK;
}

static int buffers_ok(const void* send, size_t send_n, const void* recv, size_t recv_n, int dtype, const char* fn) {
  if (dtype != 2 && dtype != 7 && dtype != 9) return fail(NCCL_INVALID_ARGUMENT, std::string(fn) + ": data type");
  size_t z = nccl_size(dtype);
  if (send_n && !in_range((uintptr_t)send, send_n * z)) return fail(NCCL_INVALID_ARGUMENT, std::string(fn) + ": send buffer outside its allocation");
  if (recv_n && !in_range((uintptr_t)recv, recv_n * z)) return fail(NCCL_INVALID_ARGUMENT, std::string(fn) + ": receive buffer outside its allocation");
  return NCCL_OK;
}

EXPORT int ncclGetVersion(int* v) {
  *v = 21903;
  return NCCL_OK;
}
EXPORT const char* ncclGetErrorString(int r) {
  static thread_local std::string msg;
  std::lock_guard<std::mutex> l(err_mu);
  msg = "fakecuda nccl error " + std::to_string(r) + ": " + err_detail;
  return msg.c_str();
}

static std::mutex ids_mu;
static std::map<std::string, Clique*> pending;  // cliques being formed, by id
static uint64_t next_id;

EXPORT int ncclGetUniqueId(ncclUniqueId* id) {
  std::lock_guard<std::mutex> l(ids_mu);
  memset(id->internal, 0, sizeof id->internal);
  snprintf(id->internal, sizeof id->internal, "fakecuda-nccl-%llu", (unsigned long long)++next_id);
  return NCCL_OK;
}

EXPORT int ncclCommInitRank(NcclComm** comm, int nranks, ncclUniqueId id, int rank) {
  if (!current) return fail(NCCL_INVALID_USAGE, "ncclCommInitRank: no context current on this thread");
  if (nranks < 1 || rank < 0 || rank >= nranks) return fail(NCCL_INVALID_ARGUMENT, "ncclCommInitRank: rank");
  if (strncmp(id.internal, "fakecuda-nccl-", 14) != 0) return fail(NCCL_INVALID_ARGUMENT, "ncclCommInitRank: not an id from ncclGetUniqueId");
  Clique* c;
  {
    std::lock_guard<std::mutex> l(ids_mu);
    std::string key(id.internal, sizeof id.internal);
    c = pending[key];
    if (!c) c = pending[key] = new Clique(nranks);
  }
  if (c->n != nranks) return fail(NCCL_INVALID_USAGE, "ncclCommInitRank: ranks disagree on the size");
  NcclComm* nc = new NcclComm{c, rank, current->dev};
  {
    std::lock_guard<std::mutex> l(handles_mu);
    nccl_comms.insert(nc);
  }
  // Joining is a meeting of the ranks, like a collective.
  int r = meet(nc, Post{OP_SPLIT, nullptr, nullptr, 0, 0, 0, -1, 0, nullptr});
  *comm = nc;
  return r;
}

EXPORT int ncclCommInitAll(NcclComm** comms, int ndev, const int* devs) {
  if (ndev < 1) return fail(NCCL_INVALID_ARGUMENT, "ncclCommInitAll: no devices");
  Clique* c = new Clique(ndev);
  for (int i = 0; i < ndev; i++) {
    if (devs[i] < 0 || devs[i] >= kDevices) return fail(NCCL_INVALID_ARGUMENT, "ncclCommInitAll: no such device");
    comms[i] = new NcclComm{c, i, devs[i]};
    std::lock_guard<std::mutex> l(handles_mu);
    nccl_comms.insert(comms[i]);
  }
  return NCCL_OK;
}
EXPORT int ncclCommDestroy(NcclComm* comm) {
  std::lock_guard<std::mutex> l(handles_mu);
  if (!nccl_comms.erase(comm)) return fail(NCCL_INVALID_ARGUMENT, "ncclCommDestroy: unknown communicator");
  return NCCL_OK;
}
EXPORT int ncclCommCount(NcclComm* comm, int* n) {
  if (!known(nccl_comms, comm)) return fail(NCCL_INVALID_ARGUMENT, "ncclCommCount: unknown communicator");
  *n = comm->clique->n;
  return NCCL_OK;
}
EXPORT int ncclCommUserRank(NcclComm* comm, int* r) {
  if (!known(nccl_comms, comm)) return fail(NCCL_INVALID_ARGUMENT, "ncclCommUserRank: unknown communicator");
  *r = comm->rank;
  return NCCL_OK;
}
EXPORT int ncclCommSplit(NcclComm* comm, int color, int key, NcclComm** out, void* config) {
  if (int r = comm_ok(comm, nullptr, "ncclCommSplit")) return r;
  if (config) return fail(NCCL_INVALID_ARGUMENT, "ncclCommSplit: config is not used by memtrain");
  if (group_depth > 0) return fail(NCCL_INVALID_USAGE, "ncclCommSplit: inside a group (not emulated)");
  Post post{OP_SPLIT, nullptr, nullptr, 0, 0, 0, color, key, nullptr};
  log_issue(comm, post);
  int r = meet(comm, post);
  *out = comm->clique->split[comm->rank];
  return r;
}
EXPORT int ncclAllReduce(const void* send, void* recv, size_t count, int dtype, int op, NcclComm* comm, void* stream) {
  if (int r = comm_ok(comm, stream, "ncclAllReduce")) return r;
  if (op != 0) return fail(NCCL_INVALID_ARGUMENT, "ncclAllReduce: only sums are emulated");
  if (int r = buffers_ok(send, count, recv, count, dtype, "ncclAllReduce")) return r;
  return issue(comm, Post{OP_ALLREDUCE, send, recv, count, dtype, 0, 0, 0, static_cast<Stream*>(stream)});
}
EXPORT int ncclReduceScatter(const void* send, void* recv, size_t count, int dtype, int op, NcclComm* comm, void* stream) {
  if (int r = comm_ok(comm, stream, "ncclReduceScatter")) return r;
  if (op != 0) return fail(NCCL_INVALID_ARGUMENT, "ncclReduceScatter: only sums are emulated");
  if (int r = buffers_ok(send, count * comm->clique->n, recv, count, dtype, "ncclReduceScatter")) return r;
  return issue(comm, Post{OP_REDUCESCATTER, send, recv, count, dtype, 0, 0, 0, static_cast<Stream*>(stream)});
}
EXPORT int ncclAllGather(const void* send, void* recv, size_t count, int dtype, NcclComm* comm, void* stream) {
  if (int r = comm_ok(comm, stream, "ncclAllGather")) return r;
  if (int r = buffers_ok(send, count, recv, count * comm->clique->n, dtype, "ncclAllGather")) return r;
  return issue(comm, Post{OP_ALLGATHER, send, recv, count, dtype, 0, 0, 0, static_cast<Stream*>(stream)});
}
EXPORT int ncclBroadcast(const void* send, void* recv, size_t count, int dtype, int root, NcclComm* comm, void* stream) {
  if (int r = comm_ok(comm, stream, "ncclBroadcast")) return r;
  if (root < 0 || root >= comm->clique->n) return fail(NCCL_INVALID_ARGUMENT, "ncclBroadcast: root");
  if (int r = buffers_ok(send, count, recv, count, dtype, "ncclBroadcast")) return r;
  return issue(comm, Post{OP_BROADCAST, send, recv, count, dtype, root, 0, 0, static_cast<Stream*>(stream)});
}

EXPORT int ncclGroupStart() {
  if (group_depth++ == 0) groups_started++;
  return NCCL_OK;
}
EXPORT int ncclGroupEnd() {
  if (group_depth == 0) return fail(NCCL_INVALID_USAGE, "ncclGroupEnd: no group started");
  if (--group_depth > 0) return NCCL_OK;
  std::vector<std::pair<NcclComm*, Post>> ops;
  ops.swap(group_ops);
  int result = NCCL_OK;
  for (auto& op : ops) {
    int r = meet(op.first, op.second);
    if (result == NCCL_OK) result = r;
  }
  return result;
}

// fakecuda_nccl_log_start clears the log of issued collectives and starts
// logging (see the NCCL section's comment).
EXPORT void fakecuda_nccl_log_start() {
  std::lock_guard<std::mutex> l(log_mu);
  nccl_log.clear();
  log_on = true;
}

// fakecuda_nccl_log_read writes device dev's log into buf as text, one
// collective a line: "comm size rank op count dtype root group stream"
// (the stream's address, 0 for a split). It
// returns the length of the whole text, which it truncates to cap bytes;
// a caller with too small a buffer calls again with a larger one.
EXPORT size_t fakecuda_nccl_log_read(int dev, char* buf, size_t cap) {
  std::lock_guard<std::mutex> l(log_mu);
  std::string out;
  auto it = nccl_log.find(dev);
  if (it != nccl_log.end()) {
    char line[256];
    for (const LogEntry& e : it->second) {
      snprintf(line, sizeof line, "%llu %d %d %s %zu %d %d %llu %llu\n", (unsigned long long)e.comm, e.size, e.rank,
               op_names[e.op], e.count, e.dtype, e.root, (unsigned long long)e.group, (unsigned long long)(uintptr_t)e.stream);
      out += line;
    }
  }
  if (cap > 0) memcpy(buf, out.data(), std::min(cap, out.size()));
  return out.size();
}
