// embedding.cu: the token embedding lookup and its backward.
#include "common.cuh"

// embedding gathers out[i] = table[ids[i]]: one block per token, threads
// over the h columns, VEC at a time. An id outside [0, v) gives a row of NaN (the host
// checks ids it knows; this is the guard for ids it does not).
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) embedding(void* out, int odt, const void* table, int tdt, const int* ids, int h, int v) {
  i64 row = blockIdx.x;
  int id = ids[row];
  bool ok = id >= 0 && id < v;
  i64 src = (i64)(ok ? id : 0) * h, dst = row * h;
  bool vec = h % VEC == 0 && vec_at(out, odt, dst) && vec_at(table, tdt, src);
  for (int c = threadIdx.x * VEC; c < h; c += blockDim.x * VEC) {
    float x[VEC];
    if (ok) {
      load8(x, table, tdt, src + c, src + h, vec);
    } else {
      MT_UNROLL
      for (int k = 0; k < VEC; k++) {
        x[k] = MT_NAN;
      }
    }
    store8(out, odt, dst + c, dst + h, x, vec);
  }
}

// embedding_backward adds dOut[i] into dTable[ids[i]] for every token i.
// The host sorts the token positions by id (stably): order lists them, and
// segment s, order[seg[s] : seg[s+1]], holds the positions of one id. A
// block owns one segment and a range of columns, VEC a thread, and adds
// the segment's rows in position order: no two threads write the same
// element, no atomics, and the sums are the CPU backend's, bit for bit.
extern "C" __global__ void __launch_bounds__(ELEMENT_THREADS) embedding_backward(void* dtable, int tdt, const void* dout, int odt, const int* ids,
                                              const int* order, const int* seg, int h) {
  int s = blockIdx.x;
  int c = (blockIdx.y * blockDim.x + threadIdx.x) * VEC;
  if (c >= h) {
    return;
  }
  int lo = seg[s], hi = seg[s + 1];
  i64 dst = (i64)ids[order[lo]] * h;
  bool vec = h % VEC == 0 && vec_at(dtable, tdt, 0) && vec_at(dout, odt, 0);
  float acc[VEC];
  load8(acc, dtable, tdt, dst + c, dst + h, vec);
  for (int k = lo; k < hi; k++) {
    i64 src = (i64)order[k] * h;
    float g[VEC];
    load8(g, dout, odt, src + c, src + h, vec);
    MT_UNROLL
    for (int q = 0; q < VEC; q++) {
      acc[q] = __fadd_rn(acc[q], g[q]);
    }
  }
  store8(dtable, tdt, dst + c, dst + h, acc, vec);
}
