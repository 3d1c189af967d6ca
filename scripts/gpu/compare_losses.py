#!/usr/bin/env python3
"""Compares the per-step training losses of two memtrain runs (their
metrics.jsonl): prints a table and exits 1 when a step's loss differs by more
than --rtol (relative).

    python3 scripts/gpu/compare_losses.py cpu/metrics.jsonl gpu/metrics.jsonl --rtol 0.02
"""

import argparse
import json
import sys


def losses(path):
    out = {}
    with open(path) as f:
        for line in f:
            m = json.loads(line)
            if "loss" in m:
                out[m["step"]] = m["loss"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("other")
    ap.add_argument("--rtol", type=float, default=0.02)
    a = ap.parse_args()
    ref, oth = losses(a.reference), losses(a.other)
    steps = sorted(set(ref) & set(oth))
    if not steps or len(steps) != len(ref):
        print(f"steps differ: {sorted(ref)} vs {sorted(oth)}")
        sys.exit(1)
    worst = 0.0
    print("| step | reference | other | relative difference |")
    print("| ---: | ---: | ---: | ---: |")
    for s in steps:
        d = abs(oth[s] - ref[s]) / max(abs(ref[s]), 1e-12)
        worst = max(worst, d)
        print(f"| {s} | {ref[s]:.6f} | {oth[s]:.6f} | {d:.2e} |")
    ok = worst <= a.rtol
    print(f"\nworst relative difference {worst:.2e} (tolerance {a.rtol:g}): {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
