// bias.cu: a linear layer's bias, added to its output and summed from the
// output's gradient (engine.Backend's AddBias and BiasGrad). y and dy are
// rows of h elements, F32 or BF16; the bias F32 or BF16.
#include "common.cuh"

// add_bias computes y[r, j] += bias[j] over the n elements of y (rows of
// h), a grid-stride loop over chunks of VEC, each element's sum rounded
// once to y's dtype (as the CPU backend's, bit for bit). When h is a
// multiple of VEC and both tensors start 16-byte aligned, every chunk
// lies within a row and its VEC bias elements are consecutive: both load
// whole. Otherwise each element finds its column by itself.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) add_bias(void* y, int ydt, const void* bias, int bdt, i64 n, int h) {
  bool vec = h % VEC == 0 && vec_at(y, ydt, 0) && vec_at(bias, bdt, 0);
  for (i64 c = global_thread(); c < (n + VEC - 1) / VEC; c += grid_threads()) {
    i64 i = c * VEC;
    int j = (int)(i % h);  // the chunk's first column
    float v[VEC], b[VEC];
    load8(v, y, ydt, i, n, vec);
    if (vec) {
      load8(b, bias, bdt, j, h, true);
    } else {
      // The columns from j on, wrapping at the end of a row (a chunk
      // may span several rows of fewer than VEC).
      MT_UNROLL
      for (int k = 0; k < VEC; k++) {
        b[k] = i + k < n ? load(bias, bdt, j) : 0.0f;
        j = j + 1 == h ? 0 : j + 1;
      }
    }
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      v[k] = __fadd_rn(v[k], b[k]);
    }
    store8(y, ydt, i, n, v, vec);
  }
}

// bias_grad_partial sums dy over a chunk of rows for each column, in
// float32 with compensation: block (bx, by) covers VEC columns a thread
// from column (bx·blockDim.x + tid)·VEC, and rows [by·rows_per_chunk,
// (by+1)·rows_per_chunk), each row's VEC elements loaded at once. The
// chunks are fixed by the row count alone, so the sums do not depend on
// the device; rmsnorm_backward_dw_final then adds each column's chunks in
// order into db (RMSNormBackward's dw, whose partial sums these are with
// x·rstd = 1).
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) bias_grad_partial(float* partial, const void* dy, int gdt, i64 rows, int h, int rows_per_chunk) {
  int c0 = (blockIdx.x * blockDim.x + threadIdx.x) * VEC;
  if (c0 >= h) {
    return;
  }
  bool vec = h % VEC == 0 && vec_at(dy, gdt, 0) && vec_at(partial, DT_F32, 0);
  i64 r0 = (i64)blockIdx.y * rows_per_chunk, r1 = min64(rows, r0 + rows_per_chunk);
  float s[VEC], c[VEC];
  MT_UNROLL
  for (int k = 0; k < VEC; k++) {
    s[k] = 0;
    c[k] = 0;
  }
  for (i64 i = r0; i < r1; i++) {
    float g[VEC];
    load8(g, dy, gdt, i * h + c0, (i + 1) * h, vec);
    MT_UNROLL
    for (int k = 0; k < VEC; k++) {
      kahan_add(s[k], c[k], g[k]);
    }
  }
  MT_UNROLL
  for (int k = 0; k < VEC; k++) {
    s[k] = __fsub_rn(s[k], c[k]);
  }
  store8(partial, DT_F32, (i64)blockIdx.y * h + c0, (i64)(blockIdx.y + 1) * h, s, vec);
}
