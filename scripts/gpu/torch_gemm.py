#!/usr/bin/env python3
"""torch.matmul's rate, the peer of memtrain's GEMM benchmark
(gpu-bin/cuda.test -test.bench BenchmarkGPUGemm): one JSON line per case,
{"impl", "case", "m", "n", "k", "ms", "tflops"}, the median of timed runs after
warm-up.

    python3 scripts/gpu/torch_gemm.py --sizes 8192
"""

import argparse
import json
import statistics
import time

import torch


def rate(a, b, out_dtype=None):
    def mm():
        c = a @ b
        return c if out_dtype is None else c.to(out_dtype)

    for _ in range(3):
        mm()
    torch.cuda.synchronize()
    times = []
    while len(times) < 3 or (sum(times) < 0.5 and len(times) < 50):
        t = time.perf_counter()
        mm()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="8192")
    a = ap.parse_args()
    for n in [int(x) for x in a.sizes.split(",")]:
        for case, dtype, tf32 in [("bf16", torch.bfloat16, False), ("f32 (tf32)", torch.float32, True), ("f32", torch.float32, False)]:
            torch.backends.cuda.matmul.allow_tf32 = tf32
            x = torch.randn(n, n, device="cuda", dtype=dtype)
            y = torch.randn(n, n, device="cuda", dtype=dtype)
            sec = rate(x, y)
            print(json.dumps({"impl": "torch", "case": case, "m": n, "n": n, "k": n, "ms": sec * 1e3,
                              "tflops": 2 * n ** 3 / sec / 1e12, "device": torch.cuda.get_device_name(0)}))
            del x, y
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
