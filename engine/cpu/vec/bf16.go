package vec

import "math"

// Conversions between float32 and bfloat16 (the upper half of a float32's
// bits), for mixed precision's stand-ins: widening is exact; rounding is
// to nearest, ties to even, with NaNs kept NaN (quieted), as
// checkpoints.Float32ToBF16 rounds. Both are bit-identical on every path;
// the AVX-512 one converts 16 values an instruction, the others run the Go
// loop (AVX2 has no 16-bit down-conversion worth the shuffles).

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
		dst[i] = math.Float32frombits(uint32(src[i]) << 16)
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
		dst[i] = roundBF16(src[i])
	}
}

// roundBF16 is one element of RoundBF16: the carry of the lower half, plus
// the kept half's last bit for ties to even; a NaN's upper half with the
// quiet bit set.
func roundBF16(v float32) uint16 {
	x := math.Float32bits(v)
	if x&0x7fffffff > 0x7f800000 {
		return uint16(x>>16) | 0x0040
	}
	return uint16((x + 0x7fff + (x>>16)&1) >> 16)
}
