// swiglu.cu: the SwiGLU activation of Llama's MLP and its backward.
#include "common.cuh"

// sigmoid is 1/(1+e^−x). At x = −100 the exponential is +Inf and σ is 0;
// at x = 100 it underflows and σ is 1: neither overflows the products.
__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// swiglu computes out = silu(gate)·up with silu(x) = x·σ(x). out may be
// gate or up.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) swiglu(void* out, int odt, const void* gate, int gdt, const void* up, int udt, i64 n) {
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    float g = load(gate, gdt, i);
    store(out, odt, i, g * sigmoid(g) * load(up, udt, i));
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
  for (i64 i = global_thread(); i < n; i += grid_threads()) {
    float g = load(gate, gdt, i), u = load(up, udt, i), d = load(dout, ddt, i);
    float s = sigmoid(g);
    store(dgate, dgdt, i, d * u * s * (1.0f + g * (1.0f - s)));
    store(dup, dudt, i, d * g * s);
  }
}
