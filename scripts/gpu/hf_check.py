#!/usr/bin/env python3
"""Loads a checkpoint that memtrain saved (on the GPU) with transformers'
LlamaForCausalLM and compares it with memtrain's own view of it: each
document's loss (memtrain eval loss --json) and a greedy continuation
(memtrain generate --json). Exits 1 when a document's loss differs by more
than --rtol, 2 when transformers is missing. The greedy tokens are reported,
not required to agree: near-ties may go either way in float32.

    python3 scripts/gpu/hf_check.py --model CKPT --docs docs.jsonl \\
        --memtrain-eval eval.json --memtrain-generate gen.jsonl
"""

import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--docs", required=True, help='JSONL of {"input_ids": [...]}')
    ap.add_argument("--memtrain-eval", required=True, help="memtrain eval loss --json output")
    ap.add_argument("--memtrain-generate", required=True, help="memtrain generate --json output")
    ap.add_argument("--rtol", type=float, default=1e-3)
    a = ap.parse_args()
    try:
        import torch
        from transformers import LlamaForCausalLM
    except ImportError as e:
        print(f"SKIP: {e}")
        sys.exit(2)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    model = LlamaForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32).to(dev).eval()
    docs = [json.loads(l)["input_ids"] for l in open(a.docs)]
    ev = json.load(open(a.memtrain_eval))
    per = {d["index"]: d for d in ev.get("per_document", [])}
    worst, ok = 0.0, True
    print("| document | tokens | memtrain loss | transformers loss | relative difference |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    with torch.no_grad():
        for i, ids in enumerate(docs):
            if len(ids) < 2 or i not in per:
                continue
            x = torch.tensor([ids], device=dev)
            loss = model(input_ids=x, labels=x).loss.item()
            mt = per[i]["loss"]
            d = abs(mt - loss) / max(abs(loss), 1e-12)
            worst = max(worst, d)
            print(f"| {i} | {len(ids) - 1} | {mt:.6f} | {loss:.6f} | {d:.2e} |")
    if not per:
        print("memtrain's report has no per-document losses")
        ok = False
    ok = ok and worst <= a.rtol
    print(f"\nloss: worst relative difference {worst:.2e} (tolerance {a.rtol:g}): {'PASS' if ok else 'FAIL'}")

    gen = [json.loads(l) for l in open(a.memtrain_generate) if l.strip()]
    # memtrain ran with --stop-at-eos=false: no early end here either.
    model.generation_config.eos_token_id = None
    with torch.no_grad():
        for g in gen:
            x = torch.tensor([g["prompt_ids"]], device=dev)
            out = model.generate(x, max_new_tokens=len(g["ids"]), min_new_tokens=len(g["ids"]),
                                 do_sample=False, num_beams=1, pad_token_id=0)
            hf = out[0, len(g["prompt_ids"]):].tolist()
            same = 0
            while same < min(len(hf), len(g["ids"])) and hf[same] == g["ids"][same]:
                same += 1
            print(f"greedy: memtrain {g['ids']}\n        transformers {hf}\n        first {same} of {len(g['ids'])} tokens agree")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
