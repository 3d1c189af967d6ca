// Package memorization measures how much of its training text a model can
// reproduce: extraction protocols (goldfish, Pythia, Carlini, and chat: a
// probe per assistant answer of a conversation, see [Chat]), the batched
// greedy-decoding driver, exact-match, token-match and ROUGE-L metrics, and
// membership-inference scores, per document and aggregated.
//
// The metrics layer is a set of pure functions:
//
//   - [ExactMatch], [TokenMatch] and [PrefixMatch] compare a generated
//     continuation with the true one token by token.
//   - [RougeL], [RougeLIDs] and [RougeLText] compute LCS-based ROUGE-L as
//     Google's rouge_score package does; [RougeTokenize] is its default
//     tokenizer.
//   - [ZlibRatio] and [MinKProb] are membership-inference scores (Carlini et
//     al. 2021; Shi et al. 2023), and [ROCAUC] measures how well a score
//     separates members from non-members.
//   - [Mean] and [BootstrapCI] aggregate per-document values, with
//     deterministic percentile-bootstrap confidence intervals.
//
// Degenerate inputs (empty sequences, empty sets) give documented finite
// values, never NaN.
package memorization
