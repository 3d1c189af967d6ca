package llama

import (
	"math"

	"github.com/memtrain/memtrain/checkpoints"
)

// InvFreq returns RoPE's inverse frequencies for one head, D/2 values,
// exactly as transformers computes them: 1/θ^(2j/D), then, for `llama3`
// rope scaling, divided by the factor for long wavelengths, kept for short
// ones, and smoothly interpolated between (transformers'
// _compute_llama3_parameters). Computed in float64, rounded once.
func InvFreq(cfg *checkpoints.Config) []float32 {
	d := cfg.HeadDimension()
	out := make([]float32, d/2)
	for j := range out {
		f := 1 / math.Pow(cfg.RopeTheta, float64(2*j)/float64(d))
		if rs := cfg.RopeScaling; rs != nil {
			f = llama3Scale(f, rs)
		}
		out[j] = float32(f)
	}
	return out
}

func llama3Scale(invFreq float64, rs *checkpoints.RopeScaling) float64 {
	orig := float64(rs.OriginalMaxPositionEmbeddings)
	lowWavelen := orig / rs.LowFreqFactor
	highWavelen := orig / rs.HighFreqFactor
	wavelen := 2 * math.Pi / invFreq
	switch {
	case wavelen < highWavelen:
		return invFreq
	case wavelen > lowWavelen:
		return invFreq / rs.Factor
	default:
		s := (orig/wavelen - rs.LowFreqFactor) / (rs.HighFreqFactor - rs.LowFreqFactor)
		return (1-s)*invFreq/rs.Factor + s*invFreq
	}
}
