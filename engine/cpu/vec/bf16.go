package vec

import "github.com/memtrain/memtrain/checkpoints"

// Conversions between float32 and bfloat16 (the upper half of a float32's
// bits), for mixed precision's stand-ins: checkpoints.BF16ToFloat32's
// exact widening and checkpoints.Float32ToBF16's rounding (to nearest,
// ties to even, NaNs kept NaN and quieted), 16 values an instruction in
// AVX-512 and bit-identical to them; the other levels run those functions
// in a loop (AVX2 has no 16-bit down-conversion worth the shuffles).

// WidenBF16 sets dst[i] to the float32 value of the bf16 bit pattern
// src[i], for every i < len(src).
func WidenBF16(dst []float32, src []uint16) {
	n := len(src)
	dst = dst[:n]
	body := 0
	if level == levelAVX512 && n >= block {
		body = n &^ (block - 1)
		widenBF16AVX512(&dst[0], &src[0], body)
	}
	for i := body; i < n; i++ {
		dst[i] = checkpoints.BF16ToFloat32(src[i])
	}
}

// RoundBF16 sets dst[i] to src[i] rounded to the nearest bf16, ties to
// even; a NaN stays a NaN of the same sign, quiet, and an overflow rounds
// to ±Inf.
func RoundBF16(dst []uint16, src []float32) {
	n := len(src)
	dst = dst[:n]
	body := 0
	if level == levelAVX512 && n >= block {
		body = n &^ (block - 1)
		roundBF16AVX512(&dst[0], &src[0], body)
	}
	for i := body; i < n; i++ {
		dst[i] = checkpoints.Float32ToBF16(src[i])
	}
}
