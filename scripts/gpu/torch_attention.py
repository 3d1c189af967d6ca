#!/usr/bin/env python3
"""torch's flash attention, the peer of memtrain's attention benchmark
(gpu-bin/cuda.test -test.bench BenchmarkGPUAttention): bf16 causal
scaled_dot_product_attention on the flash backend, forward and backward, one
JSON line per case {"impl", "case", "batch", "seq_len", "heads", "kv_heads",
"head_dim", "ms", "tflops"}, the median of timed runs after warm-up, with the
FLOPs counted as memtrain counts them (4·B·H·T²·D/2 forward, 2.5× that
backward).

    python3 scripts/gpu/torch_attention.py --seq-lens 4096,8192 --heads 32,8,128
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def median_secs(f):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    times = []
    while len(times) < 3 or (sum(times) < 0.5 and len(times) < 50):
        t = time.perf_counter()
        f()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def flash():
    # torch >= 2.3 names the backend through sdpa_kernel; older ones through
    # sdp_kernel's flags.
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False, enable_mem_efficient=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq-lens", default="4096,8192")
    ap.add_argument("--heads", default="32,8,128", help="heads,kv_heads,head_dim")
    a = ap.parse_args()
    H, KV, D = (int(x) for x in a.heads.split(","))
    B = 1
    for T in [int(x) for x in a.seq_lens.split(",")]:
        q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(B, KV, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(B, KV, T, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        dout = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)

        def native():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

        def repeated():
            # A flash backend without GQA takes equal head counts: the K/V
            # heads are repeated for it (inside the timed region, as a
            # model would).
            kk = k.repeat_interleave(H // KV, dim=1)
            vv = v.repeat_interleave(H // KV, dim=1)
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=True)

        with flash():
            attend, gqa = native, "native"
            try:
                native()
            except (RuntimeError, TypeError):
                attend, gqa = repeated, "repeated k/v"
            fwd_s = median_secs(lambda: attend())
            out = attend()
            bwd_s = median_secs(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
        fwd = 2.0 * B * H * T * T * D
        for case, secs, flops in [("fwd", fwd_s, fwd), ("bwd", bwd_s, 2.5 * fwd), ("fwd+bwd", fwd_s + bwd_s, 3.5 * fwd)]:
            print(json.dumps({"impl": "torch flash sdpa", "case": case, "batch": B, "seq_len": T, "heads": H, "kv_heads": KV,
                              "head_dim": D, "gqa": gqa, "ms": secs * 1e3, "tflops": flops / secs / 1e12,
                              "device": torch.cuda.get_device_name(0)}))
        del q, k, v, dout, out
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
