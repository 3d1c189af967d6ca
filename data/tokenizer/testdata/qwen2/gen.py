#!/usr/bin/env python3
"""gen.py writes a small tokenizer in the form of Qwen2's, Qwen2.5's and
Qwen3's tokenizer.json (which cannot be downloaded here): an NFC normalizer,
a Split on Qwen's pattern, then ByteLevel without its regex, byte-level BPE
and their special tokens, with a vocabulary learned here. Beside it:

  tokenizer.json, tokenizer_config.json  the tokenizer;
  golden.jsonl                           texts and their ids, by the
                                         reference encoding below (Python's
                                         regex for the Split, then BPE by
                                         merge rank), for the Go tests.

It is deterministic: python3 gen.py writes the same files.
"""

import collections
import gzip
import json
import os
import unicodedata

import regex

HERE = os.path.dirname(os.path.abspath(__file__))
ASSETS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "assets"))

QWEN_PATTERN = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = 1500


def bytes_to_unicode():
    """GPT-2's byte-level alphabet, in its order: the printable bytes, then
    the rest mapped past U+00FF."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return list(zip(bs, (chr(c) for c in cs)))


BYTE_ORDER = bytes_to_unicode()
BYTE_CHAR = dict(BYTE_ORDER)


def byte_level(s):
    return "".join(BYTE_CHAR[b] for b in s.encode("utf-8"))


def corpus(name, budget, every, skip=0):
    with gzip.open(os.path.join(ASSETS, name + ".gz"), "rt", encoding="utf-8") as f:
        out, total = [], 0
        for i, line in enumerate(f):
            if i < skip or (i - skip) % every:
                continue
            t = json.loads(line)["text"]
            out.append(t)
            total += len(t)
            if total >= budget:
                break
    return out


def train(texts):
    """Learns MERGES merges on the pre-tokenized texts: each the most
    frequent adjacent pair, the first in order on ties."""
    pat = regex.compile(QWEN_PATTERN)
    freq = collections.Counter()
    for t in texts:
        for w in pat.findall(unicodedata.normalize("NFC", t)):
            freq[byte_level(w)] += 1
    words = [list(w) for w in freq]
    counts = [freq[w] for w in freq]
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for i, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[a, b] += counts[i]
            where[a, b].add(i)
    merges = []
    for _ in range(MERGES):
        best = min((p for p in pairs if pairs[p] > 0), key=lambda p: (-pairs[p], p), default=None)
        if best is None:
            break
        merges.append(best)
        a, b = best
        for i in sorted(where[best]):
            w = words[i]
            for x, y in zip(w, w[1:]):
                pairs[x, y] -= counts[i]
            out, k = [], 0
            while k < len(w):
                if k + 1 < len(w) and w[k] == a and w[k + 1] == b:
                    out.append(a + b)
                    k += 2
                else:
                    out.append(w[k])
                    k += 1
            words[i] = out
            for x, y in zip(out, out[1:]):
                pairs[x, y] += counts[i]
                where[x, y].add(i)
        del pairs[best]
    return merges


def bpe(word, ranks):
    """Merges the pair of lowest rank, each of its occurrences from the
    left, until no pair has a rank (GPT-2's bpe)."""
    parts = list(word)
    while len(parts) > 1:
        pair = min(zip(parts, parts[1:]), key=lambda p: ranks.get(p, len(ranks)))
        if pair not in ranks:
            break
        out, k = [], 0
        while k < len(parts):
            if k + 1 < len(parts) and (parts[k], parts[k + 1]) == pair:
                out.append(parts[k] + parts[k + 1])
                k += 2
            else:
                out.append(parts[k])
                k += 1
        parts = out
    return parts


def encode(text, vocab, ranks):
    """The reference encoding: special tokens first, as HF matches added
    tokens that are not normalized; then NFC, the Split and BPE."""
    pat = regex.compile(QWEN_PATTERN)
    ids = []
    for seg in regex.split("(" + "|".join(regex.escape(s) for s in SPECIAL) + ")", text):
        if seg in SPECIAL:
            ids.append(vocab[seg])
            continue
        for w in pat.findall(unicodedata.normalize("NFC", seg)):
            ids += [vocab[p] for p in bpe(byte_level(w), ranks)]
    return ids


def main():
    train_texts = corpus("austen.jsonl", 150000, 11) + corpus("sotu.jsonl", 100000, 5)
    merges = train(train_texts)
    vocab = {c: i for i, (_, c) in enumerate(BYTE_ORDER)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    n = len(vocab)
    added = [{"id": n + k, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for k, s in enumerate(SPECIAL)]
    byte_level_opts = {"add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated", "invert": False},
            dict({"type": "ByteLevel"}, **byte_level_opts),
        ]},
        "post_processor": dict({"type": "ByteLevel"}, **byte_level_opts),
        "decoder": dict({"type": "ByteLevel"}, **byte_level_opts),
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }
    with open(os.path.join(HERE, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    config = {
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 32768,
        "tokenizer_class": "Qwen2Tokenizer",
        "chat_template": "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
    }
    with open(os.path.join(HERE, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
        f.write("\n")

    ranks = {m: r for r, m in enumerate(merges)}
    ids = dict(vocab, **{a["content"]: a["id"] for a in added})
    golden = [
        "", "Hello world", "It's 2024: 12345 apples, don't you think?", "  two  spaces \t tab\r\nCRLF\n\n",
        "e\u0301t\u00e9 \u212b \ufb01", "日本語 中文 한국어 Ελληνικά Русский \u1c89\u1c8a",
        "👍🏽 ok 😀 \U00010d40\U00010d41", "'S 'ſ I'LL WE'RE", "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
        "a<|endoftext|>b", "\u00a0\u3000\u2028x", "x   ",
    ]
    golden += corpus("austen.jsonl", 20000, 101, skip=3) + corpus("sotu.jsonl", 10000, 13, skip=1)
    with open(os.path.join(HERE, "golden.jsonl"), "w", encoding="utf-8") as f:
        for t in golden:
            f.write(json.dumps({"text": t, "ids": encode(t, ids, ranks)}, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
