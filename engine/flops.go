package engine

import "github.com/memtrain/memtrain/checkpoints"

// MatmulParams is N in the MFU convention: every parameter that takes part
// in a matrix multiply, so the embedding lookup is excluded and the LM head
// included (once, even when tied to the embedding).
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
