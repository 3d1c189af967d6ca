#!/usr/bin/env python3
"""The PyTorch peer of memtrain's GPU training-step benchmark
(gpu-bin/cuda.test -test.bench BenchmarkGPUStep).

Trains a Llama of the given shape on random tokens for a few steps and prints
one JSON line: {"impl", "model", "batch", "seq_len", "step_ms", "tokens_per_s",
"model_flops_per_token", "achieved_tflops", "mfu", "peak_tflops", ...}.

--impl plain: plain torch modules (RMSNorm, rotate-half RoPE, causal
grouped-query attention, SwiGLU MLP, untied or tied head), as memtrain computes
them. --impl hf: transformers' LlamaForCausalLM with the same shape.

Mixed precision as memtrain's GPU backend trains by default: float32
parameters, gradients and AdamW moments, products in bf16 (torch.autocast).
--attn sdpa uses torch's fused scaled_dot_product_attention (flash attention on
recent GPUs); --attn eager materialises the T×T probabilities as memtrain does.
A step is zero_grad + forward + cross-entropy + backward + AdamW.

MFU counts FLOPs as memtrain does (PaLM's convention):
6·N + 12·layers·heads·head_dim·T per token, N the parameters that multiply
(embedding excluded, head included once), against the GPU's dense bf16 peak.

    python3 scripts/gpu/torch_step.py --model llama3.1-8b:4 --batch 1 --seq-len 2048
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {
    # hidden, intermediate, layers, heads, kv heads, vocab, tied, rope theta
    "llama3.1-8b": (4096, 14336, 32, 32, 8, 128256, False, 500000.0),
    "llama3.2-1b": (2048, 8192, 16, 32, 8, 128256, True, 500000.0),
    "tiny": (128, 384, 4, 4, 2, 32000, True, 10000.0),
}

PEAKS = [("H200", 989e12), ("H100", 989e12), ("A100", 312e12), ("L40S", 362e12)]


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Block(nn.Module):
    def __init__(self, s, attn):
        super().__init__()
        H, I, heads, kv = s["hidden"], s["inter"], s["heads"], s["kv"]
        self.heads, self.kv, self.d, self.attn = heads, kv, H // heads, attn
        self.ln1, self.ln2 = RMSNorm(H), RMSNorm(H)
        self.q = nn.Linear(H, heads * self.d, bias=False)
        self.k = nn.Linear(H, kv * self.d, bias=False)
        self.v = nn.Linear(H, kv * self.d, bias=False)
        self.o = nn.Linear(heads * self.d, H, bias=False)
        self.gate = nn.Linear(H, I, bias=False)
        self.up = nn.Linear(H, I, bias=False)
        self.down = nn.Linear(I, H, bias=False)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.ln1(x)
        q = self.q(h).view(B, T, self.heads, self.d).transpose(1, 2)
        k = self.k(h).view(B, T, self.kv, self.d).transpose(1, 2)
        v = self.v(h).view(B, T, self.kv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        g = self.heads // self.kv
        k = k.repeat_interleave(g, dim=1)
        v = v.repeat_interleave(g, dim=1)
        if self.attn == "sdpa" and hasattr(F, "scaled_dot_product_attention"):
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-1, -2)) / (self.d ** 0.5)
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            a = s.masked_fill(mask, float("-inf")).softmax(-1).to(v.dtype) @ v
        x = x + self.o(a.transpose(1, 2).reshape(B, T, -1))
        h = self.ln2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, s, attn):
        super().__init__()
        self.s = s
        self.embed = nn.Embedding(s["vocab"], s["hidden"])
        self.blocks = nn.ModuleList(Block(s, attn) for _ in range(s["layers"]))
        self.norm = RMSNorm(s["hidden"])
        self.head = nn.Linear(s["hidden"], s["vocab"], bias=False)
        if s["tied"]:
            self.head.weight = self.embed.weight

    def forward(self, ids):
        T = ids.shape[1]
        d = self.s["hidden"] // self.s["heads"]
        inv = 1.0 / (self.s["theta"] ** (torch.arange(0, d, 2, device=ids.device).float() / d))
        ang = torch.outer(torch.arange(T, device=ids.device).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)
        cos, sin = ang.cos()[None, None], ang.sin()[None, None]
        x = self.embed(ids)
        for b in self.blocks:
            x = b(x, cos, sin)
        return self.head(self.norm(x))


def shape_of(spec):
    name, _, layers = spec.partition(":")
    H, I, L, heads, kv, V, tied, theta = SHAPES[name]
    if layers:
        L = int(layers)
    return dict(hidden=H, inter=I, layers=L, heads=heads, kv=kv, vocab=V, tied=tied, theta=theta)


def flops_per_token(s, T):
    H, I, L, d = s["hidden"], s["inter"], s["layers"], s["hidden"] // s["heads"]
    per_layer = 2 * H * H + 2 * H * s["kv"] * d + 3 * H * I + 2 * H
    n = L * per_layer + H + s["vocab"] * H
    return 6 * n + 12 * L * s["heads"] * d * T


def on_device(build, dev):
    """Builds a module directly on dev where torch can (2.0 and later): a CPU
    initialisation of billions of weights takes long."""
    try:
        with torch.device(dev):
            return build()
    except (AttributeError, TypeError):
        return build().to(dev)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama3.1-8b:4", help="preset[:layers]: " + ", ".join(SHAPES))
    ap.add_argument("--impl", default="plain", choices=["plain", "hf"])
    ap.add_argument("--attn", default="sdpa", choices=["sdpa", "eager"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke test")
    a = ap.parse_args()
    s = shape_of(a.model)
    dev = torch.device(a.device)
    torch.manual_seed(0)
    if a.impl == "hf":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(hidden_size=s["hidden"], intermediate_size=s["inter"], num_hidden_layers=s["layers"],
                          num_attention_heads=s["heads"], num_key_value_heads=s["kv"], vocab_size=s["vocab"],
                          tie_word_embeddings=s["tied"], rope_theta=s["theta"], max_position_embeddings=max(a.seq_len, 2048),
                          attn_implementation=a.attn, torch_dtype=torch.float32)
        model = on_device(lambda: LlamaForCausalLM(cfg), dev)
        forward = lambda ids: model(input_ids=ids).logits
    else:
        model = on_device(lambda: Llama(s, a.attn), dev)
        forward = model
    with torch.no_grad():  # Llama's N(0, 0.02²) matrices, so that the loss starts near ln V
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 0.02)
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    except (TypeError, RuntimeError):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1)
    ids = torch.randint(0, s["vocab"], (a.batch, a.seq_len), device=dev)
    tgt = torch.randint(0, s["vocab"], (a.batch, a.seq_len), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            logits = forward(ids)
        loss = F.cross_entropy(logits.float().view(-1, s["vocab"]), tgt.view(-1))
        loss.backward()
        opt.step()
        return loss

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(a.warmup):
        step()
    sync()
    times = []
    for _ in range(a.steps):
        t = time.perf_counter()
        loss = step()
        sync()
        times.append(time.perf_counter() - t)
    sec = statistics.median(times)
    n = a.batch * a.seq_len
    fpt = flops_per_token(s, a.seq_len)
    name = torch.cuda.get_device_name(0) if dev.type == "cuda" else "cpu"
    peak = next((p for m, p in PEAKS if m in name), 0)
    out = {"impl": "torch-" + a.impl + "-" + a.attn, "model": a.model, "batch": a.batch, "seq_len": a.seq_len,
           "step_ms": sec * 1e3, "tokens_per_s": n / sec, "model_flops_per_token": fpt,
           "achieved_tflops": n / sec * fpt / 1e12, "loss": float(loss), "device": name,
           "torch": torch.__version__}
    if dev.type == "cuda":
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
    if peak:
        out["peak_tflops"] = peak / 1e12
        out["mfu"] = n / sec * fpt / peak
    print(json.dumps(out))


if __name__ == "__main__":
    main()
