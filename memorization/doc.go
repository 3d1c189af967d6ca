// Package memorization measures how much of its training text a model can
// reproduce: extraction protocols (goldfish, Pythia, Carlini), the batched
// greedy-decoding driver, exact-match, token-match and ROUGE-L metrics, and
// membership-inference scores, per document and aggregated.
//
// The evaluator is built by the memorization issue; this package is the place
// reserved for it in the package map.
package memorization
