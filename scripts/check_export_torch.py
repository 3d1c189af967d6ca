#!/usr/bin/env python3
# check_export_torch.py A B — load two HF checkpoint folders written by
# `memtrain export` with torch alone and compare them.
#
#   /usr/bin/python3 scripts/check_export_torch.py EXPORT_A EXPORT_B
#
# It loads an HF checkpoint folder's safetensors shards with torch alone (a plain
# reader: 8-byte header length, JSON header, raw little-endian data), check the
# index, names and shapes against config.json, and compare two exports.
import json, struct, sys, torch, os
DT = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16}
def load(d):
    ip = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(ip):
        idx = json.load(open(ip))
    else:  # one file: HF writes no index
        idx = {"weight_map": {n: "model.safetensors" for n in json.loads(open(os.path.join(d, "model.safetensors"), "rb").read()[8:8+struct.unpack("<Q", open(os.path.join(d, "model.safetensors"), "rb").read(8))[0]]) if n != "__metadata__"}}
    out = {}
    for f in sorted(set(idx["weight_map"].values())):
        raw = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        hdr = json.loads(raw[8:8+n])
        base = 8 + n
        for name, t in hdr.items():
            if name == "__metadata__": continue
            a, b = t["data_offsets"]
            out[name] = torch.frombuffer(bytearray(raw[base+a:base+b]), dtype=DT[t["dtype"]]).reshape(t["shape"])
            assert idx["weight_map"][name] == f, name
    return idx, out
cfg = json.load(open(os.path.join(sys.argv[1], "config.json")))
idx, a = load(sys.argv[1])
_, b = load(sys.argv[2])
H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
assert a["model.embed_tokens.weight"].shape == (cfg["vocab_size"], H)
assert a["model.layers.0.self_attn.q_proj.weight"].shape[1] == H
assert len([k for k in a if k.startswith("model.layers.")]) == 9 * L
assert set(a) == set(b), set(a) ^ set(b)
worst = max(((a[k].float() - b[k].float()).abs().max() / b[k].float().abs().max().clamp(min=1e-30)).item() for k in a)
print(f"torch {torch.__version__}: {len(a)} tensors in {len(set(idx['weight_map'].values()))} files, HF names and shapes as config.json says; largest relative difference between the two exports {worst:.2e}")
