package engine

import "math"

// A split master holds a float32 weight x as two 16-bit halves: hi, the
// bfloat16 the passes multiply by, x rounded to nearest, and lo, the
// signed difference between x's bits and hi's, so that JoinF32(SplitF32(x))
// is x bit for bit (a NaN excepted: it comes back as a quiet NaN of its
// sign; masters are never NaN, since a non-finite step changes nothing).
//
// Why ties round away from zero rather than to even: the float32s that
// round to nearest even to an even bfloat16 are 65,537 bit patterns (both
// ties included) and to an odd one 65,535 (neither), so no 16-bit residual
// tells them apart; rounding ties away from zero gives every bfloat16
// exactly 65,536 (its bits −0x8000 … +0x7FFF around it, magnitudes
// counted as integers). hi differs from the nearest-even rounding only on
// an exact tie (x's low half 0x8000) with an even upper half, where it is
// one bfloat16 step larger in magnitude.

// SplitF32 splits x into its high half, x's magnitude rounded to nearest
// with ties away from zero, and the 16-bit residual lo.
func SplitF32(x float32) (hi, lo uint16) {
	u := math.Float32bits(x)
	sign, a := uint16(u>>16)&0x8000, u&0x7fffffff
	if a > 0x7f800000 { // NaN
		return sign | 0x7fc0, 0
	}
	h := (a + 0x8000) >> 16 // ≤ 0x7f80, infinity
	return sign | uint16(h), uint16(a - h<<16)
}

// JoinF32 is the float32 that SplitF32 split into hi and lo.
func JoinF32(hi, lo uint16) float32 {
	sign, h := uint32(hi&0x8000)<<16, uint32(hi&0x7fff)
	if h > 0x7f80 {
		return math.Float32frombits(sign | h<<16)
	}
	return math.Float32frombits(sign | uint32(int32(h<<16)+int32(int16(lo))))
}

// MasterSplitter is implemented by the backends that hold AdamW's state
// compactly: split masters (Param.Low) — they convert between a float32
// master and its halves — and BF16 moments; their AdamWStep updates both
// in place (AdamWTensors.Low, AdamWTensors.Round).
type MasterSplitter interface {
	// SplitMaster writes SplitF32 of every element of master (F32) into
	// hi and lo (BF16 tensors of master's length).
	SplitMaster(hi, lo, master *Tensor)
	// JoinMaster writes JoinF32 of hi and lo into master.
	JoinMaster(master, hi, lo *Tensor)
	// DecodeMoment writes moment k's (0: m, 1: v) values of the I8
	// codes and q's scales into dst (F32), DecodeInt8 piece by piece.
	DecodeMoment(dst, codes *Tensor, q *Int8Moments, k int)
	// EncodeMoment writes the codes and scales of src's values of
	// moment k into codes and q's scales, rounding to nearest: the
	// inverse of DecodeMoment (int8.go).
	EncodeMoment(codes *Tensor, q *Int8Moments, k int, src *Tensor)
}
