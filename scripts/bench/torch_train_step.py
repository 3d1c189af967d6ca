#!/usr/bin/env python3
"""The PyTorch peer of memtrain's training-step benchmark.

Trains a Llama of the given shape (HF LlamaForCausalLM architecture: RMSNorm,
RoPE in the rotate_half layout, causal grouped-query attention, SwiGLU MLP,
LM head untied or, with --tie, tied) in float32 (or, with --precision bf16,
under torch.autocast's bf16) on the CPU with AdamW, on random token batches,
and prints one JSON line:

    {"impl": "torch", "tokens_per_s": ..., "step_ms_median": ..., "threads": ...,
     "params": ..., "torch_version": ..., ...}

A step is forward + weighted cross-entropy + backward + AdamW update
(zero_grad included); tokens_per_s is batch*seq_len / median step time over
the timed steps, after --warmup untimed ones. The implementation is plain
torch modules (torch 1.13 has no scaled_dot_product_attention: attention is
matmul + masked softmax).

    /usr/bin/python3 scripts/bench/torch_train_step.py --hidden 256 --layers 4 \\
        --heads 4 --kv-heads 4 --intermediate 688 --vocab 32000 --batch 4 \\
        --seq-len 256 --threads 2 --steps 10 --warmup 3
"""

import argparse
import json
import math
import platform
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Attention(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.nh, self.nkv, self.d = a.heads, a.kv_heads, a.hidden // a.heads
        self.q_proj = nn.Linear(a.hidden, self.nh * self.d, bias=False)
        self.k_proj = nn.Linear(a.hidden, self.nkv * self.d, bias=False)
        self.v_proj = nn.Linear(a.hidden, self.nkv * self.d, bias=False)
        self.o_proj = nn.Linear(self.nh * self.d, a.hidden, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.d).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.nkv, self.d).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.d).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        g = self.nh // self.nkv
        if g > 1:
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
        s = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(self.d)) + mask
        p = torch.softmax(s, dim=-1)
        return self.o_proj((p @ v).transpose(1, 2).reshape(B, T, self.nh * self.d))


class MLP(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.gate_proj = nn.Linear(a.hidden, a.intermediate, bias=False)
        self.up_proj = nn.Linear(a.hidden, a.intermediate, bias=False)
        self.down_proj = nn.Linear(a.intermediate, a.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.input_layernorm = RMSNorm(a.hidden, a.eps)
        self.self_attn = Attention(a)
        self.post_attention_layernorm = RMSNorm(a.hidden, a.eps)
        self.mlp = MLP(a)

    def forward(self, x, cos, sin, mask):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return h + self.mlp(self.post_attention_layernorm(h))


class Llama(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed_tokens = nn.Embedding(a.vocab, a.hidden)
        self.layers = nn.ModuleList(Layer(a) for _ in range(a.layers))
        self.norm = RMSNorm(a.hidden, a.eps)
        self.lm_head = nn.Linear(a.hidden, a.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
        if a.tie:
            self.lm_head.weight = self.embed_tokens.weight
        d = a.hidden // a.heads
        inv = 1.0 / (a.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = torch.outer(torch.arange(a.seq_len, dtype=torch.float32), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        mask = torch.full((a.seq_len, a.seq_len), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, ids):
        T = ids.shape[1]
        cos, sin, mask = self.cos[:T], self.sin[:T], self.mask[:T, :T]
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


def weighted_ce(logits, targets, weights):
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    w = weights.reshape(-1)
    return (w * nll).sum() / w.sum()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=None, help="default: --heads")
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--eps", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tie", action="store_true", help="tie the LM head to the embedding (memtrain's small presets do)")
    ap.add_argument("--precision", choices=("f32", "bf16"), default="f32",
                    help="bf16: the forward and the loss under torch.autocast('cpu', torch.bfloat16), "
                         "PyTorch's CPU mixed precision (float32 weights, gradients and AdamW)")
    a = ap.parse_args()
    if a.kv_heads is None:
        a.kv_heads = a.heads
    assert a.hidden % a.heads == 0 and a.heads % a.kv_heads == 0 and (a.hidden // a.heads) % 2 == 0

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Llama(a)
    params = sum(p.numel() for p in model.parameters())
    decay = [p for n, p in model.named_parameters() if not n.endswith("norm.weight")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("norm.weight")]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, betas=(0.9, 0.95), eps=1e-8, foreach=True)

    g = torch.Generator().manual_seed(a.seed + 1)
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        ids = torch.randint(a.vocab, (a.batch, a.seq_len + 1), generator=g)
        inputs, targets = ids[:, :-1], ids[:, 1:]
        weights = torch.ones(a.batch, a.seq_len)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = weighted_ce(model(inputs), targets, weights)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        dt = time.perf_counter() - t0
        if step >= a.warmup:
            times.append(dt)

    med = statistics.median(times)
    print(json.dumps({
        "impl": "torch",
        "tokens_per_s": round(a.batch * a.seq_len / med, 1),
        "step_ms_median": round(med * 1e3, 2),
        "step_ms_min": round(min(times) * 1e3, 2),
        "threads": a.threads,
        "precision": a.precision,
        "params": params,
        "torch_version": torch.__version__,
        "shape": {"hidden": a.hidden, "layers": a.layers, "heads": a.heads, "kv_heads": a.kv_heads,
                  "intermediate": a.intermediate, "vocab": a.vocab, "tie": a.tie, "batch": a.batch, "seq_len": a.seq_len},
        "steps": a.steps,
        "warmup": a.warmup,
        "loss_first": round(losses[0], 4),
        "loss_last": round(losses[-1], 4),
        "cpu": platform.processor() or platform.machine(),
    }))


if __name__ == "__main__":
    main()
