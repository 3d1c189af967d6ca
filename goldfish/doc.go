// Package goldfish computes the token-drop masks of the goldfish loss (Hans
// et al. 2024, "Be like a Goldfish, Don't Memorize!") and the per-token loss
// weights they produce. It works on token ids only and never imports the
// engine.
//
// The goldfish loss is the causal language-modelling loss over a subset G of
// the targets,
//
//	L = −(1/|G|) · Σᵢ Gᵢ · log P(xᵢ | x<ᵢ),
//
// where Gᵢ is 1 for a kept target and 0 for a dropped one. A model never
// receives a training signal for the dropped targets, so it cannot learn to
// reproduce a training document verbatim. A Masker writes G as float32
// weights, ready to multiply the per-token losses; [Masker.Apply] combines
// it with weights that already mask padding.
//
// # Targets
//
// Masks are computed on the targets of one sequence: for token ids
// x[0..n), the targets are x[1..n), target i being the token predicted from
// x[0..i]. Position 0 of a mask is therefore the second token of the
// sequence. This is how the reference implementation applies it (lit_gpt's
// targets = data[:, 1:]).
//
// # Strategies
//
// [Static] drops the targets at positions Start, Start+K, Start+2K, … of the
// sequence passed to [Masker.Mask]: Python's arange(T)[start::k], as the
// reference's goldfish_start_position. It depends on positions only, so a
// document repeated at another offset drops other tokens.
//
// [HashTable] and [HashAvalanche] decide from the H targets ending at the
// target itself, t[i−H+1..i]: the same context drops the same token wherever
// and however often it occurs, so duplicated documents drop the same tokens
// and their dropped tokens are never learnt. The first H−1 targets of a
// sequence have no full context and are never dropped. The key of target i is
// the product of the H ids in int64 arithmetic, wrapping around modulo 2⁶⁴.
//
//   - HashTable reduces the key to key mod 1,000,003, made non-negative as
//     Python's % (and torch.remainder) do, and drops target i when
//     table[key] < 1/K, compared in float32. The table holds the 1,000,003
//     float32 values of torch.rand(1000003) from a CPU torch.Generator
//     seeded with manual_seed(2971215073): entry j is the j-th 32-bit output
//     of MT19937 seeded with init_genrand(2971215073), keeping its low 24
//     bits, times 2⁻²⁴ (see [Table]). The reference builds its table on the
//     targets' device, where a CUDA generator gives other values; memtrain
//     uses the CPU table on every device.
//   - HashAvalanche reinterprets the key as a uint64 and mixes it with Thomas
//     Wang's 64-bit integer hash as lit_gpt's hashint(width=32) writes it,
//     masking to 32 bits after its steps 1, 4, 7 and 10. It drops target i
//     when the hash, converted to float32, is below (2³²−1)/K converted to
//     float32: PyTorch compares an int64 tensor with a Python float in the
//     default float dtype. The float32 rounding matters: for K = 3, hashes
//     1431655745…1431655764 are below (2³²−1)/3 but kept.
//
// With h = 13 and k = 4, the published configuration, about a quarter of the
// targets are dropped. The fixtures of testdata, written by
// scripts/fixtures/make_goldfish_fixtures.py from the reference code run by
// PyTorch, prove the masks bit for bit.
//
// The product key is the reference's and memtrain keeps it for fidelity,
// with its properties: it ignores the order of the context, and a context
// whose ids hold 64 factors of two between them (or a token 0) has the key 0,
// whose decision every such context shares — 2.3% of the 13-token contexts
// of Austen's novels in Llama 3's ids, which raises their drop rate by a
// point or two at k ≤ 4. HashAvalanche's first step keeps only the low 32
// bits of the key.
//
// # Ambiguities resolved
//
// The reference's unfold fails on a sequence shorter than H; a Masker drops
// nothing there. The reference's Static counts positions in the whole
// (packed) row of targets; a Masker counts them from the slice given to it.
// Negative ids, such as an ignore index, enter the products as their int64
// values, as in the reference's int64 targets.
//
// # Performance
//
// A Masker is immutable and safe for concurrent use. New for HashTable
// draws the 1,000,003 table values once (a few milliseconds) and keeps one
// bit per entry, whether it drops; Mask then costs H multiplications and a
// bit lookup per target.
package goldfish
