package engine

import "github.com/memtrain/memtrain/checkpoints"

// MatmulParams is N in the MFU convention: the non-embedding parameters
// and the LM head (once, even when tied to the embedding), so the
// embedding lookup is excluded; the norm weights, (2L+1)·H of them and no
// GEMM's, are in, as PaLM counts N.
//
// These are model FLOPs, the numerator of MFU, the same whatever the
// engine executes; what a step executes, call by call (the causal half of
// attention's scores, recomputation), is Kernel.Cost's (cost.go), and
// engine/llama's kernel list test ties the two together.
func MatmulParams(cfg *checkpoints.Config) int64 {
	n := cfg.Params().NonEmbedding
	// The head multiplies whether or not it shares the embedding's storage.
	return n + int64(cfg.VocabSize)*int64(cfg.HiddenSize)
}

// ModelFLOPsPerToken is the training FLOPs per token at sequence length T,
// as MFU counts them (PaLM's convention): 6·N for the forward and backward
// matrix multiplies plus 12·L·heads·D·T for attention's scores and values.
func ModelFLOPsPerToken(cfg *checkpoints.Config, T int) float64 {
	n := float64(MatmulParams(cfg))
	attn := 12 * float64(cfg.NumHiddenLayers) * float64(cfg.NumAttentionHeads) * float64(cfg.HeadDimension()) * float64(T)
	return 6*n + attn
}
