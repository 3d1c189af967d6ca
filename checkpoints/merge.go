package checkpoints

import (
	"fmt"
	"math"
)

// Merging a LoRA adapter into its base (ExportOptions.Adapter): every
// adapted weight becomes W + s·B·A, computed in float64 from the weight
// as stored and rounded once to the export's dtype. Float32 arithmetic
// would not do: where W and s·B·A nearly cancel it is off by many ulps.

// mergeTarget is one adapted weight: its adapter matrices, whole.
type mergeTarget struct {
	a, b []float32 // lora_A [r, in], lora_B [out, r]
}

// mergeTargets reads the adapter's matrices by the HF name of the weight
// each adapts.
func mergeTargets(cfg *Config, ad *Adapter) (map[string]mergeTarget, error) {
	out := map[string]mergeTarget{}
	for l := 0; l < cfg.NumHiddenLayers; l++ {
		for _, m := range loraModules {
			if !ad.Config.Targets(m.name) {
				continue
			}
			a, err := ad.Weights.ReadFloat32(LoRATensorName(l, m.name, "A"))
			if err != nil {
				return nil, err
			}
			b, err := ad.Weights.ReadFloat32(LoRATensorName(l, m.name, "B"))
			if err != nil {
				return nil, err
			}
			out[LayerTensorName(l, m.path)] = mergeTarget{a: a, b: b}
		}
	}
	return out, nil
}

// MergeRows adds s·B·A to rows [r0, r1) of a weight W [out, in] whose
// values w holds (as stored, widened exactly to float32), in float64, and
// returns them rounded once to dtype, as float32 values that the
// safetensors writer then stores exactly: for BF16 the float64 sum is
// rounded to odd in float32 (16 spare bits), so that the writer's
// round-to-nearest-even to bf16 is the one rounding of the exact sum.
func MergeRows(w, a, b []float32, r0, r1, in, r int, s float64, dtype DType) []float32 {
	out := make([]float32, len(w))
	for o := r0; o < r1; o++ {
		bo := b[o*r : (o+1)*r]
		row := w[(o-r0)*in : (o-r0+1)*in]
		for j := range row {
			acc := 0.0
			for k, bk := range bo {
				acc += float64(bk) * float64(a[k*in+j])
			}
			x := float64(row[j]) + s*acc
			if dtype == DTypeBF16 {
				out[(o-r0)*in+j] = roundToOddF32(x)
			} else {
				out[(o-r0)*in+j] = float32(x)
			}
		}
	}
	return out
}

// roundToOddF32 rounds x to a float32 by truncation, setting the last
// mantissa bit when the result is inexact ("round to odd"): a later
// rounding to a format at least two bits narrower then equals rounding x
// directly.
func roundToOddF32(x float64) float32 {
	f := float32(x)
	if math.IsInf(float64(f), 0) || math.IsNaN(x) || float64(f) == x {
		return f
	}
	// Truncate toward zero: step back one ulp if nearest rounded away.
	if math.Abs(float64(f)) > math.Abs(x) {
		f = math.Nextafter32(f, 0)
	}
	bits := math.Float32bits(f) | 1
	return math.Float32frombits(bits)
}

// checkMergeable refuses an adapter whose model is not cfg's.
func checkMergeable(src string, cfg *Config, ad *Adapter) error {
	if err := checkAdapterTensors(ad.Dir, cfg, ad.Config, ad.Weights); err != nil {
		return fmt.Errorf("checkpoints: %s does not adapt %s: %w", ad.Dir, src, err)
	}
	return nil
}
