package gguf

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/memtrain/memtrain/checkpoints"
)

// Encoding float32 values as a tensor type's bytes, and back.

// Q8_0 is ggml's 8-bit block quantization: blocks of 32 values, each
// stored as an f16 scale d = max|x|/127 followed by 32 int8 values
// round(x/d), rounded half away from zero, as ggml's
// quantize_row_q8_0_ref and gguf-py's quants.py compute it (the values
// divided by the float32 d, the scale then rounded to f16). A value comes
// back as f16(d)·q, within d/2 + 127·|d − f16(d)| ≤ d·(1/2 + 127·2⁻¹¹) of
// x (f16's relative rounding error is at most 2⁻¹¹ for a normal d).
const q8Block = 32

// EncodedSize is the number of bytes n values of type t take.
func EncodedSize(t TensorType, n int) (int, error) {
	if b := t.Block(); b == 0 || n%b != 0 {
		return 0, fmt.Errorf("gguf: %d values are not whole %s blocks", n, t)
	}
	return n / t.Block() * t.BlockBytes(), nil
}

// Encode appends the values x, as type t (F32, F16, BF16 or Q8_0, whose
// values must be whole blocks), to dst.
func Encode(dst []byte, t TensorType, x []float32) ([]byte, error) {
	switch t {
	case F32:
		for _, v := range x {
			dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(v))
		}
	case F16:
		for _, v := range x {
			dst = binary.LittleEndian.AppendUint16(dst, checkpoints.Float32ToF16(v))
		}
	case BF16:
		for _, v := range x {
			dst = binary.LittleEndian.AppendUint16(dst, checkpoints.Float32ToBF16(v))
		}
	case Q8_0:
		if len(x)%q8Block != 0 {
			return dst, fmt.Errorf("gguf: %d values are not whole Q8_0 blocks of %d", len(x), q8Block)
		}
		for b := 0; b < len(x); b += q8Block {
			dst = appendQ8Block(dst, x[b:b+q8Block])
		}
	default:
		return dst, fmt.Errorf("gguf: cannot encode values as %s", t)
	}
	return dst, nil
}

func appendQ8Block(dst []byte, x []float32) []byte {
	amax := float32(0)
	for _, v := range x {
		amax = max(amax, float32(math.Abs(float64(v))))
	}
	d := amax / 127
	id := float32(0)
	if d != 0 {
		id = 1 / d
	}
	dst = binary.LittleEndian.AppendUint16(dst, checkpoints.Float32ToF16(d))
	for _, v := range x {
		// round half away from zero, as C's roundf
		dst = append(dst, byte(int8(math.Round(float64(v*id)))))
	}
	return dst
}

// Decode reads n values of type t (F32, F16, BF16 or Q8_0) from src, which
// must hold exactly their bytes.
func Decode(src []byte, t TensorType, n int) ([]float32, error) {
	size, err := EncodedSize(t, n)
	if err != nil {
		return nil, err
	}
	if len(src) != size {
		return nil, fmt.Errorf("gguf: %d bytes for %d %s values, want %d", len(src), n, t, size)
	}
	out := make([]float32, n)
	switch t {
	case F32:
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case F16:
		for i := range out {
			out[i] = checkpoints.F16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case BF16:
		for i := range out {
			out[i] = checkpoints.BF16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case Q8_0:
		for b := 0; b < n/q8Block; b++ {
			blk := src[b*34 : (b+1)*34]
			d := checkpoints.F16ToFloat32(binary.LittleEndian.Uint16(blk))
			for j := range q8Block {
				out[b*q8Block+j] = d * float32(int8(blk[2+j]))
			}
		}
	default:
		return nil, fmt.Errorf("gguf: cannot decode %s values", t)
	}
	return out, nil
}
