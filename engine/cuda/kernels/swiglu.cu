// swiglu.cu: the SwiGLU activation of Llama's MLP and its backward.
#include "common.cuh"

// sigmoid is 1/(1+e^−x). At x = −100 the exponential is +Inf and σ is 0;
// at x = 100 it underflows and σ is 1: neither overflows the products.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// swiglu computes out = silu(gate)·up with silu(x) = x·σ(x). out may be
// gate or up. VEC elements a thread at a time, as the elementwise kernels
// (elementwise.cu).
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) swiglu(void* out, int odt, const void* gate, int gdt, const void* up, int udt, i64 n) {
  bool vec = vec_at(out, odt, 0) && vec_at(gate, gdt, 0) && vec_at(up, udt, 0);
  for (i64 c = global_thread(); c < (n + VEC - 1) / VEC; c += grid_threads()) {
    i64 i = c * VEC;
    bool full = vec && i + VEC <= n;
    float g[VEC], u[VEC];
    load8(g, gate, gdt, i, n, full);
    load8(u, up, udt, i, n, full);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      g[k] = g[k] * sigmoid(g[k]) * u[k];
    }
    store8(out, odt, i, n, g, full);
  }
}

// swiglu_backward writes
//
//	dUp   = dOut·silu(gate)
//	dGate = dOut·up·σ(gate)·(1 + gate·(1 − σ(gate)))
//
// Each element is read before it is written, so dGate may be gate and dUp
// up or dOut.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) swiglu_backward(void* dgate, int dgdt, void* dup, int dudt, const void* dout, int ddt,
                                           const void* gate, int gdt, const void* up, int udt, i64 n) {
  bool vec = vec_at(dgate, dgdt, 0) && vec_at(dup, dudt, 0) && vec_at(dout, ddt, 0) && vec_at(gate, gdt, 0) &&
             vec_at(up, udt, 0);
  for (i64 c = global_thread(); c < (n + VEC - 1) / VEC; c += grid_threads()) {
    i64 i = c * VEC;
    bool full = vec && i + VEC <= n;
    float g[VEC], u[VEC], d[VEC];
    load8(g, gate, gdt, i, n, full);
    load8(u, up, udt, i, n, full);
    load8(d, dout, ddt, i, n, full);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      float s = sigmoid(g[k]);
      float dg = d[k] * u[k] * s * (1.0f + g[k] * (1.0f - s));
      u[k] = d[k] * g[k] * s;
      g[k] = dg;
    }
    store8(dgate, dgdt, i, n, g, full);
    store8(dup, dudt, i, n, u, full);
  }
}
